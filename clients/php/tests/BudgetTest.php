<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\Exception\BudgetExhaustedException;
use Veil\Exception\NotFoundException;
use Veil\Tests\Support\VeilServer;

/** Budgets live in the service's ledger, not in a PHP array: granted, spent, never overspent. */
final class BudgetTest extends TestCase
{
    public function testAQueryCostingMoreThanRemainsRaisesWithRequestedAndRemaining(): void
    {
        $veil = self::client('carol'); // granted ε = 0.5 on the dataset
        $veil->noisyCount(self::DATASET, 0.4, ['state' => 'WA']);
        try {
            $veil->noisyCount(self::DATASET, 0.3, ['state' => 'NY']);
            self::fail('a query costing more than remained was answered');
        } catch (BudgetExhaustedException $e) {
            self::assertSame('3/10', self::exactEpsilon($e->requested));
            self::assertSame('1/10', self::exactEpsilon($e->remaining));
            self::assertEqualsWithDelta(0.1, (float) $e->remaining->epsilon, 1e-12);
            self::assertSame('urn:veil:problem:budget-exhausted', $e->type());
            self::assertSame(403, $e->getCode());
            self::assertStringContainsString('requested ε=0.3, remaining ε=0.1', $e->getMessage());
        }
        // nothing was charged by the refusal; a query that fits is still answered
        self::assertSame('1/10', self::exactEpsilon($veil->remainingBudget(self::DATASET)));
        $veil->noisyCount(self::DATASET, 0.1, ['state' => 'NY']);
        self::assertTrue($veil->remainingBudget(self::DATASET)->isZero());
    }

    public function testAMechanismCallCostingMoreThanRemainsRaisesToo(): void
    {
        $veil = self::client('carol'); // granted ε = 0.5 for mechanisms
        try {
            $veil->exponentialMechanism(['a' => 1, 'b' => 2], 1.0, 1.0, self::MECHANISMS);
            self::fail('the mechanism overspent the grant');
        } catch (BudgetExhaustedException $e) {
            self::assertSame('1', self::exactEpsilon($e->requested));
            self::assertSame('1/2', self::exactEpsilon($e->remaining));
        }
    }

    public function testBudgetsListEveryGrantWithWhatRemains(): void
    {
        $lines = [];
        foreach (self::client()->budgets() as $line) {
            $lines[$line->dataset] = $line;
        }
        foreach ([self::DATASET, self::MECHANISMS, VeilServer::PADDED] as $dataset) {
            self::assertArrayHasKey($dataset, $lines);
        }
        self::assertSame('20', self::exactEpsilon($lines[self::DATASET]->granted));
        self::assertSame('1000', self::exactEpsilon($lines[self::MECHANISMS]->granted));
        self::assertGreaterThanOrEqual(0.0, $lines[self::DATASET]->used);
        self::assertLessThanOrEqual(1.0, $lines[self::DATASET]->used);
    }

    public function testRemainingBudgetWithoutAGrantIsNotFound(): void
    {
        $this->expectException(NotFoundException::class);
        self::client('carol')->remainingBudget(VeilServer::PADDED);
    }

    public function testHistoryRecordsTheGrantAndEachChargeWithItsSql(): void
    {
        $veil = self::client();
        $n = $veil->noisyCount(self::DATASET, 0.1, ['state' => 'OH']);

        $history = $veil->history(self::DATASET, 1000);

        self::assertSame('grant', $history[count($history) - 1]->event, 'the oldest event');
        self::assertNull($veil->historyPage(self::DATASET, 1000)->next, 'all of it on one page');
        $charges = array_values(array_filter(
            $history,
            static fn ($e) => $e->event === 'charge' && $e->fingerprint === $n->fingerprint,
        ));
        self::assertCount(1, $charges);
        self::assertSame('committed', $charges[0]->status);
        self::assertSame('SELECT COUNT(*) AS n FROM "people" WHERE "state" = \'OH\'', $charges[0]->query);
        self::assertSame('1/10', self::exactEpsilon($charges[0]->loss));
        self::assertLessThanOrEqual(new \DateTimeImmutable('+1 minute'), $charges[0]->at);
    }
}
