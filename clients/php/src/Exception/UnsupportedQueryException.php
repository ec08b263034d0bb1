<?php

declare(strict_types=1);

namespace Veil\Exception;

use Veil\Problem;

/**
 * The SQL is outside veil's differentially private subset (`urn:veil:problem:unsupported-query`,
 * 400), e.g. `SELECT *` or a join. {@see line()} and {@see column()} (1-based) point at the
 * offending construct in the SQL when the service knows it (methods, because an exception's
 * `$line` property is the PHP file's line). Nothing was charged.
 */
class UnsupportedQueryException extends InvalidRequestException
{
    private readonly ?int $sqlLine;
    private readonly ?int $sqlColumn;

    public function __construct(string $message, ?Problem $problem = null, ?\Throwable $previous = null)
    {
        parent::__construct($message, $problem, $previous);
        $line = $problem?->extensions['line'] ?? null;
        $column = $problem?->extensions['column'] ?? null;
        $this->sqlLine = is_int($line) ? $line : null;
        $this->sqlColumn = is_int($column) ? $column : null;
    }

    /** The offending construct's line in the SQL (1-based), null when unknown. */
    public function line(): ?int
    {
        return $this->sqlLine;
    }

    /** Its column in that line (1-based), null when unknown. */
    public function column(): ?int
    {
        return $this->sqlColumn;
    }
}
