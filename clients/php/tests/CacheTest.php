<?php

declare(strict_types=1);

namespace Veil\Tests;

/**
 * The service's cache replaces the seed's own: the same question asked twice is answered with
 * the same noise at no cost (fresh noise for free would let anyone average it away).
 */
final class CacheTest extends TestCase
{
    public function testTheSameQueryTwiceIsAnsweredFromTheCacheAtNoCost(): void
    {
        $veil = self::client();
        $sql = 'SELECT state, SUM(income) AS total FROM people GROUP BY state';

        $first = $veil->query(self::DATASET, $sql, ['epsilon' => 0.6]);
        $after = $veil->remainingBudget(self::DATASET);
        $second = $veil->query(self::DATASET, $sql, ['epsilon' => 0.6]);

        self::assertFalse($first->cached);
        self::assertSame('3/5', self::exactEpsilon($first->cost));
        self::assertTrue($second->cached);
        self::assertTrue($second->cost->isZero());
        self::assertSame($first->rows, $second->rows, 'the same noise, not fresh noise');
        self::assertSame($first->errorBars, $second->errorBars);
        self::assertSame($first->fingerprint, $second->fingerprint);
        self::assertSame($after->exact, $second->remaining?->exact);
        self::assertSame($after->exact, $veil->remainingBudget(self::DATASET)->exact);
    }

    public function testACacheHitIsInTheHistoryAndAChangedEpsilonIsANewCharge(): void
    {
        $veil = self::client();
        $sql = 'SELECT COUNT(*) AS n FROM people WHERE age < 40';
        $first = $veil->query(self::DATASET, $sql, ['epsilon' => 0.2]);
        $veil->query(self::DATASET, $sql, ['epsilon' => 0.2]);

        $other = $veil->query(self::DATASET, $sql, ['epsilon' => 0.3]);
        self::assertFalse($other->cached, 'another ε is another measurement: charged');
        self::assertSame('3/10', self::exactEpsilon($other->cost));

        // cache hits are written to the ledger in batches (within ~50 ms): wait for it
        $deadline = microtime(true) + 5;
        while (true) {
            $hits = array_filter(
                $veil->history(self::DATASET),
                static fn ($e) => $e->event === 'cache_hit' && $e->fingerprint === $first->fingerprint,
            );
            if ($hits !== [] || microtime(true) > $deadline) {
                break;
            }
            usleep(100_000);
        }
        self::assertCount(1, $hits);
    }
}
