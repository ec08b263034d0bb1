<?php
// Positive control for `veil audit command --claim-scores` (must FAIL on conformance): the PHP
// seed's exponentialMechanism, transcribed. Its flaw: the weight exp(ε·(max − score)/2Δ)
// favours the *worst* option (the right weight is exp(ε·score/2Δ)); it is still ε-DP, but its
// outputs do not follow the exponential mechanism's pmf. mt_rand() is not cryptographic either.
// Usage: php exponential_inverted.php SCORES [COUNT] [EPSILON]; SCORES comma-separated; prints
// COUNT chosen indexes (0-based), one per line.
function exponentialMechanism(array $scores, float $epsilon): mixed {
    $maxScore = max($scores);
    $sensitivity = 1.0;
    $weights = [];
    foreach ($scores as $key => $score) {
        $scoreDiff = $maxScore - $score;
        $weights[$key] = exp(($epsilon * $scoreDiff) / (2 * $sensitivity));
    }
    $totalWeight = array_sum($weights);
    $randomValue = mt_rand() / mt_getrandmax() * $totalWeight;
    $cumulative = 0;
    foreach ($weights as $key => $weight) {
        $cumulative += $weight;
        if ($randomValue <= $cumulative) {
            return $key;
        }
    }
    return array_key_first($scores);
}
$scores = array_map('floatval', explode(',', $argv[1]));
$count = isset($argv[2]) ? (int) $argv[2] : 1;
$epsilon = isset($argv[3]) ? (float) $argv[3] : 1.0;
for ($i = 0; $i < $count; $i++) {
    echo exponentialMechanism($scores, $epsilon), "\n";
}
