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
 * A client of the veil service: differentially private answers over HTTP, each with its error
 * bar and its cost, charged to budgets the data owner granted.
 *
 * ```php
 * $veil = new Veil\Client('https://veil.example.org', getenv('VEIL_KEY'));
 * $n = $veil->noisyCount('orders', 0.5, ['region' => 'North']);
 * printf("%d ± %.0f orders (cost %s)\n", $n->value, $n->errorBar, $n->cost);
 * ```
 *
 * - **Queries on a dataset** ({@see query()}, {@see noisyCount()}, {@see noisySum()},
 *   {@see noisyMean()}, {@see explain()}): the service reads the data, bounds each person's
 *   contribution, adds exact noise and charges your grant on the dataset. The noise and the
 *   sensitivity are the service's business, not yours.
 * - **Mechanisms on values you computed** ({@see laplace()}, {@see exponentialMechanism()},
 *   {@see randomizedResponse()}): the service never sees your data, so privacy rests entirely
 *   on the sensitivity you claim; the loss is charged to a grant (`$grant`) an administrator made
 *   for your application.
 * - **Budgets** ({@see remainingBudget()}, {@see budgets()}, {@see history()}): kept by the
 *   service in its ledger, never in PHP.
 *
 * **Caching is the service's**: an identical query (same measurement, data and privacy
 * parameters) is answered from the ledger's cache, with the same noise, at no cost
 * (`QueryResult::$cached`, a zero `$cost`). Fresh noise for the same question is never free, so
 * keep no cache of your own to save budget. Mechanism calls are not cached.
 *
 * **Nothing is retried.** A request that may have been charged is never sent twice; see
 * {@see TimeoutException} for how to learn the outcome of a request whose answer was lost.
 * Errors are typed exceptions mapped from the service's problem types ({@see VeilException}).
 */
final class Client implements ClientInterface
{
    public const VERSION = '0.1.0';

    private const QUERY_OPTIONS = [
        'epsilon', 'delta', 'bounds', 'bounds_share', 'max_groups', 'max_rows_per_group', 'consistent',
        'target', 'references', 'min_group_size',
        'weights', 'limits', 'limits_share',
    ];

    /** The parts of a JSON plan ({@see queryPlan()}). */
    public const PLAN_PARTS = ['where', 'group_by', 'aggregates', 'having', 'order_by', 'limit', 'offset', 'select'];

    /** The aggregate functions of a JSON plan (`median`: the quantile 1/2). */
    public const PLAN_FUNCTIONS = [
        'count', 'count_distinct', 'sum', 'avg', 'variance', 'stddev', 'var_pop', 'stddev_pop',
        'quantile', 'median', 'min', 'max',
    ];

    /** An exact number as the service reads it: `0.5`, `-2`, `1/3` (no exponent). */
    private const EXACT = '~^\s*-?\d{1,30}(\.\d{1,30})?(/\d{1,30})?\s*$~D';

    private readonly HttpTransport $http;
    private readonly float $pollInterval;
    private readonly float $jobWait;

    /**
     * @param string $baseUrl the service, e.g. `https://veil.example.org` (plain `http://` only
     *     to a loopback address, unless `allow_insecure_http`: the key is a bearer token)
     * @param string $apiKey the key `veil admin analyst add NAME` printed
     * @param array{
     *     timeout?: float|int,
     *     connect_timeout?: float|int,
     *     job_poll_interval?: float|int,
     *     job_wait?: float|int,
     *     allow_insecure_http?: bool,
     *     user_agent?: string,
     * } $options `timeout`: seconds for one request (default 60; keep it above the service's
     *     `query_timeout_s`, 30 by default, after which a slow query becomes a job this client
     *     waits for); `connect_timeout` (5); `job_poll_interval`: first wait between polls of a
     *     job (0.25, growing to 2); `job_wait`: how long to wait for a job (3600)
     */
    public function __construct(
        string $baseUrl,
        #[\SensitiveParameter]
        string $apiKey,
        array $options = [],
    ) {
        $known = ['timeout', 'connect_timeout', 'job_poll_interval', 'job_wait',
            'allow_insecure_http', 'user_agent'];
        $unknown = array_diff(array_keys($options), $known);
        if ($unknown !== []) {
            throw new InvalidRequestException(sprintf(
                'unknown client option(s) %s; the options are %s',
                implode(', ', $unknown),
                implode(', ', $known),
            ));
        }
        $baseUrl = rtrim($baseUrl, '/');
        self::checkUrl($baseUrl, (bool) ($options['allow_insecure_http'] ?? false));
        if ($apiKey === '' || preg_match('/[\s\x00-\x1f]/', $apiKey) === 1) {
            throw new InvalidRequestException(
                'the API key is empty or contains white space; pass the key that '
                . '`veil admin analyst add NAME` printed'
            );
        }
        $timeout = self::seconds($options, 'timeout', 60.0);
        $this->pollInterval = self::seconds($options, 'job_poll_interval', 0.25);
        $this->jobWait = self::seconds($options, 'job_wait', 3600.0);
        $this->http = new HttpTransport(
            $baseUrl,
            $apiKey,
            $timeout,
            self::seconds($options, 'connect_timeout', 5.0),
            (string) ($options['user_agent'] ?? 'veil-php/' . self::VERSION),
        );
    }

