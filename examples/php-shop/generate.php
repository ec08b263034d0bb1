<?php

/**
 * Writes the shop's synthetic order table: `php generate.php orders.csv [--customers N]`.
 *
 * Columns: order_id, customer_id, region, category, amount. Each customer lives in one region
 * and places 1–8 orders (the catalog keeps at most 5 per customer); amounts are in euros,
 * skewed like real baskets. Invented data only — nothing from a real shop.
 *
 * The generator is seeded so that every run writes the same table (tests compare with it).
 * mt_rand() is fine for *inventing data*; it must never make DP noise (the seed article's
 * rand()/getrandmax() flaw): veil draws the noise, from the operating system's CSPRNG.
 */

declare(strict_types=1);

const REGIONS = ['North' => 30, 'South' => 22, 'East' => 18, 'West' => 20, 'Central' => 10];
const CATEGORIES = [
    // category => [popularity, median basket in euros]
    'Groceries' => [34, 38.0],
    'Books' => [17, 24.0],
    'Electronics' => [14, 145.0],
    'Clothing' => [16, 62.0],
    'Garden' => [10, 55.0],
    'Toys' => [9, 31.0],
];

function pick(array $weights): string
{
    $r = mt_rand(1, array_sum($weights));
    foreach ($weights as $key => $weight) {
        $r -= $weight;
        if ($r <= 0) {
            return (string) $key;
        }
    }
    return (string) array_key_last($weights);
}

/** A log-normal basket with the category's median, rounded to cents, within [1, 480]. */
function basket(float $median): float
{
    $u1 = mt_rand(1, mt_getrandmax()) / mt_getrandmax();
    $u2 = mt_rand(1, mt_getrandmax()) / mt_getrandmax();
    $normal = sqrt(-2 * log($u1)) * cos(2 * M_PI * $u2);
    return round(min(480.0, max(1.0, $median * exp(0.6 * $normal))), 2);
}

$args = array_slice($argv, 1);
$out = null;
$customers = 3000;
while ($args !== []) {
    $arg = array_shift($args);
    if ($arg === '--customers') {
        $customers = (int) array_shift($args);
    } elseif ($out === null && !str_starts_with($arg, '--')) {
        $out = $arg;
    } else {
        fwrite(STDERR, "usage: php generate.php OUT.csv [--customers N]\n");
        exit(2);
    }
}
if ($out === null || $customers < 1) {
    fwrite(STDERR, "usage: php generate.php OUT.csv [--customers N]\n");
    exit(2);
}

mt_srand(20261201); // synthetic data, reproducible; never noise
$popularity = array_map(static fn (array $c) => $c[0], CATEGORIES);
$file = fopen($out, 'wb');
fputcsv($file, ['order_id', 'customer_id', 'region', 'category', 'amount']);
$orderId = 0;
for ($customer = 1; $customer <= $customers; $customer++) {
    $region = pick(REGIONS);
    $favourite = pick($popularity); // most of a customer's orders are in one category
    $orders = min(8, 1 + (int) floor(-log(mt_rand(1, mt_getrandmax()) / mt_getrandmax()) * 1.6));
    for ($i = 0; $i < $orders; $i++) {
        $category = mt_rand(1, 100) <= 70 ? $favourite : pick($popularity);
        $amount = basket(CATEGORIES[$category][1]);
        fputcsv($file, [++$orderId, $customer, $region, $category, sprintf('%.2f', $amount)]);
    }
}
fclose($file);
fwrite(STDERR, sprintf(
    "wrote %s orders of %s customers to %s\n",
    number_format($orderId),
    number_format($customers),
    $out,
));
