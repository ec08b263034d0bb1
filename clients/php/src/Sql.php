<?php

declare(strict_types=1);

namespace Veil;

use Veil\Exception\InvalidRequestException;

/**
 * Builds the SQL of {@see Client::noisyCount()}, {@see Client::noisySum()} and
 * {@see Client::noisyMean()} from parts, so that no caller input is ever pasted into a query.
 *
 * The quoting rules (veil parses SQL in DuckDB's dialect):
 *
 * - a **column** must match {@see IDENTIFIER} (ASCII letters, digits and `_`, not starting with
 *   a digit, at most 128 characters) and is then written in double quotes; anything else is
 *   refused before sending — a column name is never escaped into shape;
 * - the **table** is the dataset's name, written in double quotes with any `"` doubled;
 * - a **string value** is written in single quotes with every `'` doubled (a backslash has no
 *   special meaning in this dialect); strings that are not valid UTF-8 or contain a NUL byte
 *   are refused;
 * - an **int** is written in decimal, a **float** must be finite and is written as JSON writes
 *   it (`0.1`, `1.0e+25`), a **bool** as `TRUE` / `FALSE`, **null** as `IS NULL`, a **list** as
 *   `IN (…)` of such values.
 *
 * For anything else (ranges, OR, functions), write the SQL yourself and use
 * {@see Client::query()}: what you paste there is yours to quote.
 */
final class Sql
{
    public const IDENTIFIER = '/^[A-Za-z_][A-Za-z0-9_]{0,127}$/D';

    /** A column name, checked against {@see IDENTIFIER} and double-quoted. */
    public static function column(string $name): string
    {
        if (preg_match(self::IDENTIFIER, $name) !== 1) {
            throw new InvalidRequestException(sprintf(
                'column %s is not a plain identifier (letters, digits and _, not starting with a '
                . 'digit, at most 128 characters); nothing was sent. For another name, write the '
                . 'SQL yourself and call query()',
                json_encode($name, JSON_INVALID_UTF8_SUBSTITUTE),
            ));
        }
        return '"' . $name . '"';
    }

    /** A table (dataset) name, double-quoted with `"` doubled. */
    public static function table(string $name): string
    {
        self::checkText($name, 'dataset name');
        if ($name === '') {
            throw new InvalidRequestException('the dataset name is empty; nothing was sent');
        }
        return '"' . str_replace('"', '""', $name) . '"';
    }

    /** A value as an SQL literal (see the class's quoting rules). */
    public static function literal(string|int|float|bool $value): string
    {
        if (is_string($value)) {
            self::checkText($value, 'string value');
            return "'" . str_replace("'", "''", $value) . "'";
        }
        if (is_bool($value)) {
            return $value ? 'TRUE' : 'FALSE';
        }
        if (is_int($value)) {
            return (string) $value;
        }
        if (!is_finite($value)) {
            throw new InvalidRequestException(sprintf(
                'the value %s is not a finite number; nothing was sent',
                var_export($value, true),
            ));
        }
        return json_encode($value, JSON_PRESERVE_ZERO_FRACTION | JSON_THROW_ON_ERROR);
    }

    /**
     * ` WHERE …` for equality conditions, or `''` for none: `['region' => 'North']` is
     * `"region" = 'North'`, `['region' => ['North', 'South']]` is `"region" IN ('North',
     * 'South')`, `['coupon' => null]` is `"coupon" IS NULL`; several conditions are ANDed.
     *
     * @param array<string, scalar|null|list<scalar>> $conditions
     */
    public static function where(array $conditions): string
    {
        $parts = [];
        foreach ($conditions as $column => $value) {
            $name = self::column((string) $column);
            if ($value === null) {
                $parts[] = $name . ' IS NULL';
            } elseif (is_array($value)) {
                if ($value === [] || !array_is_list($value)) {
                    throw new InvalidRequestException(sprintf(
                        'the condition on %s needs a non-empty list of values; nothing was sent',
                        $name,
                    ));
                }
                $parts[] = $name . ' IN (' . implode(', ', array_map(
                    static fn ($v) => self::literal(self::scalar($v, $name)),
                    $value,
                )) . ')';
            } else {
                $parts[] = $name . ' = ' . self::literal(self::scalar($value, $name));
            }
        }
        return $parts === [] ? '' : ' WHERE ' . implode(' AND ', $parts);
    }

    private static function scalar(mixed $value, string $column): string|int|float|bool
    {
        if (!is_scalar($value)) {
            throw new InvalidRequestException(sprintf(
                'the condition on %s compares with %s; give a string, a number, a bool, null or a '
                . 'list of them. Nothing was sent',
                $column,
                get_debug_type($value),
            ));
        }
        return $value;
    }

    private static function checkText(string $text, string $what): void
    {
        if (preg_match('//u', $text) !== 1 || str_contains($text, "\0")) {
            throw new InvalidRequestException(sprintf(
                'the %s is not valid UTF-8 or contains a NUL byte; nothing was sent',
                $what,
            ));
        }
    }
}