    // ------------------------------------------------------------------------- queries

    /** {@inheritDoc} */
    public function query(string $dataset, string $sql, array $options): QueryResult
    {
        return $this->ask('query', $dataset, ['sql' => $sql], $options);
    }

    /** {@inheritDoc} */
    public function queryPlan(string $dataset, array $plan, array $options): QueryResult
    {
        return $this->ask('queryPlan', $dataset, ['plan' => self::plan($plan)], $options);
    }

    /**
     * @param array{sql: string}|array{plan: array<string, mixed>} $query
     * @param array<string, mixed> $options
     */
    private function ask(string $method, string $dataset, array $query, array $options): QueryResult
    {
        if (!array_key_exists('epsilon', $options) && !array_key_exists('target', $options)) {
            throw new InvalidRequestException(
                $method . '() needs an epsilon: what the query may cost, e.g. [\'epsilon\' => 0.5] '
                . '(or accuracy targets: [\'target\' => \'n=±50\']); nothing was sent'
            );
        }
        $async = $options['async'] ?? false;
        if (!is_bool($async)) {
            throw new InvalidRequestException('async must be true or false; nothing was sent');
        }
        unset($options['async']);
        $body = ['dataset' => $dataset] + $query + self::queryOptions($options, true);
        $about = ['dataset' => $dataset] + (isset($query['sql']) ? ['sql' => $query['sql']] : []);
        $path = $async ? '/v1/query?async=true' : '/v1/query';
        [$status, $headers, $answer] = $this->http->send('POST', $path, $body, $about);
        if ($status === 202) {
            $job = is_array($answer) && is_string($answer['job'] ?? null) ? $answer['job'] : null;
            if ($job === null) {
                throw new ServerException('the service accepted the query as a job without an id');
            }
            return $this->waitForJob($job, $about);
        }
        return QueryResult::fromAnswer($this->answer($status, $headers, $answer));
    }

    /** {@inheritDoc} */
    public function awaitJob(string $jobId): QueryResult
    {
        return $this->waitForJob($jobId, []);
    }

    /** @param array{dataset?: string, sql?: string} $about the query, for a TimeoutException */
    private function waitForJob(string $jobId, array $about): QueryResult
    {
        $path = '/v1/jobs/' . rawurlencode($jobId);
        $deadline = microtime(true) + $this->jobWait;
        $pause = $this->pollInterval;
        while (true) {
            [$status, $headers, $job] = $this->http->send('GET', $path);
            if ($status === 503) {  // the job runs on, charged once: never "retry" the query
                throw new TimeoutException(
                    sprintf(
                        'query job %s cannot be read now (the service is unavailable); it is '
                        . 'charged once whatever happens: awaitJob(%s) later, and do not send '
                        . 'the query again',
                        $jobId,
                        var_export($jobId, true),
                    ),
                    'GET',
                    $path,
                    $about['dataset'] ?? null,
                    $about['sql'] ?? null,
                    $jobId,
                );
            }
            $job = $this->answer($status, $headers, $job);
            $state = Decode::string($job, 'state');
            if ($state === 'done') {
                $answer = Decode::array($job, 'answer');
                $answer = $this->answer(Decode::int($job, 'status'), [], $answer);
                return QueryResult::fromAnswer($answer, $jobId);
            }
            if ($state !== 'running') {
                throw new ServerException(sprintf(
                    'query job %s is %s: the server that ran it stopped before it finished (what '
                    . 'it reserved stays charged); history() shows the charge',
                    $jobId,
                    $state,
                ));
            }
            if (microtime(true) + $pause > $deadline) {
                throw new TimeoutException(
                    sprintf(
                        'query job %s still running after %.0f s; awaitJob(%s) goes on waiting, '
                        . 'free (do not send the query again: it would be charged twice)',
                        $jobId,
                        $this->jobWait,
                        var_export($jobId, true),
                    ),
                    'GET',
                    $path,
                    $about['dataset'] ?? null,
                    $about['sql'] ?? null,
                    $jobId,
                );
            }
            usleep((int) ($pause * 1e6));
            $pause = min(2.0, $pause * 1.5);
        }
    }

