<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\Exception\InvalidRequestException;
use Veil\Exception\NotFoundException;
use Veil\Exception\UnsupportedQueryException;
use Veil\Tests\Support\VeilServer;

/**
 * Queries on a dataset: counts, sums, means and grouped SQL, with error bars and cost; what is
 * refused, and that refusals cost nothing. The table (tests/Support/VeilServer.php): 3990 rows
 * of 2000 people, each in one state with 1–3 rows, kept whole (max_rows_per_group = 3); income
 * clamped to [0, 200 000].
 */
final class QueryTest extends TestCase
{
    public function testNoisyCountIsAnIntegerNearTheTrueCountWithAnErrorBarAndItsCost(): void
    {
        $veil = self::client();
        $before = $veil->remainingBudget(self::DATASET);

        $n = $veil->noisyCount(self::DATASET, 0.5);

        self::assertIsInt($n->value);
        self::assertNear(count(self::server()->rows()), $n->value, (float) $n->errorBar);
        self::assertSame(0.95, $n->errorBarLevel);
        self::assertSame('1/2', self::exactEpsilon($n->cost));
        self::assertSame('pure', $n->cost->kind);
        self::assertFalse($n->cached);
        $remaining = (float) $n->remaining?->epsilon;
        self::assertEqualsWithDelta((float) $before->epsilon - 0.5, $remaining, 1e-9);
        self::assertEqualsWithDelta($remaining, (float) $veil->remainingBudget(self::DATASET)->epsilon, 1e-9);
    }

    public function testNoisyCountCountsOnlyTheRowsItsConditionsSelect(): void
    {
        $rows = self::server()->rows();
        $in = static fn (array $states): int => count(
            array_filter($rows, static fn ($r) => in_array($r['state'], $states, true)),
        );

        $ca = self::client()->noisyCount(self::DATASET, 0.5, ['state' => 'CA']);
        $two = self::client()->noisyCount(self::DATASET, 0.5, ['state' => ['CA', 'TX']]);

        self::assertNear($in(['CA']), (float) $ca->value, (float) $ca->errorBar);
        self::assertNear($in(['CA', 'TX']), (float) $two->value, (float) $two->errorBar);
    }

    public function testAStringInAConditionIsQuotedNotPastedIntoTheSql(): void
    {
        // pasted, this would select every row (3990); quoted, it is a state nobody lives in
        $n = self::client()->noisyCount(self::DATASET, 0.5, ['state' => "CA' OR 'x' = 'x"]);

        self::assertNear(0.0, (float) $n->value, (float) $n->errorBar);
    }

    public function testNoisySumClampsEachValueToTheOwnersBounds(): void
    {
        $truth = array_sum(array_map(static fn ($r) => min(max($r['income'], 0.0), 200000.0), self::server()->rows()));

        $sum = self::client()->noisySum(self::DATASET, 'income', 0.5);

        self::assertIsFloat($sum->value);
        self::assertNear($truth, $sum->value, (float) $sum->errorBar);
        self::assertSame('1/2', self::exactEpsilon($sum->cost));
    }

    public function testNoisyMeanTakesTighterBoundsAndConditions(): void
    {
        $rows = array_filter(self::server()->rows(), static fn ($r) => $r['state'] === 'TX');
        $clamped = array_map(static fn ($r) => min(max($r['income'], 0.0), 100000.0), $rows);
        $truth = array_sum($clamped) / count($clamped);

        $mean = self::client()->noisyMean(self::DATASET, 'income', 1.0, ['state' => 'TX'], [0, 100000]);

        self::assertNear($truth, (float) $mean->value, (float) $mean->errorBar);
        self::assertSame('1', self::exactEpsilon($mean->cost));
    }

    public function testAGroupedQueryReturnsRowsWithAnErrorBarOnEveryNumber(): void
    {
        $truth = [];
        foreach (self::server()->rows() as $row) {
            $truth[$row['state']] = ($truth[$row['state']] ?? 0) + 1;
        }

        $r = self::client()->query(
            self::DATASET,
            'SELECT state, COUNT(*) AS n, AVG(income) AS mean_income FROM people GROUP BY state',
            ['epsilon' => 1],
        );

        self::assertSame(['state', 'n', 'mean_income'], $r->columns);
        self::assertCount(10, $r->rows); // the owner declared the ten states: all released
        $counts = $r->keyed('state', 'n');
        ksort($counts);
        ksort($truth);
        self::assertSame(array_keys($truth), array_keys($counts));
        foreach ($r->rows as $i => $row) {
            self::assertNull($r->errorBar($i, 'state'), 'a group key is public: no error bar');
            self::assertNear($truth[$row['state']], (float) $row['n'], (float) $r->errorBar($i, 'n'));
            self::assertGreaterThan(0.0, $r->errorBar($i, 'mean_income'));
        }
        self::assertSame('1', self::exactEpsilon($r->cost));
        self::assertSame(self::DATASET, $r->dataset);
        self::assertNull($r->jobId, 'answered at once, not through a job');
        self::assertMatchesRegularExpression('/^[0-9a-f]{64}$/', $r->fingerprint);
    }

