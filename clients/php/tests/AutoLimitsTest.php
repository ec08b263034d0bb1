<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\Exception\InvalidRequestException;

/**
 * Contribution limits chosen under DP over HTTP: `'limits' => 'auto'`, the choice in
 * {@see \Veil\QueryResult::$autoLimits}, the owner's limits as the cap, refusals free.
 */
final class AutoLimitsTest extends TestCase
{
    private const SQL = 'SELECT COUNT(*) AS n FROM people';

    public function testAutoLimitsCostWhatExplainSaysAndStayUnderTheOwners(): void
    {
        $veil = self::client();
        $options = ['epsilon' => '1/2', 'limits' => 'auto', 'limits_share' => '1/5'];
        $explained = $veil->explain(self::DATASET, self::SQL, $options);
        $before = $veil->remainingBudget(self::DATASET);
        $result = $veil->query(self::DATASET, self::SQL, $options);

        self::assertSame('1/2', self::exactEpsilon($explained->cost));
        self::assertSame('1/2', self::exactEpsilon($result->cost));
        self::assertNotNull($result->autoLimits);
        $chosen = $result->autoLimits;
        self::assertGreaterThanOrEqual(1, $chosen['max_rows']);
        self::assertLessThanOrEqual(3, $chosen['max_rows']); // the owner's 1 group × 3 rows
        self::assertSame(3, $chosen['cap']);
        self::assertSame('1/10', $chosen['loss']['exact']['epsilon']);
        $after = $veil->remainingBudget(self::DATASET);
        self::assertEqualsWithDelta((float) $before->epsilon - 0.5, (float) $after->epsilon, 1e-9);
    }

    public function testTargetsWithAutoLimitsRunAtTheEpsilonMeetingThemAtTheLimitsChosen(): void
    {
        $veil = self::client();
        $options = ['target' => 'n=±50', 'limits' => 'auto'];
        $explained = $veil->explain(self::DATASET, self::SQL, $options);
        $before = $veil->remainingBudget(self::DATASET);
        $result = $veil->query(self::DATASET, self::SQL, $options);

        // explain: the limits step's ε and the range over the candidates; its cost the dearest
        self::assertStringStartsWith("accuracy targets with limits='auto'", $explained->notes[0]);
        self::assertNotNull($result->autoLimits);
        self::assertLessThanOrEqual(3, $result->autoLimits['max_rows']); // the owner's cap
        self::assertLessThanOrEqual(50.0, (float) $result->estimate()->errorBar);
        self::assertLessThanOrEqual((float) $explained->cost->epsilon + 1e-9, (float) $result->cost->epsilon);
        self::assertStringContainsString('at the limits chosen', implode("\n", $result->notes));
        $after = $veil->remainingBudget(self::DATASET);
        self::assertEqualsWithDelta(
            (float) $before->epsilon - (float) $result->cost->epsilon,
            (float) $after->epsilon,
            1e-9,
        );
    }

    public function testAutoGroupsIsSentToTheServiceWhichJudgesIt(): void
    {
        // the client no longer refuses 'auto_groups' itself: the service does, here because the
        // query has no GROUP BY, before any charge
        $veil = self::client();
        $before = self::exactEpsilon($veil->remainingBudget(self::DATASET));
        try {
            $veil->query(self::DATASET, self::SQL, ['epsilon' => '1/2', 'limits' => 'auto_groups']);
            self::fail('refused by the service');
        } catch (InvalidRequestException $e) {
            self::assertStringContainsString("limits='auto_groups'", $e->getMessage());
            self::assertStringContainsString('no GROUP BY', $e->getMessage());
            self::assertStringNotContainsString('nothing was sent', $e->getMessage());
        }
        self::assertSame($before, self::exactEpsilon($veil->remainingBudget(self::DATASET)));
    }

    public function testBadLimitsAreRefusedAndCostNothing(): void
    {
        $veil = self::client();
        $before = self::exactEpsilon($veil->remainingBudget(self::DATASET));
        try {
            $veil->query(self::DATASET, self::SQL, ['epsilon' => 1, 'limits' => 'automatic']);
            self::fail('refused before sending');
        } catch (InvalidRequestException $e) {
            self::assertStringContainsString('nothing was sent', $e->getMessage());
        }
        try {
            $veil->query(self::DATASET, self::SQL, ['epsilon' => 1, 'limits' => 'auto', 'limits_share' => 2]);
            self::fail('refused by the service');
        } catch (InvalidRequestException $e) {
            self::assertStringContainsString('limits_share', $e->getMessage());
        }
        self::assertSame($before, self::exactEpsilon($veil->remainingBudget(self::DATASET)));
    }
}