    /** {@inheritDoc} */
    public function explain(string $dataset, string $sql, array $options = []): Explanation
    {
        return $this->explainQuery(['dataset' => $dataset, 'sql' => $sql], $options);
    }

    /** {@inheritDoc} */
    public function explainPlan(string $dataset, array $plan, array $options = []): Explanation
    {
        return $this->explainQuery(['dataset' => $dataset, 'plan' => self::plan($plan)], $options);
    }

    /**
     * @param array<string, mixed> $query
     * @param array<string, mixed> $options
     */
    private function explainQuery(array $query, array $options): Explanation
    {
        $body = $query + self::queryOptions($options, false);
        [$status, $headers, $answer] = $this->http->send('POST', '/v1/explain', $body);
        return Explanation::fromAnswer($this->answer($status, $headers, $answer));
    }

    /** {@inheritDoc} */
    public function findBounds(string $dataset, array $columns, array $options): array
    {
        if (
            $columns === [] || !array_is_list($columns)
            || array_filter($columns, static fn ($c) => !is_string($c) || $c === '') !== []
        ) {
            throw new InvalidRequestException(
                "findBounds() needs a list of columns, e.g. ['income']; nothing was sent"
            );
        }
        if (!array_key_exists('epsilon', $options)) {
            throw new InvalidRequestException(
                "findBounds() needs an epsilon: what finding the bounds may cost, e.g. ['epsilon' => 0.1]; "
                . 'nothing was sent'
            );
        }
        $body = ['dataset' => $dataset, 'columns' => $columns];
        foreach ($options as $name => $value) {
            $body[$name] = match ($name) {
                'epsilon' => self::number($value, 'epsilon'),
                'where', 'by' => is_string($value) && $value !== '' ? $value
                    : throw new InvalidRequestException("$name must be a non-empty string; nothing was sent"),
                'within' => self::bounds($value),
                'max_groups', 'max_rows_per_group', 'max_rows' => is_int($value) ? $value
                    : throw new InvalidRequestException("$name must be an integer; nothing was sent"),
                default => throw new InvalidRequestException(sprintf(
                    'unknown option %s; the options are epsilon, where, within, by, max_groups, '
                    . 'max_rows_per_group, max_rows. Nothing was sent',
                    var_export($name, true),
                )),
            };
        }
        $answer = $this->post('/v1/bounds', $body, $dataset);
        $out = [];
        foreach (Decode::array($answer, 'bounds') as $entry) {
            if (is_array($entry)) {
                $out[] = ChosenBounds::fromArray($entry);
            }
        }
        return $out;
    }

    /** {@inheritDoc} */
    public function noisyCount(string $dataset, mixed $epsilon, array $where = []): Estimate
    {
        $sql = 'SELECT COUNT(*) AS n FROM ' . Sql::table($dataset) . Sql::where($where);
        return $this->query($dataset, $sql, ['epsilon' => $epsilon])->estimate();
    }

    /** {@inheritDoc} */
    public function noisySum(
        string $dataset,
        string $column,
        mixed $epsilon,
        array $where = [],
        ?array $bounds = null,
    ): Estimate {
        return $this->aggregate('SUM', $dataset, $column, $epsilon, $where, $bounds);
    }

