<?php

declare(strict_types=1);

namespace Veil\Tests;

/**
 * The exponential mechanism favours the best option. The seed weighted option k by
 * exp(ε·(max − score_k) / 2Δ), which favours the *worst*; the right weight is
 * exp(ε·score_k / 2Δ).
 */
final class ExponentialMechanismTest extends TestCase
{
    private const CALLS = 300;

    /**
     * Scores A = 3, B = 2, C = 0 with ε = 1 and Δ = 1: the exact probabilities are
     * e^1.5 : e^1 : e^0 normalised = 0.5465, 0.3315, 0.1220. Over 300 independent calls each
     * option's count must lie within 4.5 binomial standard deviations of 300·p (two-sided
     * false failure < 7e-6 per option, < 2.1e-5 for the test), and A must be chosen most often.
     *
     * The seed's inverted weights give 0.1402, 0.2312, 0.6285: A would be expected 42 times,
     * 14 standard deviations below 164 — the test fails them.
     */
    public function testSelectionFrequenciesFollowTheExactProbabilitiesAndFavourTheBest(): void
    {
        $scores = ['A' => 3, 'B' => 2, 'C' => 0];
        $epsilon = 1.0;
        $sensitivity = 1.0;
        $weights = array_map(static fn ($s) => exp($epsilon * $s / (2 * $sensitivity)), $scores);
        $total = array_sum($weights);
        $probabilities = array_map(static fn ($w) => $w / $total, $weights);

        $veil = self::client();
        $before = $veil->remainingBudget(self::MECHANISMS);
        $counts = array_fill_keys(array_keys($scores), 0);
        $started = microtime(true);
        for ($i = 0; $i < self::CALLS; $i++) {
            $choice = $veil->exponentialMechanism($scores, $epsilon, $sensitivity, self::MECHANISMS);
            $counts[$choice->key]++;
        }
        $seconds = microtime(true) - $started;

        $report = [];
        foreach ($probabilities as $key => $p) {
            $expected = self::CALLS * $p;
            $sd = sqrt(self::CALLS * $p * (1 - $p));
            $report[] = sprintf('%s: %d (expected %.1f ± %.1f)', $key, $counts[$key], $expected, $sd);
            self::assertLessThanOrEqual(4.5 * $sd, abs($counts[$key] - $expected), implode('; ', $report));
        }
        self::assertGreaterThan($counts['B'], $counts['A'], implode('; ', $report));
        self::assertGreaterThan($counts['C'], $counts['B'], implode('; ', $report));
        fwrite(STDERR, sprintf(
            "\nexponential mechanism, %d calls in %.1f s: %s\n",
            self::CALLS,
            $seconds,
            implode('; ', $report),
        ));

        // each call charged ε = 1 to the mechanism grant, exactly
        $after = $veil->remainingBudget(self::MECHANISMS);
        self::assertEqualsWithDelta((float) $before->epsilon - self::CALLS * $epsilon, (float) $after->epsilon, 1e-9);
    }

    public function testTheChoiceIsAKeyOfTheScoresWithItsCost(): void
    {
        $choice = self::client()->exponentialMechanism([10 => 5, 20 => 1], '1/2', 1, self::MECHANISMS);

        self::assertContains($choice->key, [10, 20]);
        self::assertSame($choice->key === 10 ? 0 : 1, $choice->index);
        self::assertSame('1/2', self::exactEpsilon($choice->cost));
    }
}
