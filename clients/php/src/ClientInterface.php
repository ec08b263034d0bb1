<?php

declare(strict_types=1);

namespace Veil;

use Veil\Exception\BudgetExhaustedException;
use Veil\Exception\InvalidRequestException;
use Veil\Exception\NotFoundException;
use Veil\Exception\ServerException;
use Veil\Exception\TimeoutException;
use Veil\Exception\UnsupportedQueryException;
use Veil\Exception\VeilException;

/**
 * What an application asks of veil: {@see Client} implements it over HTTP. Type-hint this
 * interface where your application uses veil, and a test can hand it a fake that returns the
 * answers it needs — no service, no noise.
 *
 * Each call that releases a value is charged to a budget the data owner granted, in the
 * service's ledger; a refused call ({@see VeilException} and its subclasses) is charged
 * nothing, except where the exception says otherwise.
 */
interface ClientInterface
{
    /**
     * Answer `$sql` (veil's SQL subset; its one table is the dataset) with noise.
     *
     * @param array{
     *     epsilon: float|int|string,
     *     delta?: float|int|string,
     *     bounds?: 'auto'|array<string, array{0: float|int|string, 1: float|int|string}|'auto'|array{auto: string}>,
     *     bounds_share?: float|int|string,
     *     max_groups?: int,
     *     max_rows_per_group?: int,
     *     consistent?: bool,
     *     weights?: string|false,
     *     limits?: 'auto'|'auto_groups',
     *     limits_share?: float|int|string,
     *     async?: bool,
     *     target?: string|list<string>,
     *     references?: array<string, float|int>,
     *     min_group_size?: int,
     * } $options `epsilon` (required unless `target`): what the query may cost; `target`:
     *     accuracy targets instead (`'n=±50'`, `'mean=±2%'` with `references`, an AVG with
     *     `min_group_size`): the service runs it at the smallest ε meeting them; `bounds`, `max_groups`,
     *     `max_rows_per_group`: only tighter than the data owner's; `bounds` may be `'auto'`
     *     (every clamped column), or per column `'auto'` or `['auto' => 'state']` (per group of
     *     a public GROUP BY key): found under DP with `bounds_share` of ε (default 0.1) and
     *     returned in {@see QueryResult::$autoBounds}; `consistent`: group counts
     *     that add up to their noisy total; `weights`: a survey-weights column weighting
     *     COUNT(*), SUM and AVG, or false for none (default: the dataset's own weights);
     *     `limits` `'auto'`: max_rows chosen under DP with `limits_share` of ε (default 0.1),
     *     `'auto_groups'`: max_groups, max_rows_per_group and max_rows chosen together from one
     *     noisy histogram; either returned in {@see QueryResult::$autoLimits};
     *     `async`: run it as a job and poll until it is done (for a query longer than a
     *     proxy's read timeout; the answer is the same)
     * @throws BudgetExhaustedException|UnsupportedQueryException|InvalidRequestException|VeilException
     */
    public function query(string $dataset, string $sql, array $options): QueryResult;

    /**
     * Answer a query given as a JSON plan — the Python builder's calls (`Session.query`), the
     * service's `plan` — with noise: the same plans, charges and cached answers as the
     * equivalent SQL, so a question asked once as SQL and once as a plan is charged once.
     *
     * ```php
     * $result = $veil->queryPlan('people', [
     *     'where' => ['age >= 18'],
     *     'group_by' => ['state'],
     *     'aggregates' => [['function' => 'count', 'alias' => 'n'],
     *                      ['function' => 'median', 'column' => 'income', 'alias' => 'mid']],
     * ], ['epsilon' => 0.5]);
     * ```
     *
     * @param array<string, mixed> $plan `aggregates` (required: a list of `['function' => …,
     *     'column' => …, 'alias' => …, 'quantile' => …]`, functions as in {@see PLAN_FUNCTIONS}),
     *     `where` (a list of conditions, ANDed), `group_by` (column names, or `['column' => …,
     *     'keys' => [a public list]]`, `['column' => …, 'bins' => [edges]]`, each with an
     *     optional `alias`), `having`, `order_by` (names, or `['column' => …, 'descending' =>
     *     true]`), `limit`, `offset`, `select`
     * @param array<string, mixed> $options as for {@see query()} (not `target`: SQL only)
     * @throws BudgetExhaustedException|UnsupportedQueryException|InvalidRequestException|VeilException
     */
    public function queryPlan(string $dataset, array $plan, array $options): QueryResult;

    /**
     * Wait for query job `$jobId` (a query slower than the service's `query_timeout_s`, or one
     * sent with `async`) and return its answer. Polling is free: call it again after a
     * {@see TimeoutException} that names a job ({@see TimeoutException::$jobId}).
     */
    public function awaitJob(string $jobId): QueryResult;

    /**
     * What `$sql` would cost and its expected error bars: reads no data, charges nothing.
     *
     * @param array<string, mixed> $options as for {@see query()}, `epsilon` optional (default 1)
     */
    public function explain(string $dataset, string $sql, array $options = []): Explanation;

    /**
     * What a query given as a JSON plan ({@see queryPlan()}) would cost and its expected error
     * bars: reads no data, charges nothing.
     *
     * @param array<string, mixed> $plan as for {@see queryPlan()}
     * @param array<string, mixed> $options as for {@see explain()}
     */
    public function explainPlan(string $dataset, array $plan, array $options = []): Explanation;

