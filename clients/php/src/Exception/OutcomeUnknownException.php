<?php

declare(strict_types=1);

namespace Veil\Exception;

use Veil\Problem;

/**
 * The service answered `outcome-unknown` (HTTP 500): it failed after it reserved this request's
 * charge — its ledger's database failed as the charge was being written, say. **The charge may
 * stand, and no answer was released.** Do not send the request again: once the service answers
 * again, `$client->charge($e->reservation, $e->fingerprint)` says what became of it (see
 * {@see TimeoutException} for what each status means; null: nothing was charged).
 * `$reservation` is null when the database never said the charge's id: then look for the query
 * in `history()`.
 */
final class OutcomeUnknownException extends TimeoutException
{
    public function __construct(
        string $message,
        public readonly ?int $reservation,
        public readonly ?string $fingerprint,
        Problem $problem,
    ) {
        parent::__construct($message, 'POST', $problem->instance ?? '', null, null, null, null, $problem);
    }
}