    /** {@inheritDoc} */
    public function noisyMean(
        string $dataset,
        string $column,
        mixed $epsilon,
        array $where = [],
        ?array $bounds = null,
    ): Estimate {
        return $this->aggregate('AVG', $dataset, $column, $epsilon, $where, $bounds);
    }

    // ------------------------------------------------------------------------- mechanisms

    /** {@inheritDoc} */
    public function laplace(
        mixed $values,
        mixed $epsilon,
        mixed $sensitivity,
        string $grant,
    ): NoisyValues {
        $list = is_array($values) ? $values : [$values];
        if ($list === [] || !array_is_list($list)) {
            throw new InvalidRequestException('laplace() needs a number or a non-empty list of numbers');
        }
        $integer = true;
        foreach ($list as $v) {
            self::number($v, 'a value');
            $integer = $integer && is_int($v);
        }
        $body = [
            'dataset' => $grant,
            'values' => $values,
            'epsilon' => self::number($epsilon, 'epsilon'),
            'sensitivity' => self::number($sensitivity, 'sensitivity'),
            'integer' => $integer,
        ];
        $answer = $this->post('/v1/mechanisms/laplace', $body, $grant);
        $out = $answer['values'] ?? null;
        if (!is_int($out) && !is_float($out) && !(is_array($out) && array_is_list($out))) {
            throw new ServerException('the Laplace mechanism answered without values');
        }
        return new NoisyValues(
            $out,
            Decode::string($answer, 'mechanism'),
            Decode::nullableFloat($answer, 'error_bar'),
            Decode::nullableFloat($answer, 'error_bar_level'),
            Decode::nullableFloat($answer, 'scale'),
            Budget::fromArray(Decode::array($answer, 'loss')),
            Budget::fromArray(Decode::array($answer, 'remaining')),
        );
    }

    /** {@inheritDoc} */
    public function exponentialMechanism(
        array $scores,
        mixed $epsilon,
        mixed $sensitivity,
        string $grant,
    ): Choice {
        if ($scores === []) {
            throw new InvalidRequestException('exponentialMechanism() needs at least one score');
        }
        $keys = array_keys($scores);
        $body = [
            'dataset' => $grant,
            'candidates' => $keys,
            'scores' => array_map(static fn ($s) => self::number($s, 'a score'), array_values($scores)),
            'epsilon' => self::number($epsilon, 'epsilon'),
            'sensitivity' => self::number($sensitivity, 'sensitivity'),
        ];
        $answer = $this->post('/v1/mechanisms/exponential', $body, $grant);
        $index = Decode::int($answer, 'index');
        if (!array_key_exists($index, $keys)) {
            throw new ServerException("the exponential mechanism chose index $index of " . count($keys));
        }
        return new Choice(
            $keys[$index],
            $index,
            Budget::fromArray(Decode::array($answer, 'loss')),
            Budget::fromArray(Decode::array($answer, 'remaining')),
        );
    }

    /** {@inheritDoc} */
    public function randomizedResponse(
        array $values,
        array $categories,
        mixed $epsilon,
        string $grant,
    ): Reported {
        if ($values === [] || !array_is_list($values) || count($categories) < 2 || !array_is_list($categories)) {
            throw new InvalidRequestException(
                'randomizedResponse() needs a non-empty list of values and a list of at least two categories'
            );
        }
        $body = [
            'dataset' => $grant,
            'values' => $values,
            'categories' => $categories,
            'epsilon' => self::number($epsilon, 'epsilon'),
        ];
        $answer = $this->post('/v1/mechanisms/randomized-response', $body, $grant);
        $reported = Decode::array($answer, 'values');
        return new Reported(
            array_values($reported),
            Budget::fromArray(Decode::array($answer, 'loss')),
            Budget::fromArray(Decode::array($answer, 'remaining')),
        );
    }

    // ------------------------------------------------------------------------- budgets

    /** {@inheritDoc} */
    public function remainingBudget(string $dataset): Budget
    {
        foreach ($this->budgets() as $line) {
            if ($line->dataset === $dataset) {
                return $line->remaining;
            }
        }
        throw new NotFoundException(sprintf(
            'no grant on %s for this key; ask the administrator for one',
            var_export($dataset, true),
        ));
    }