    public function testAnAsyncQueryIsAnsweredThroughAJob(): void
    {
        $r = self::client()->query(self::DATASET, 'SELECT COUNT(*) AS adults FROM people WHERE age >= 18', [
            'epsilon' => '1/4',
            'async' => true,
        ]);

        self::assertNotNull($r->jobId, 'answered through a job');
        self::assertSame(['adults'], $r->columns);
        self::assertSame('1/4', self::exactEpsilon($r->cost));
        self::assertFalse($r->cached);
    }

    public function testExplainTellsTheCostAndChargesNothing(): void
    {
        $veil = self::client();
        $before = $veil->remainingBudget(self::DATASET);

        $e = $veil->explain(self::DATASET, 'SELECT SUM(income) AS total FROM people', ['epsilon' => 0.3]);

        self::assertSame('3/10', self::exactEpsilon($e->cost));
        self::assertTrue($e->covered);
        self::assertArrayHasKey('total', $e->expectedErrorBars);
        self::assertSame($before->exact, $veil->remainingBudget(self::DATASET)->exact);
    }

    public function testSqlOutsideTheSubsetSaysWhereAndCostsNothing(): void
    {
        $veil = self::client();
        $before = $veil->remainingBudget(self::DATASET);
        try {
            $veil->query(self::DATASET, "SELECT *\nFROM people", ['epsilon' => 0.1]);
            self::fail('SELECT * was answered');
        } catch (UnsupportedQueryException $e) {
            self::assertSame(1, $e->line());
            self::assertSame(8, $e->column());
            self::assertSame('urn:veil:problem:unsupported-query', $e->type());
            self::assertSame(400, $e->getCode());
            self::assertStringContainsString('SELECT *', $e->getMessage());
        }
        self::assertSame($before->exact, $veil->remainingBudget(self::DATASET)->exact);
    }

    public function testWideningTheOwnersBoundsIsRefusedAndCostsNothing(): void
    {
        $veil = self::client();
        $before = $veil->remainingBudget(self::DATASET);
        try {
            $veil->noisySum(self::DATASET, 'income', 0.1, [], [0, 1_000_000_000]);
            self::fail('wider bounds were accepted');
        } catch (InvalidRequestException $e) {
            self::assertSame('urn:veil:problem:bounds', $e->type());
        }
        self::assertSame($before->exact, $veil->remainingBudget(self::DATASET)->exact);
    }

    public function testAColumnNameThatIsNotAnIdentifierIsRefusedBeforeAnythingIsSent(): void
    {
        $veil = self::client();
        $latest = $veil->history(self::DATASET, 1)[0]->id;
        foreach (['income") FROM people --', 'in come', '1income', ''] as $column) {
            try {
                $veil->noisySum(self::DATASET, $column, 0.1);
                self::fail("column " . json_encode($column) . " was sent");
            } catch (InvalidRequestException $e) {
                self::assertNull($e->problem, 'refused by the client, not the service');
                self::assertStringContainsString('nothing was sent', $e->getMessage());
            }
        }
        try {
            $veil->noisyCount(self::DATASET, 0.1, ['state; DROP' => 'CA']);
            self::fail('a condition on a non-identifier was sent');
        } catch (InvalidRequestException $e) {
            self::assertNull($e->problem);
        }
        self::assertSame($latest, $veil->history(self::DATASET, 1)[0]->id, 'nothing recorded');
    }

    public function testANonFiniteOrUnknownParameterIsRefusedBeforeSending(): void
    {
        $veil = self::client();
        $this->expectException(InvalidRequestException::class);
        $this->expectExceptionMessage('epsilon must be a finite number');
        $veil->noisyCount(self::DATASET, INF);
    }

    public function testAnUnknownOptionIsRefusedBeforeSending(): void
    {
        $this->expectException(InvalidRequestException::class);
        $this->expectExceptionMessage('unknown option(s) epsilonn');
        self::client()->query(self::DATASET, 'SELECT COUNT(*) FROM people', ['epsilon' => 1, 'epsilonn' => 1]);
    }

    public function testABadWeightsOptionIsRefusedBeforeSending(): void
    {
        $this->expectException(InvalidRequestException::class);
        $this->expectExceptionMessage('weights must be a survey-weights column');
        self::client()->query(self::DATASET, 'SELECT COUNT(*) FROM people', ['epsilon' => 1, 'weights' => 7]);
    }

    public function testWeightsFalseRunsTheQueryUnweighted(): void
    {
        $e = self::client()->explain(self::DATASET, 'SELECT COUNT(*) AS n FROM people', ['epsilon' => 0.1, 'weights' => false]);

        self::assertSame('0.1', (string) $e->cost->epsilon);
    }

    public function testADatasetWithoutAGrantAnswersLikeOneThatDoesNotExist(): void
    {
        $veil = self::client('carol'); // carol has no grant on the padded dataset
        $messages = [];
        foreach ([VeilServer::PADDED, 'no-such-dataset'] as $dataset) {
            try {
                $veil->query($dataset, 'SELECT COUNT(*) AS n FROM people', ['epsilon' => 0.1]);
                self::fail("a query on $dataset was answered");
            } catch (NotFoundException $e) {
                self::assertSame(404, $e->getCode());
                $messages[] = $e->getMessage();
            }
        }
        self::assertSame($messages[0], $messages[1]);
    }
}
