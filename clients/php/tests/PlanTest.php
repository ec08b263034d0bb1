<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\Exception\InvalidRequestException;
use Veil\Exception\ServerException;
use Veil\Exception\TimeoutException;
use Veil\Exception\UnsupportedQueryException;
use Veil\Exception\VeilException;
use Veil\Tests\Support\VeilServer;

/**
 * Queries given as a JSON plan ({@see \Veil\Client::queryPlan()}, {@see
 * \Veil\Client::explainPlan()}): the same charges, fingerprints and cached answers as the
 * equivalent SQL, explain free, malformed plans refused free — by the client before sending, or
 * by the service as a 4xx problem, never a 5xx.
 */
final class PlanTest extends TestCase
{
    private const SQL = 'SELECT state, COUNT(*) AS n, MEDIAN(income) AS mid FROM people '
        . 'WHERE age >= 50 GROUP BY state';

    private const PLAN = [
        'where' => ['age >= 50'],
        'group_by' => ['state'],
        'aggregates' => [
            ['function' => 'count', 'alias' => 'n'],
            ['function' => 'median', 'column' => 'income', 'alias' => 'mid'],
        ],
    ];

    public function testAPlanAndItsSqlAreOneQueryChargedOnce(): void
    {
        $veil = self::client();
        $before = $veil->remainingBudget(self::DATASET);
        $byPlan = $veil->queryPlan(self::DATASET, self::PLAN, ['epsilon' => '1/2']);
        self::assertFalse($byPlan->cached);
        self::assertSame('1/2', self::exactEpsilon($byPlan->cost));
        self::assertSame(['state', 'n', 'mid'], $byPlan->columns);
        self::assertCount(10, $byPlan->rows); // the declared domain of state

        $bySql = $veil->query(self::DATASET, self::SQL, ['epsilon' => '1/2']);
        self::assertTrue($bySql->cached);
        self::assertTrue($bySql->cost->isZero());
        self::assertSame($byPlan->fingerprint, $bySql->fingerprint);
        self::assertSame($byPlan->rows, $bySql->rows, 'the same answer, not fresh noise');
        self::assertSame($byPlan->errorBars, $bySql->errorBars);

        $after = $veil->remainingBudget(self::DATASET);
        self::assertEqualsWithDelta((float) $before->epsilon - 0.5, (float) $after->epsilon, 1e-9);
        self::assertSame($after->exact, $bySql->remaining?->exact);
    }

    public function testAPlanTakesAutoBoundsAndLimitsAsItsSqlDoes(): void
    {
        $veil = self::client();
        $plan = ['where' => ['age < 30'], 'aggregates' => [['function' => 'avg', 'column' => 'income', 'alias' => 'm']]];
        $sql = 'SELECT AVG(income) AS m FROM people WHERE age < 30';
        $options = [
            'epsilon' => 1, 'bounds' => 'auto', 'bounds_share' => '1/5',
            'limits' => 'auto', 'limits_share' => '1/4',
        ];
        $before = $veil->remainingBudget(self::DATASET);
        $explained = $veil->explainPlan(self::DATASET, $plan, $options);
        self::assertSame('1', self::exactEpsilon($explained->cost));
        self::assertSame($before->exact, $veil->remainingBudget(self::DATASET)->exact, 'explain is free');

        $byPlan = $veil->queryPlan(self::DATASET, $plan, $options);
        self::assertSame('1', self::exactEpsilon($byPlan->cost));
        self::assertCount(1, $byPlan->autoBounds);
        self::assertSame('1/5', self::exactEpsilon($byPlan->autoBounds[0]->loss));
        self::assertNotNull($byPlan->autoLimits);
        self::assertSame('1/4', $byPlan->autoLimits['loss']['exact']['epsilon']);

        $bySql = $veil->query(self::DATASET, $sql, $options);
        self::assertTrue($bySql->cached);
        self::assertTrue($bySql->cost->isZero());
        self::assertSame($byPlan->fingerprint, $bySql->fingerprint);
        self::assertSame($byPlan->rows, $bySql->rows);
        $after = $veil->remainingBudget(self::DATASET);
        self::assertEqualsWithDelta((float) $before->epsilon - 1.0, (float) $after->epsilon, 1e-9);
    }

    public function testExplainingAPlanChargesNothingAndSaysWhatItsSqlWouldCost(): void
    {
        $veil = self::client();
        $before = self::exactEpsilon($veil->remainingBudget(self::DATASET));
        $byPlan = $veil->explainPlan(self::DATASET, self::PLAN, ['epsilon' => '1/4']);
        $bySql = $veil->explain(self::DATASET, self::SQL, ['epsilon' => '1/4']);
        self::assertSame('1/4', self::exactEpsilon($byPlan->cost));
        self::assertSame($bySql->cost->exact, $byPlan->cost->exact);
        self::assertSame($bySql->expectedErrorBars, $byPlan->expectedErrorBars);
        self::assertSame($bySql->sql, $byPlan->sql);
        self::assertSame('1', self::exactEpsilon($veil->explainPlan(self::DATASET, self::PLAN)->cost));
        self::assertSame($before, self::exactEpsilon($veil->remainingBudget(self::DATASET)));
    }

