<?php

declare(strict_types=1);

namespace Veil\Exception;

use Veil\Budget;
use Veil\Problem;

/**
 * The request costs more privacy budget than remains (`urn:veil:problem:budget-exhausted`, 403):
 * {@see $requested} is what it would cost, {@see $remaining} what is left of the grant (or of
 * the dataset's total across all analysts). Nothing was charged. Ask the data owner for a larger
 * grant, or ask a cheaper question (a smaller ε); a query already answered is still answered
 * from the cache at no cost.
 */
class BudgetExhaustedException extends VeilException
{
    public function __construct(
        string $message,
        public readonly Budget $requested,
        public readonly Budget $remaining,
        ?Problem $problem = null,
        ?\Throwable $previous = null,
    ) {
        parent::__construct($message, $problem, $previous);
    }
}
