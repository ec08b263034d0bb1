<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\ChosenBounds;
use Veil\Exception\InvalidRequestException;

/**
 * Bounds found under DP over HTTP: `'bounds' => 'auto'` (per column, per group of a public
 * key), {@see \Veil\Client::findBounds()}, the owner's bounds as the outer range, refusals free.
 */
final class AutoBoundsTest extends TestCase
{
    private const GROUPED = 'SELECT state, AVG(income) AS m FROM people GROUP BY state';

    public function testAutoBoundsPerGroupCostWhatExplainSaysAndStayWithinTheOwners(): void
    {
        $veil = self::client();
        $options = ['epsilon' => '1/2', 'bounds' => ['income' => ['auto' => 'state']], 'bounds_share' => '1/5'];
        $explained = $veil->explain(self::DATASET, self::GROUPED, $options);
        $before = $veil->remainingBudget(self::DATASET);
        $result = $veil->query(self::DATASET, self::GROUPED, $options);

        self::assertSame('1/2', self::exactEpsilon($explained->cost));
        self::assertSame('1/2', self::exactEpsilon($result->cost));
        self::assertCount(1, $result->autoBounds);
        $chosen = $result->autoBounds[0];
        self::assertInstanceOf(ChosenBounds::class, $chosen);
        self::assertSame('state', $chosen->key);
        self::assertSame('1/10', self::exactEpsilon($chosen->loss));
        self::assertSame([0.0, 200000.0], $chosen->within);
        self::assertSame(
            ['AZ', 'CA', 'FL', 'GA', 'IL', 'NY', 'OH', 'PA', 'TX', 'WA'],
            array_keys($chosen->groups),
        );
        foreach ($chosen->groups as [$lower, $upper]) {
            self::assertGreaterThanOrEqual(0.0, $lower);
            self::assertLessThan($upper, $lower);
            self::assertLessThanOrEqual(200000.0, $upper);
        }
        self::assertStringStartsWith("auto bounds for 'income': per group of 'state'", $result->notes[0]);
        $after = $veil->remainingBudget(self::DATASET);
        self::assertEqualsWithDelta((float) $before->epsilon - 0.5, (float) $after->epsilon, 1e-9);
    }

    public function testFoundBoundsAreReusedByTheSameQueryWithAuto(): void
    {
        $veil = self::client();
        $where = 'age >= 40';
        [$found] = $veil->findBounds(self::DATASET, ['income'], ['epsilon' => '1/20', 'where' => $where]);
        self::assertNull($found->key);
        self::assertLessThan($found->upper, $found->lower);
        $result = $veil->query(
            self::DATASET,
            "SELECT AVG(income) AS m FROM people WHERE $where",
            ['epsilon' => '1/2', 'bounds' => 'auto'],
        );
        self::assertTrue($result->autoBounds[0]->cached);
        self::assertSame($found->value(), $result->autoBounds[0]->value());
        self::assertSame('9/20', self::exactEpsilon($result->cost));
    }

    public function testTargetsWithAutoBoundsRunAtTheEpsilonMeetingThemAtTheBoundsChosen(): void
    {
        $veil = self::client();
        // a target on the count: one on the SUM of the auto column is refused (below)
        $sql = 'SELECT COUNT(*) AS n, SUM(income) AS total FROM people';
        $options = ['target' => 'n=±50', 'bounds' => 'auto'];
        $explained = $veil->explain(self::DATASET, $sql, $options);
        $before = $veil->remainingBudget(self::DATASET);
        $result = $veil->query(self::DATASET, $sql, $options);

        // explain: the bounds step's ε and the range up to the owner's [0, 200000], its cost
        // the dearest whole; the answer within it, its bar within the target
        self::assertStringStartsWith("accuracy targets with bounds='auto'", $explained->notes[0]);
        self::assertStringContainsString('at the declared range (income: [0, 200000])', $explained->notes[0]);
        self::assertCount(1, $result->autoBounds);
        self::assertSame([0.0, 200000.0], $result->autoBounds[0]->within);
        self::assertLessThanOrEqual(200000.0, $result->autoBounds[0]->upper);
        self::assertLessThanOrEqual(50.0, (float) $result->errorBar(0, 'n'));
        self::assertLessThanOrEqual((float) $explained->cost->epsilon + 1e-9, (float) $result->cost->epsilon);
        self::assertStringContainsString('at the bounds chosen (income: [', implode("\n", $result->notes));
        $after = $veil->remainingBudget(self::DATASET);
        self::assertEqualsWithDelta(
            (float) $before->epsilon - (float) $result->cost->epsilon,
            (float) $after->epsilon,
            1e-9,
        );
    }

