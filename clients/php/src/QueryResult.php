<?php

declare(strict_types=1);

namespace Veil;

use Veil\Exception\ServerException;

/**
 * A query's answer: the released rows, the error bar of every number, and what it cost.
 *
 * `$rows[$i][$column]` is a released value; `$errorBars[$i][$column]` is its half-width at
 * {@see $errorBarLevel} (0.95: the true value lies within `value ± errorBar` with probability
 * 95 %), null for a group key (public, not noised) or a quantile. {@see $cost} is what this
 * answer was charged — zero when {@see $cached}: an identical query (same measurement, data and
 * privacy parameters) is answered from the service's cache with the same noise, at no cost.
 * {@see $jobId} names the job that answered it, when the service ran it as one (a query slower
 * than its `query_timeout_s`, or sent with `async`).
 */
final class QueryResult
{
    /**
     * @param list<string> $columns
     * @param list<array<string, scalar|null>> $rows
     * @param list<array<string, float|null>> $errorBars
     * @param list<string> $notes
     * @param list<array<string, mixed>> $usage what each part of the budget paid for
     * @param list<ChosenBounds> $autoBounds with `'bounds' => 'auto'`: the bounds chosen
     * @param array<string, mixed>|null $autoLimits with `'limits' => 'auto'`: the contribution
     *     limits chosen (`max_rows`, `max_groups`, `max_rows_per_group`, `dropped` ±
     *     `dropped_bar`, `loss`, `cost`, `cached`, `cap`), as the service sent them
     */
    public function __construct(
        public readonly string $dataset,
        public readonly array $columns,
        public readonly array $rows,
        public readonly array $errorBars,
        public readonly float $errorBarLevel,
        public readonly Budget $cost,
        public readonly ?Budget $remaining,
        public readonly bool $cached,
        public readonly string $fingerprint,
        public readonly array $notes = [],
        public readonly array $usage = [],
        public readonly ?string $jobId = null,
        public readonly array $autoBounds = [],
        public readonly ?array $autoLimits = null,
    ) {
    }

    /** @param array<mixed> $answer the service's `QueryAnswer` */
    public static function fromAnswer(array $answer, ?string $jobId = null): self
    {
        $columns = Decode::strings($answer, 'columns');
        if (count(array_unique($columns)) !== count($columns)) {
            throw new ServerException('the answer names a column twice: ' . implode(', ', $columns));
        }
        $rows = [];
        foreach (Decode::array($answer, 'rows') as $row) {
            $rows[] = self::row($columns, $row, 'rows');
        }
        $bars = [];
        foreach (Decode::array($answer, 'error_bars') as $row) {
            $bars[] = array_map(
                static fn ($v) => $v === null ? null : (float) $v,
                self::row($columns, $row, 'error_bars'),
            );
        }
        if (count($bars) !== count($rows)) {
            throw new ServerException('the answer has ' . count($rows) . ' rows but '
                . count($bars) . ' rows of error bars');
        }
        $remaining = Decode::nullableArray($answer, 'remaining');
        $usage = [];
        foreach (Decode::array($answer, 'usage') as $part) {
            if (is_array($part)) {
                $usage[] = $part;
            }
        }
        $autoBounds = [];
        foreach (Decode::nullableArray($answer, 'auto_bounds') ?? [] as $entry) {
            if (is_array($entry)) {
                $autoBounds[] = ChosenBounds::fromArray($entry);
            }
        }
        return new self(
            Decode::string($answer, 'dataset'),
            $columns,
            $rows,
            $bars,
            Decode::float($answer, 'error_bar_level'),
            Budget::fromArray(Decode::array($answer, 'cost')),
            $remaining === null ? null : Budget::fromArray($remaining),
            Decode::bool($answer, 'cached'),
            Decode::string($answer, 'fingerprint'),
            Decode::strings($answer, 'notes'),
            $usage,
            $jobId,
            $autoBounds,
            Decode::nullableArray($answer, 'auto_limits'),
        );
    }

    /** The released value in row `$row` (0-based), column `$column`. */
    public function value(int $row, string $column): string|int|float|bool|null
    {
        $this->check($row, $column);
        return $this->rows[$row][$column];
    }

    /** The half-width of that value's error bar (null: a group key or a quantile). */
    public function errorBar(int $row, string $column): ?float
    {
        $this->check($row, $column);
        return $this->errorBars[$row][$column];
    }

    /**
     * Column `$column`'s values, keyed by the values of column `$by` (a group key):
     * `$result->keyed('region', 'orders')` → `['North' => 812, …]`.
     *
     * @return array<string, scalar|null>
     */
    public function keyed(string $by, string $column): array
    {
        $this->check(0, $by, false);
        $this->check(0, $column, false);
        $out = [];
        foreach ($this->rows as $row) {
            $out[(string) $row[$by]] = $row[$column];
        }
        return $out;
    }

    /** The one value of a one-row, one-column answer, with its error bar and cost. */
    public function estimate(): Estimate
    {
        if (count($this->rows) !== 1 || count($this->columns) !== 1) {
            throw new \LogicException(sprintf(
                'estimate() needs one row and one column; this answer has %d rows and columns %s',
                count($this->rows),
                implode(', ', $this->columns),
            ));
        }
        $column = $this->columns[0];
        $value = $this->rows[0][$column];
        if (!is_int($value) && !is_float($value) && $value !== null) {
            throw new ServerException('the answer to an aggregate is ' . get_debug_type($value));
        }
        return new Estimate(
            $value,
            $this->errorBars[0][$column],
            $this->errorBarLevel,
            $this->cost,
            $this->remaining,
            $this->cached,
            $this->fingerprint,
        );
    }

    private function check(int $row, string $column, bool $checkRow = true): void
    {
        if (!in_array($column, $this->columns, true)) {
            throw new \OutOfBoundsException(sprintf(
                'no column %s; the answer has %s',
                json_encode($column),
                implode(', ', $this->columns),
            ));
        }
        if ($checkRow && !array_key_exists($row, $this->rows)) {
            throw new \OutOfBoundsException(sprintf(
                'no row %d; the answer has %d rows',
                $row,
                count($this->rows),
            ));
        }
    }

    /**
     * One row of the answer (a list in column order) as an array keyed by column name.
     *
     * @param list<string> $columns
     * @return array<string, scalar|null>
     */
    private static function row(array $columns, mixed $row, string $key): array
    {
        if (!is_array($row) || !array_is_list($row) || count($row) !== count($columns)) {
            throw new ServerException(sprintf(
                'a row of `%s` is not a list of %d values',
                $key,
                count($columns),
            ));
        }
        $out = [];
        foreach ($columns as $i => $name) {
            $value = $row[$i];
            if (!is_scalar($value) && $value !== null) {
                throw new ServerException(sprintf('a cell of `%s` is %s', $key, get_debug_type($value)));
            }
            $out[$name] = $value;
        }
        return $out;
    }
}
