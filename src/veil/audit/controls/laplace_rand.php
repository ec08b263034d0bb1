<?php
// Positive control for `veil audit command` (must FAIL): the PHP seed's laplaceNoise,
// transcribed. Its flaws: rand()/getrandmax() is not cryptographic and has 31 bits, and the
// inverse-CDF float Laplace leaks the input through the float granularity of x + noise
// (Mironov 2012). Usage: php laplace_rand.php INPUT [COUNT] [EPSILON]; prints COUNT noisy values.
function laplaceNoise(float $epsilon, float $sensitivity): float {
    $u = rand() / getrandmax() - 0.5; // [-0.5, 0.5]
    $beta = $sensitivity / $epsilon;
    return -$beta * sign($u) * log(1 - 2 * abs($u));
}
function sign(float $val): float {
    return $val >= 0 ? 1 : -1;
}
$input = (float) $argv[1];
$count = isset($argv[2]) ? (int) $argv[2] : 1;
$epsilon = isset($argv[3]) ? (float) $argv[3] : 1.0;
for ($i = 0; $i < $count; $i++) {
    echo var_export($input + laplaceNoise($epsilon, 1.0), true), "\n";
}