    public function testATargetOnTheSumOfAnAutoColumnIsRefusedAndCostsNothing(): void
    {
        $veil = self::client();
        $before = self::exactEpsilon($veil->remainingBudget(self::DATASET));
        try {
            $veil->query(
                self::DATASET,
                'SELECT SUM(income) AS total FROM people',
                ['target' => 'total=±5000000', 'bounds' => 'auto'],
            );
            self::fail('refused: a target resting on the clamping');
        } catch (InvalidRequestException $e) {
            self::assertStringContainsString("cannot be promised with bounds='auto'", $e->getMessage());
            self::assertStringContainsString("pass bounds={'income': (0, 200000)}", $e->getMessage());
        }
        self::assertSame($before, self::exactEpsilon($veil->remainingBudget(self::DATASET)));
    }

    public function testTargetsWithAutoBoundsAndAutoLimitsAreRefusedAndCostNothing(): void
    {
        $veil = self::client();
        $before = self::exactEpsilon($veil->remainingBudget(self::DATASET));
        try {
            $veil->query(
                self::DATASET,
                'SELECT SUM(income) AS total FROM people',
                ['target' => 'total=±5000000', 'bounds' => 'auto', 'limits' => 'auto'],
            );
            self::fail('refused: target with both auto');
        } catch (InvalidRequestException $e) {
            self::assertStringContainsString("and limits='auto' together is not supported", $e->getMessage());
        }
        self::assertSame($before, self::exactEpsilon($veil->remainingBudget(self::DATASET)));
    }

    public function testBadAutoBoundsAreRefusedAndCostNothing(): void
    {
        $veil = self::client();
        $before = self::exactEpsilon($veil->remainingBudget(self::DATASET));
        foreach ([['income' => ['auto' => 3]], ['income' => 'max'], 'automatic'] as $bounds) {
            try {
                $veil->query(self::DATASET, self::GROUPED, ['epsilon' => 1, 'bounds' => $bounds]);
                self::fail('refused: ' . json_encode($bounds));
            } catch (InvalidRequestException $e) {
                self::assertStringContainsString('nothing was sent', $e->getMessage());
            }
        }
        foreach ([
            [['income' => ['auto' => 'region']], "no GROUP BY key 'region'"],
            [['income' => ['auto' => 'age']], "no GROUP BY key 'age'"],
        ] as [$bounds, $said]) {
            try {
                $veil->query(self::DATASET, self::GROUPED, ['epsilon' => 1, 'bounds' => $bounds]);
                self::fail('refused: ' . json_encode($bounds));
            } catch (InvalidRequestException $e) {
                self::assertStringContainsString($said, $e->getMessage());
            }
        }
        try {
            $veil->findBounds(self::DATASET, ['income'], ['epsilon' => 1, 'within' => ['income' => [0, 1e6]]]);
            self::fail('a range wider than the owner\'s is refused');
        } catch (InvalidRequestException $e) {
            self::assertStringContainsString("widen the owner's", $e->getMessage());
        }
        self::assertSame($before, self::exactEpsilon($veil->remainingBudget(self::DATASET)));
    }
}