    /** {@inheritDoc} */
    public function budgets(): array
    {
        [$status, $headers, $answer] = $this->http->send('GET', '/v1/budget');
        $answer = $this->answer($status, $headers, $answer);
        $out = [];
        foreach (Decode::array($answer, 'budgets') as $line) {
            $out[] = BudgetLine::fromArray(is_array($line) ? $line : []);
        }
        return $out;
    }

    /** {@inheritDoc} */
    public function history(string $dataset, int $limit = 100, ?string $before = null): array
    {
        return $this->historyPage($dataset, $limit, $before)->events;
    }

    /** {@inheritDoc} */
    public function historyPage(string $dataset, int $limit = 100, ?string $before = null): HistoryPage
    {
        if ($limit < 1 || $limit > 1000) {
            throw new InvalidRequestException(sprintf(
                'limit must be from 1 to 1000 events, got %d; nothing was sent',
                $limit,
            ));
        }
        $query = ['dataset' => $dataset, 'limit' => $limit] + ($before === null ? [] : ['before' => $before]);
        $path = '/v1/history?' . http_build_query($query, '', '&', PHP_QUERY_RFC3986);
        [$status, $headers, $answer] = $this->http->send('GET', $path);
        $answer = $this->answer($status, $headers, $answer);
        $out = [];
        foreach (Decode::array($answer, 'history') as $event) {
            $out[] = HistoryEvent::fromArray(is_array($event) ? $event : []);
        }
        return new HistoryPage($out, Decode::nullableString($answer, 'next'));
    }

    /** {@inheritDoc} */
    public function charge(int $reservation, ?string $fingerprint = null): ?HistoryEvent
    {
        [$status, $headers, $answer] = $this->http->send('GET', '/v1/charges/' . $reservation);
        if ($status === 404) {
            return null;
        }
        $found = HistoryEvent::fromArray($this->answer($status, $headers, $answer));
        return $fingerprint !== null && $found->fingerprint !== $fingerprint ? null : $found;
    }

    // ------------------------------------------------------------------------- internals

    /**
     * @param array<string, scalar|null|list<scalar>> $where
     * @param array{0: float|int|string, 1: float|int|string}|null $bounds
     */
    private function aggregate(
        string $function,
        string $dataset,
        string $column,
        mixed $epsilon,
        array $where,
        ?array $bounds,
    ): Estimate {
        $name = Sql::column($column);
        $sql = sprintf('SELECT %s(%s) AS value FROM %s%s', $function, $name, Sql::table($dataset), Sql::where($where));
        $options = ['epsilon' => $epsilon];
        if ($bounds !== null) {
            $options['bounds'] = [$column => $bounds];
        }
        return $this->query($dataset, $sql, $options)->estimate();
    }

    /**
     * @param array<string, mixed> $body
     * @return array<mixed>
     */
    private function post(string $path, array $body, string $grant): array
    {
        [$status, $headers, $answer] = $this->http->send('POST', $path, $body, ['dataset' => $grant]);
        return $this->answer($status, $headers, $answer);
    }

    /**
     * The body of a successful answer, or the typed exception of a problem.
     *
     * @param array<string, string> $headers
     * @return array<mixed>
     */
    private function answer(int $status, array $headers, mixed $body): array
    {
        if ($status >= 400) {
            throw Problem::fromResponse($status, $headers, $body)->toException();
        }
        if ($status < 200 || $status >= 300 || !is_array($body)) {
            throw new ServerException(sprintf(
                'the service answered HTTP %d with %s, not a JSON object',
                $status,
                get_debug_type($body),
            ));
        }
        return $body;
    }