    /**
     * Clamping bounds for `$columns` found under DP (`veil bounds`, `POST /v1/bounds`): a noisy
     * log-scale histogram of each column at `epsilon / count($columns)`, charged like a query.
     * A query with `'bounds' => 'auto'` over the same rows, whose share of ε equals a step's,
     * reuses them free.
     *
     * @param list<string> $columns
     * @param array{
     *     epsilon: float|int|string,
     *     where?: string,
     *     within?: array<string, array{0: float|int|string, 1: float|int|string}>,
     *     by?: string,
     *     max_groups?: int,
     *     max_rows_per_group?: int,
     *     max_rows?: int,
     * } $options `where`: only the rows matching this SQL condition; `within`: outer ranges
     *     (narrowing the owner's); `by`: a public key to find them per group of (a column
     *     with a declared domain, or `'BIN(age, 0, 30, 60, 120) AS band'`)
     * @return list<ChosenBounds>
     * @throws BudgetExhaustedException|InvalidRequestException|VeilException
     */
    public function findBounds(string $dataset, array $columns, array $options): array;

    /**
     * A noisy count of the dataset's rows where every condition holds (see {@see Sql::where()}:
     * `['region' => 'North']`, `['region' => ['North', 'South']]`, `['coupon' => null]`).
     * Each person's rows count up to the owner's contribution limits; the count is an integer.
     *
     * @param array<string, scalar|null|list<scalar>> $where
     */
    public function noisyCount(string $dataset, float|int|string $epsilon, array $where = []): Estimate;

    /**
     * A noisy sum of `$column` over the rows where every condition holds; values are clamped to
     * the owner's bounds, or to tighter `$bounds` ([lower, upper]) you give.
     *
     * @param array<string, scalar|null|list<scalar>> $where
     * @param array{0: float|int|string, 1: float|int|string}|null $bounds
     */
    public function noisySum(
        string $dataset,
        string $column,
        float|int|string $epsilon,
        array $where = [],
        ?array $bounds = null,
    ): Estimate;

    /**
     * A noisy mean of `$column` (a noisy sum over a noisy count: the count is private too, so
     * both are measured and ε is split between them), as {@see noisySum()}.
     *
     * @param array<string, scalar|null|list<scalar>> $where
     * @param array{0: float|int|string, 1: float|int|string}|null $bounds
     */
    public function noisyMean(
        string $dataset,
        string $column,
        float|int|string $epsilon,
        array $where = [],
        ?array $bounds = null,
    ): Estimate;

    /**
     * Laplace noise on values you computed yourself — the seed's `noisyCount($trueCount)`.
     *
     * **Your sensitivity claim is the whole guarantee**: `$sensitivity` must bound how much one
     * person can change the value (the L1 norm over a list): 1 for a count where each person
     * is counted at most once, the largest possible amount for a sum of one amount per person.
     * The service cannot check it. Integers in, integers out (discrete Laplace); floats come
     * back on a grid of 2^k. The loss is charged to grant `$grant`.
     *
     * @param int|float|list<int|float> $values
     */
    public function laplace(
        int|float|array $values,
        float|int|string $epsilon,
        float|int|string $sensitivity,
        string $grant,
    ): NoisyValues;

    /**
     * Choose a key of `$scores` by the exponential mechanism: key k with probability
     * proportional to `exp(ε·score_k / 2Δ)`, so **the highest score most often** (the seed
     * weighted by `exp(ε·(max − score) / 2Δ)`, which favours the worst). Sampled exactly by the
     * service. `$sensitivity` (Δ) is your claim of how much one person can change any score
     * (1 when a score counts people, each at most once); the loss ε is charged to `$grant`.
     *
     * @param array<int|string, int|float|string> $scores key → score
     */
    public function exponentialMechanism(
        array $scores,
        float|int|string $epsilon,
        float|int|string $sensitivity,
        string $grant,
    ): Choice;

    /**
     * k-ary randomized response: each of `$values` (one per person, each one of `$categories`)
     * is reported truthfully with probability `e^ε / (e^ε + k − 1)`, otherwise as another
     * category chosen uniformly. ε-DP for each reported value (local DP); charged to `$grant`.
     *
     * @param list<scalar|null> $values
     * @param list<scalar|null> $categories
     */
    public function randomizedResponse(
        array $values,
        array $categories,
        float|int|string $epsilon,
        string $grant,
    ): Reported;

    /**
     * What remains of your grant on `$dataset` (a dataset or a mechanism grant).
     *
     * @throws NotFoundException without a grant on it
     */
    public function remainingBudget(string $dataset): Budget;

    /** @return list<BudgetLine> your grants: granted, remaining and the share used */
    public function budgets(): array;

    /**
     * The latest of your audit trail on `$dataset`, newest first: grants, charges (with their
     * status and the SQL), cache hits and alerts — at most `$limit` (1 … 1000) events, older
     * than the cursor `$before` when given. {@see historyPage()} gives the cursor of the older
     * events too.
     *
     * @return list<HistoryEvent>
     */
    public function history(string $dataset, int $limit = 100, ?string $before = null): array;

    /**
     * A page of your audit trail on `$dataset`, newest first, and the cursor of the older events
     * ({@see HistoryPage::$next}: pass it as `$before`; null when there are none).
     *
     * @throws InvalidRequestException for a `$limit` outside 1 … 1000 (nothing is sent)
     */
    public function historyPage(string $dataset, int $limit = 100, ?string $before = null): HistoryPage;

    /**
     * Your charge `$reservation` (the id an {@see Exception\OutcomeUnknownException} names), or
     * null when there is none — or, with `$fingerprint`, when the charge under that id is another
     * query's. Its `status` says what became of it: `committed` (re-issue the identical query:
     * answered from the cache, free), `reserved` (still running), `abandoned` (charged, nothing
     * released), `refunded`.
     */
    public function charge(int $reservation, ?string $fingerprint = null): ?HistoryEvent;
}
