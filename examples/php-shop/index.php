<?php

/**
 * An online shop's private statistics, through the veil PHP client:
 * `php -S 127.0.0.1:8080 -t examples/php-shop` (see README.md).
 *
 * Configured by environment variables:
 *   VEIL_URL            the veil service (default http://127.0.0.1:8000)
 *   VEIL_KEY            the page's API key (`veil admin analyst add shop-web`)
 *   VEIL_SHOP_DATASET   the orders dataset (default "shop")
 *   VEIL_SHOP_GRANT     the grant the category choice is charged to (default "shop-categories")
 *   VEIL_SHOP_ORDERS    the shop's own order file, read to score the categories
 *                       (default orders.csv next to this file)
 *   VEIL_SHOP_CACHE     a file remembering the released category choice (default in the
 *                       system's temporary directory)
 */

declare(strict_types=1);

$composer = __DIR__ . '/vendor/autoload.php';
require is_file($composer) ? $composer : __DIR__ . '/../../clients/php/autoload.php';

use Veil\Client;
use Veil\Exception\BudgetExhaustedException;
use Veil\Exception\VeilException;

const EPSILON_REGIONS = 1.0;   // orders and mean basket per region (one query)
const EPSILON_MEAN = 0.5;      // the shop-wide mean basket
const EPSILON_CATEGORY = 0.5;  // the exponential mechanism's choice

function env(string $name, string $default): string
{
    $value = getenv($name);
    return $value === false || $value === '' ? $default : $value;
}

function e(string|int|float $text): string
{
    return htmlspecialchars((string) $text, ENT_QUOTES | ENT_SUBSTITUTE, 'UTF-8');
}

function count_text(int|float $value): string
{
    return number_format(max(0, (int) round($value)));
}

function euros(float $value): string
{
    return '€' . number_format($value, 2);
}

function eps(?float $value): string
{
    return $value === null ? '?' : rtrim(rtrim(number_format($value, 3), '0'), '.');
}

/**
 * Per category, how many distinct customers bought in it — from the shop's own order file
 * (the application has its data; veil only chooses). One customer adds at most 1 to each
 * score, so the scores' sensitivity is Δ = 1.
 *
 * @return array<string, int>
 */
function category_scores(string $orders): array
{
    $file = new SplFileObject($orders);
    $file->setFlags(SplFileObject::READ_CSV | SplFileObject::SKIP_EMPTY | SplFileObject::READ_AHEAD);
    $buyers = [];
    $header = null;
    foreach ($file as $row) {
        if ($header === null) {
            $header = array_flip($row);
            continue;
        }
        $buyers[$row[$header['category']]][$row[$header['customer_id']]] = true;
    }
    $scores = array_map('count', $buyers);
    ksort($scores);
    return $scores;
}

/**
 * The category the exponential mechanism chose, remembered in `$cache` for these scores: a
 * released choice may be shown again at no cost (post-processing), whereas asking again would
 * draw a fresh choice and be charged again (mechanism calls are not cached by the service).
 *
 * @param array<string, int> $scores
 * @return array{category: string, fresh: bool}
 */
function popular_category(Client $veil, array $scores, string $grant, string $cache): array
{
    $key = hash('sha256', json_encode([$scores, EPSILON_CATEGORY, $grant], JSON_THROW_ON_ERROR));
    $remembered = is_file($cache) ? json_decode((string) file_get_contents($cache), true) : null;
    if (is_array($remembered) && ($remembered['key'] ?? null) === $key) {
        return ['category' => (string) $remembered['category'], 'fresh' => false];
    }
    $choice = $veil->exponentialMechanism($scores, EPSILON_CATEGORY, 1, $grant);
    file_put_contents($cache, json_encode(['key' => $key, 'category' => $choice->key]), LOCK_EX);
    return ['category' => (string) $choice->key, 'fresh' => true];
}

$url = env('VEIL_URL', 'http://127.0.0.1:8000');
$dataset = env('VEIL_SHOP_DATASET', 'shop');
$grant = env('VEIL_SHOP_GRANT', 'shop-categories');
$orders = env('VEIL_SHOP_ORDERS', __DIR__ . '/orders.csv');
$cache = env('VEIL_SHOP_CACHE', sys_get_temp_dir() . '/veil-php-shop-' . md5($url . $dataset) . '.json');