    /**
     * @param array<string, mixed> $options
     * @return array<string, mixed>
     */
    private static function queryOptions(array $options, bool $query): array
    {
        $allowed = $query ? self::QUERY_OPTIONS : array_diff(self::QUERY_OPTIONS, ['consistent']);
        $unknown = array_diff(array_keys($options), $allowed);
        if ($unknown !== []) {
            throw new InvalidRequestException(sprintf(
                'unknown option(s) %s; the options are %s. Nothing was sent',
                implode(', ', $unknown),
                implode(', ', $query ? [...$allowed, 'async'] : $allowed),
            ));
        }
        $out = [];
        foreach ($options as $name => $value) {
            $out[$name] = match ($name) {
                'epsilon', 'delta', 'bounds_share', 'limits_share' => self::number($value, $name),
                'limits' => in_array($value, ['auto', 'auto_groups'], true) ? $value
                    : throw new InvalidRequestException(
                        "limits must be 'auto' (max_rows chosen under DP) or 'auto_groups' "
                        . "(max_groups, max_rows_per_group and max_rows); nothing was sent"
                    ),
                'bounds' => self::bounds($value),
                'max_groups', 'max_rows_per_group' => is_int($value) ? $value
                    : throw new InvalidRequestException("$name must be an integer; nothing was sent"),
                'consistent' => is_bool($value) ? $value
                    : throw new InvalidRequestException('consistent must be true or false; nothing was sent'),
                'target' => self::targets($value),
                'references' => self::references($value),
                'min_group_size' => is_int($value) && $value >= 1 ? $value
                    : throw new InvalidRequestException(
                        'min_group_size must be a positive integer (the public smallest group size '
                        . 'you assume), e.g. 100; nothing was sent'
                    ),
                'weights' => (is_string($value) && $value !== '') || $value === false ? $value
                    : throw new InvalidRequestException(
                        "weights must be a survey-weights column (e.g. 'coeff') or false; nothing was sent"
                    ),
            };
        }
        return $out;
    }

    /**
     * `$plan` checked for what is decidable here (its parts, a list of aggregates, their
     * functions); the service checks the rest, free.
     *
     * @param array<mixed> $plan
     * @return array<string, mixed>
     */
    private static function plan(array $plan): array
    {
        if ($plan === [] || array_is_list($plan)) {
            throw new InvalidRequestException(
                "a plan is an array of its parts, e.g. ['aggregates' => [['function' => 'count']]]; "
                . 'nothing was sent'
            );
        }
        $unknown = array_diff(array_keys($plan), self::PLAN_PARTS);
        if ($unknown !== []) {
            throw new InvalidRequestException(sprintf(
                'unknown plan part(s) %s; a plan has %s. Nothing was sent',
                implode(', ', $unknown),
                implode(', ', self::PLAN_PARTS),
            ));
        }
        $aggregates = $plan['aggregates'] ?? null;
        if (!is_array($aggregates) || $aggregates === [] || !array_is_list($aggregates)) {
            throw new InvalidRequestException(
                "a plan needs 'aggregates', a list of at least one, e.g. [['function' => 'count']]; "
                . 'nothing was sent'
            );
        }
        foreach ($aggregates as $aggregate) {
            $function = is_array($aggregate) ? ($aggregate['function'] ?? null) : null;
            if (is_string($function) && in_array($function, self::PLAN_FUNCTIONS, true)) {
                continue;
            }
            if (!is_string($function)) {
                throw new InvalidRequestException(sprintf(
                    "each aggregate is an array with a 'function' (one of %s), e.g. "
                    . "['function' => 'sum', 'column' => 'income']; got %s. Nothing was sent",
                    implode(', ', self::PLAN_FUNCTIONS),
                    is_scalar($aggregate) ? var_export($aggregate, true) : json_encode($aggregate),
                ));
            }
            $close = null;
            foreach (self::PLAN_FUNCTIONS as $known) {
                if (levenshtein($function, $known) <= 2) {
                    $close = $known;
                    break;
                }
            }
            throw new InvalidRequestException(sprintf(
                'aggregate %s is not one a plan can ask for%s (use one of %s, as '
                . "['function' => 'sum', 'column' => 'income']); nothing was sent",
                var_export($function, true),
                $close === null ? '' : sprintf('; did you mean %s?', var_export($close, true)),
                implode(', ', self::PLAN_FUNCTIONS),
            ));
        }
        /** @var array<string, mixed> $plan */
        return $plan;
    }

    /** @return list<string> accuracy targets as the service reads them ('n=±50') */
    private static function targets(mixed $targets): array
    {
        $list = is_string($targets) ? [$targets] : $targets;
        if (
            !is_array($list) || !array_is_list($list) || $list === []
            || array_filter($list, static fn ($t) => !is_string($t) || $t === '') !== []
        ) {
            throw new InvalidRequestException(
                "target must be a target or a list of them, e.g. 'n=±50' or ['n=±50', 'mean=±2%']; "
                . 'nothing was sent'
            );
        }
        return $list;
    }