    /** As {@see TransportTest}'s timed-out SQL: not resent, found in the history, charged once. */
    public function testATimedOutPlanIsNotRetriedAndItsChargeIsInTheHistory(): void
    {
        $dataset = VeilServer::PADDED;
        $plan = ['where' => ['age < 25'], 'aggregates' => [['function' => 'count', 'alias' => 'n']]];
        $veil = self::client();
        $before = $veil->remainingBudget($dataset);
        $planCharges = static fn (): array => array_values(array_filter(
            $veil->history($dataset),
            static fn ($h) => $h->event === 'charge' && str_starts_with((string) $h->query, '{"'),
        ));
        $earlier = count($planCharges());
        try {
            self::client('alice', ['timeout' => 0.5])->queryPlan($dataset, $plan, ['epsilon' => '1/4']);
            self::fail('the padded query answered within 0.5 s');
        } catch (TimeoutException $e) {
            self::assertSame($dataset, $e->dataset);
            self::assertNull($e->sql);
            self::assertStringContainsString(
                "find the charge with this plan (its charge shows the plan's canonical JSON)",
                $e->getMessage(),
            );
        }
        [$charges, $status] = self::awaitCommitted(
            static fn (): array => array_slice($planCharges(), $earlier),
        );
        self::assertCount(1, $charges, 'charged once');
        self::assertSame('committed', $status);
        $again = $veil->queryPlan($dataset, $plan, ['epsilon' => '1/4']);
        self::assertTrue($again->cached);
        $remaining = (float) $veil->remainingBudget($dataset)->epsilon;
        self::assertEqualsWithDelta((float) $before->epsilon - 0.25, $remaining, 1e-9, 'charged once');
    }

    public function testWhatTheClientCanDecideIsRefusedBeforeSending(): void
    {
        $veil = self::client();
        $before = self::exactEpsilon($veil->remainingBudget(self::DATASET));
        $cases = [
            [[], 'a plan is an array of its parts'],
            [[['function' => 'count']], 'a plan is an array of its parts'],
            [['wher' => ['age > 3'], 'aggregates' => [['function' => 'count']]], 'unknown plan part(s) wher'],
            [['where' => ['age > 3']], "a plan needs 'aggregates'"],
            [['aggregates' => []], "a plan needs 'aggregates'"],
            [['aggregates' => [['function' => 'medain', 'column' => 'age']]], "'medain' is not one a plan can ask for; did you mean 'median'?"],
            [['aggregates' => [['column' => 'age']]], "each aggregate is an array with a 'function'"],
            [['aggregates' => ['count']], "with a 'function' (one of count, count_distinct, sum"],
            [['aggregates' => [['function' => 3]]], "got {\"function\":3}"],
        ];
        foreach ($cases as [$plan, $said]) {
            foreach (['queryPlan', 'explainPlan'] as $method) {
                try {
                    $veil->$method(self::DATASET, $plan, ['epsilon' => 1]);
                    self::fail("$method refuses " . json_encode($plan));
                } catch (InvalidRequestException $e) {
                    self::assertStringContainsString($said, $e->getMessage());
                    self::assertStringContainsString('nothing was sent', strtolower($e->getMessage()));
                }
            }
        }
        try {
            $veil->queryPlan(self::DATASET, self::PLAN, []);
            self::fail('a query needs an epsilon');
        } catch (InvalidRequestException $e) {
            self::assertStringStartsWith('queryPlan() needs an epsilon', $e->getMessage());
        }
        try {
            $veil->queryPlan(self::DATASET, self::PLAN, ['epsilon' => 1, 'colour' => 'red']);
            self::fail('an unknown option is refused');
        } catch (InvalidRequestException $e) {
            self::assertStringContainsString('unknown option(s) colour', $e->getMessage());
        }
        self::assertSame($before, self::exactEpsilon($veil->remainingBudget(self::DATASET)));
    }

    public function testAMalformedPlanIsAProblemOfTheServiceAndFreeNeverA5xx(): void
    {
        $veil = self::client();
        $before = self::exactEpsilon($veil->remainingBudget(self::DATASET));
        $cases = [
            [['aggregates' => [['function' => 'count', 'colour' => 'x']]], [], InvalidRequestException::class, 'colour'],
            [['where' => 'age > 3', 'aggregates' => [['function' => 'count']]], [], InvalidRequestException::class, 'where'],
            [['aggregates' => [['function' => 'avg', 'column' => 'nope']]], [], InvalidRequestException::class, 'nope'],
            [['aggregates' => [['function' => 'count']], 'where' => ['random() > 0']], [], UnsupportedQueryException::class, 'random'],
            [['aggregates' => [['function' => 'median', 'column' => 'age', 'quantile' => '0.9']]], [], InvalidRequestException::class, 'takes no quantile'],
            [['aggregates' => [['function' => 'count']]], ['target' => 'n=±50'], InvalidRequestException::class, 'sql'],
        ];
        foreach ($cases as [$plan, $options, $class, $said]) {
            foreach (['queryPlan', 'explainPlan'] as $method) {
                try {
                    $veil->$method(self::DATASET, $plan, $options + (isset($options['target']) ? [] : ['epsilon' => 1]));
                    self::fail("the service refuses " . json_encode($plan));
                } catch (VeilException $e) {
                    self::assertNotInstanceOf(ServerException::class, $e, $e->getMessage());
                    self::assertInstanceOf($class, $e, $e->getMessage());
                    self::assertStringContainsString($said, strtolower($e->getMessage()));
                    self::assertLessThan(500, $e->problem?->status ?? 0);
                    self::assertGreaterThanOrEqual(400, $e->problem?->status ?? 0);
                }
            }
        }
        self::assertSame($before, self::exactEpsilon($veil->remainingBudget(self::DATASET)));
    }
}