$error = null;
$stats = null;
try {
    $veil = new Client($url, env('VEIL_KEY', ''));
    $regions = $veil->query(
        $dataset,
        'SELECT region, COUNT(*) AS orders, AVG(amount) AS basket FROM ' . Veil\Sql::table($dataset)
        . ' GROUP BY region ORDER BY region',
        ['epsilon' => EPSILON_REGIONS],
    );
    $mean = $veil->noisyMean($dataset, 'amount', EPSILON_MEAN);
    $category = popular_category($veil, category_scores($orders), $grant, $cache);
    $budget = [];
    foreach ($veil->budgets() as $line) {
        $budget[$line->dataset] = $line;
    }
    $stats = compact('regions', 'mean', 'category', 'budget');
} catch (BudgetExhaustedException $e) {
    http_response_code(503);
    $error = sprintf(
        'The privacy budget for these statistics is spent (this page needs %s, %s is left). '
        . 'They come back when the data owner grants more.',
        $e->requested,
        $e->remaining,
    );
} catch (VeilException $e) {
    http_response_code(503);
    $error = 'The statistics are unavailable: ' . $e->getMessage();
}

$largest = 1;
if ($stats !== null) {
    foreach ($stats['regions']->rows as $row) {
        $largest = max($largest, (float) $row['orders']);
    }
}
?>
<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Kestrel &amp; Co. — shop statistics</title>
<style>
  :root {
    --ink: #1d2433; --muted: #5d6678; --line: #e4e7ee; --paper: #f6f7fb; --card: #ffffff;
    --accent: #2f6fde; --accent-soft: #dce7fb; --good: #17885a; --warn: #b4541b;
  }
  * { box-sizing: border-box; }
  body {
    margin: 0; background: var(--paper); color: var(--ink);
    font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  }
  header { background: var(--ink); color: #fff; padding: 28px 0 24px; }
  .wrap { max-width: 960px; margin: 0 auto; padding: 0 24px; }
  header h1 { margin: 0; font-size: 26px; font-weight: 650; letter-spacing: -0.01em; }
  header p { margin: 4px 0 0; color: #b9c2d6; }
  main.wrap { padding-top: 28px; padding-bottom: 24px; }
  .cards { display: grid; grid-template-columns: repeat(3, 1fr); gap: 16px; margin-bottom: 24px; }
  .card {
    background: var(--card); border: 1px solid var(--line); border-radius: 12px; padding: 18px 20px;
    box-shadow: 0 1px 2px rgba(29, 36, 51, 0.04);
  }
  .card h2 { margin: 0 0 6px; font-size: 13px; font-weight: 600; color: var(--muted);
    text-transform: uppercase; letter-spacing: 0.06em; }
  .big { font-size: 30px; font-weight: 650; font-variant-numeric: tabular-nums; }
  .pm { color: var(--muted); font-weight: 500; font-size: 0.62em; white-space: nowrap; }
  .sub { color: var(--muted); font-size: 14px; margin-top: 4px; }
  section.card { margin-bottom: 24px; }
  table { width: 100%; border-collapse: collapse; font-variant-numeric: tabular-nums; }
  th, td { padding: 10px 8px; text-align: left; border-bottom: 1px solid var(--line); }
  th { font-size: 13px; color: var(--muted); font-weight: 600; }
  td.num, th.num { text-align: right; white-space: nowrap; }
  td .pm { font-size: 13px; }
  tr:last-child td { border-bottom: none; }
  .bar { position: relative; height: 10px; background: var(--accent-soft); border-radius: 5px; min-width: 160px; }
  .bar span { position: absolute; left: 0; top: 0; bottom: 0; background: var(--accent); border-radius: 5px; }
  .bar i { position: absolute; top: -3px; bottom: -3px; border-left: 2px solid var(--ink);
    border-right: 2px solid var(--ink); opacity: 0.45; }
  .meter { height: 8px; background: var(--line); border-radius: 4px; overflow: hidden; margin-top: 10px; }
  .meter span { display: block; height: 100%; background: var(--good); }
  .note { background: #fff8e6; border: 1px solid #f1dfb0; border-radius: 12px; padding: 14px 18px;
    color: #5a4a1f; font-size: 14px; }
  .note strong { color: #3f3311; }
  .error { background: #fdeeee; border: 1px solid #f3c4c4; color: #7b1f1f; border-radius: 12px;
    padding: 18px 20px; }
  .tag { display: inline-block; font-size: 12px; padding: 1px 8px; border-radius: 999px;
    background: var(--accent-soft); color: var(--accent); margin-left: 6px; vertical-align: middle;
    text-transform: none; letter-spacing: 0; font-weight: 500; }
  footer.wrap { color: var(--muted); font-size: 13px; padding-bottom: 32px; }
  @media (max-width: 720px) { .cards { grid-template-columns: 1fr; } }
</style>
</head>
<body>
<header>
  <div class="wrap">
    <h1>Kestrel &amp; Co. — shop statistics</h1>
    <p>Orders and baskets across our regions, published with differential privacy by veil.</p>
  </div>
</header>
<main class="wrap">
<?php if ($error !== null) : ?>
  <div class="error" id="error"><?= e($error) ?></div>
<?php else :
    $r = $stats['regions'];
    $m = $stats['mean'];
    $shop = $stats['budget'][$dataset] ?? null;
    $choices = $stats['budget'][$grant] ?? null;
    ?>
  <div class="cards">
    <div class="card" id="mean-basket">
      <h2>Mean basket</h2>
      <div class="big"><?= e(euros((float) $m->value)) ?>
        <span class="pm">± <?= e(euros((float) $m->errorBar)) ?></span></div>
      <div class="sub">per order, all regions</div>
    </div>
    <div class="card" id="popular-category">
      <h2>Most popular category</h2>
      <div class="big" id="category"><?= e($stats['category']['category']) ?></div>
      <div class="sub">chosen by the exponential mechanism (ε = <?= e(eps(EPSILON_CATEGORY)) ?>)<?=
        $stats['category']['fresh'] ? '' : ' · shown again at no cost' ?></div>
    </div>
    <div class="card" id="budget">
      <h2>Privacy budget left</h2>
      <?php if ($shop !== null) : ?>
        <div class="big">ε <?= e(eps($shop->remaining->epsilon)) ?>
          <span class="pm">of <?= e(eps($shop->granted->epsilon)) ?></span></div>
        <div class="meter"><span style="width: <?= e(round(100 * (1 - $shop->used), 1)) ?>%"></span></div>
      <?php endif; ?>
      <?php if ($choices !== null) : ?>
        <div class="sub">category choices: ε <?= e(eps($choices->remaining->epsilon)) ?>
          of <?= e(eps($choices->granted->epsilon)) ?> left</div>
      <?php endif; ?>
    </div>
  </div>

  <section class="card" id="regions">
    <h2>Orders per region
      <?php if ($r->cached) : ?><span class="tag" id="cached">from veil's cache — no budget spent</span><?php endif; ?>
    </h2>
    <table>
      <thead>
        <tr><th>Region</th><th class="num">Orders</th><th></th><th class="num">Mean basket</th></tr>
      </thead>
      <tbody>
      <?php foreach ($r->rows as $i => $row) :
            $orders = (float) $row['orders'];
            $bar = (float) $r->errorBar($i, 'orders');
            $basket = $row['basket'];
            $lo = max(0.0, $orders - $bar) / $largest * 100;
            $hi = min($largest, $orders + $bar) / $largest * 100;
            ?>
        <tr class="region">
          <td><?= e((string) $row['region']) ?></td>
          <td class="num orders"><?= e(count_text($orders)) ?> <span class="pm">± <?= e(count_text($bar)) ?></span></td>
          <td><div class="bar" title="95 % error bar">
            <span style="width: <?= e(round(max(0.0, $orders) / $largest * 100, 1)) ?>%"></span>
            <i style="left: <?= e(round($lo, 1)) ?>%; width: <?= e(round($hi - $lo, 1)) ?>%"></i>
          </div></td>
          <td class="num basket"><?php if ($basket === null) : ?>—<?php else : ?>
            <?= e(euros((float) $basket)) ?>
            <span class="pm">± <?= e(euros((float) $r->errorBar($i, 'basket'))) ?></span><?php endif; ?></td>
        </tr>
      <?php endforeach; ?>
      </tbody>
    </table>
  </section>

  <div class="note" id="about">
    <strong>What the ± means.</strong> Every number here is an estimate: veil added random noise
    to it, just enough that no single customer's orders can be told from the statistics. The
    ± is a 95 % error bar — the true value lies within it 19 times out of 20. Asking the same
    question again returns the same answer from veil's cache and spends no budget.
  </div>
<?php endif; ?>
</main>
<footer class="wrap">
  Dataset <code><?= e($dataset) ?></code> · regions ε = <?= e(eps(EPSILON_REGIONS)) ?>,
  mean basket ε = <?= e(eps(EPSILON_MEAN)) ?> · generated <?= e(gmdate('Y-m-d H:i')) ?> UTC
</footer>
</body>
</html>