    /** @return array<string, float> */
    private static function references(mixed $references): array
    {
        if (!is_array($references) || array_is_list($references)) {
            throw new InvalidRequestException(
                "references must map columns to public values, e.g. ['mean' => 40000]; nothing was sent"
            );
        }
        $out = [];
        foreach ($references as $column => $value) {
            if (!is_int($value) && !is_float($value)) {
                throw new InvalidRequestException(sprintf(
                    'the reference of %s must be a number; nothing was sent',
                    var_export($column, true),
                ));
            }
            $out[(string) $column] = (float) $value;
        }
        return $out;
    }

    /**
     * @return 'auto'|array<string, array{0: float|int|string, 1: float|int|string}|'auto'|array{auto: string}>
     */
    private static function bounds(mixed $bounds): string|array
    {
        if ($bounds === 'auto') {
            return 'auto';
        }
        if (!is_array($bounds)) {
            throw new InvalidRequestException(
                "bounds must map columns to [lower, upper], e.g. ['amount' => [0, 500]], or be "
                . "'auto'; nothing was sent"
            );
        }
        $out = [];
        foreach ($bounds as $column => $pair) {
            if ($pair === 'auto') {
                $out[(string) $column] = 'auto';
                continue;
            }
            if (is_array($pair) && array_keys($pair) === ['auto']) {
                if (!is_string($pair['auto']) || $pair['auto'] === '') {
                    throw new InvalidRequestException(sprintf(
                        "the bounds of %s per group must be ['auto' => KEY], KEY a GROUP BY key "
                        . "of the query (e.g. ['auto' => 'state']); nothing was sent",
                        var_export($column, true),
                    ));
                }
                $out[(string) $column] = ['auto' => $pair['auto']];
                continue;
            }
            if (!is_array($pair) || !array_is_list($pair) || count($pair) !== 2) {
                throw new InvalidRequestException(sprintf(
                    "the bounds of %s must be [lower, upper], 'auto' or ['auto' => KEY]; nothing was sent",
                    var_export($column, true),
                ));
            }
            $out[(string) $column] = [self::number($pair[0], 'a bound'), self::number($pair[1], 'a bound')];
        }
        return $out;
    }

    /** A number for the service: a finite int or float, or an exact decimal/fraction string. */
    private static function number(mixed $value, string $what): int|float|string
    {
        if (is_int($value)) {
            return $value;
        }
        if (is_float($value) && is_finite($value)) {
            return $value;
        }
        if (is_string($value) && preg_match(self::EXACT, $value) === 1) {
            return $value;
        }
        throw new InvalidRequestException(sprintf(
            '%s must be a finite number or an exact string such as "0.1" or "1/3", got %s; '
            . 'nothing was sent',
            $what,
            is_scalar($value) ? var_export($value, true) : get_debug_type($value),
        ));
    }

    /** @param array<string, mixed> $options */
    private static function seconds(array $options, string $name, float $default): float
    {
        $value = $options[$name] ?? $default;
        if ((!is_int($value) && !is_float($value)) || !is_finite((float) $value) || $value <= 0) {
            throw new InvalidRequestException("the client option $name must be a positive number of seconds");
        }
        return (float) $value;
    }

    private static function checkUrl(string $url, bool $allowInsecure): void
    {
        $parts = parse_url($url);
        $scheme = is_array($parts) ? strtolower($parts['scheme'] ?? '') : '';
        $host = is_array($parts) ? strtolower(trim($parts['host'] ?? '', '[]')) : '';
        if (!in_array($scheme, ['http', 'https'], true) || $host === '' || isset($parts['query'])) {
            throw new InvalidRequestException(sprintf(
                'the service URL %s is not an http(s) URL such as https://veil.example.org',
                var_export($url, true),
            ));
        }
        $loopback = $host === 'localhost' || $host === '::1' || str_starts_with($host, '127.');
        if ($scheme === 'http' && !$loopback && !$allowInsecure) {
            throw new InvalidRequestException(sprintf(
                'refusing plain http:// to %s: the API key is a bearer token and would cross the '
                . 'network in clear. Use https:// (a TLS proxy in front of veil serve), or pass '
                . "['allow_insecure_http' => true] if the network is private",
                $host,
            ));
        }
    }
}
