<?php

// No strict_types here on purpose: a caller in PHP's default (coercive) mode would have its
// true turned into 1 by a typed float|int parameter; the client takes mixed and checks.

namespace Veil\Tests;

use Veil\Exception\InvalidRequestException;

/** Booleans and non-exact strings are not numbers: refused before anything is sent. */
final class StrictInputTest extends TestCase
{
    public function testBooleansAndNonExactStringsAreNotNumbersAndNothingIsSent(): void
    {
        $veil = self::client();
        $before = self::exactEpsilon($veil->remainingBudget(self::DATASET));
        $sql = 'SELECT COUNT(*) AS n FROM ' . self::DATASET;
        $calls = [
            'noisyCount(true)' => fn () => $veil->noisyCount(self::DATASET, true),
            'noisyCount(false)' => fn () => $veil->noisyCount(self::DATASET, false),
            "noisyCount('')" => fn () => $veil->noisyCount(self::DATASET, ''),
            "noisyCount('1e-1')" => fn () => $veil->noisyCount(self::DATASET, '1e-1'),
            "query(['epsilon' => true])" => fn () => $veil->query(self::DATASET, $sql, ['epsilon' => true]),
            "query(['delta' => true])" => fn () => $veil->query(self::DATASET, $sql, ['epsilon' => 0.5, 'delta' => true]),
            "query(['max_groups' => '2'])" => fn () => $veil->query(self::DATASET, $sql, ['epsilon' => 0.5, 'max_groups' => '2']),
            "query(['max_groups' => true])" => fn () => $veil->query(self::DATASET, $sql, ['epsilon' => 0.5, 'max_groups' => true]),
            "findBounds(['epsilon' => true])" => fn () => $veil->findBounds(self::DATASET, ['income'], ['epsilon' => true]),
            "findBounds(['max_rows' => '2'])" => fn () => $veil->findBounds(self::DATASET, ['income'], ['epsilon' => 0.1, 'max_rows' => '2']),
        ];
        foreach ($calls as $what => $call) {
            try {
                $call();
                self::fail("refused: $what");
            } catch (InvalidRequestException $e) {
                self::assertStringContainsString('nothing was sent', strtolower($e->getMessage()), $what);
            }
        }
        self::assertSame($before, self::exactEpsilon($veil->remainingBudget(self::DATASET)));
    }

    public function testTheMechanismsRefuseBooleansBeforeSending(): void
    {
        $veil = self::client();
        foreach ([
            'laplace value' => fn () => $veil->laplace([1, true], 0.1, 1, self::MECHANISMS),
            'laplace epsilon' => fn () => $veil->laplace([1], true, 1, self::MECHANISMS),
            'laplace sensitivity' => fn () => $veil->laplace([1], 0.1, true, self::MECHANISMS),
            'exponential score' => fn () => $veil->exponentialMechanism(['a' => 1, 'b' => true], 0.1, 1, self::MECHANISMS),
        ] as $what => $call) {
            try {
                $call();
                self::fail("refused: $what");
            } catch (InvalidRequestException $e) {
                self::assertStringContainsString('nothing was sent', strtolower($e->getMessage()), $what);
            }
        }
    }

    public function testExactStringsStayNumbers(): void
    {
        $veil = self::client();
        $estimate = $veil->noisyCount(self::DATASET, '1/4');
        self::assertIsInt($estimate->value);
    }
}
