<?php

declare(strict_types=1);

namespace Veil\Exception;

use Veil\Problem;

/**
 * The root of every error this client raises.
 *
 * ```text
 * VeilException
 * ├── AuthenticationException    401 unauthorized (missing, unknown or revoked key), 403 forbidden
 * ├── NotFoundException          404: no such dataset (or not granted to you), job or route
 * ├── InvalidRequestException    400/413/422: refused before anything was charged; also raised
 * │   │                          by the client itself, before sending, for a bad argument
 * │   └── UnsupportedQueryException   400: SQL outside veil's subset (line(), column())
 * ├── BudgetExhaustedException   403: the query costs more than remains (requested, remaining)
 * ├── RateLimitedException       429: too many requests (retryAfter seconds)
 * ├── ServerException            500 query-failed / internal-error, 503 unavailable (nothing
 * │                              was charged: retry later), or an answer this client cannot read
 * ├── ConnectionException        the service could not be reached: nothing was sent
 * └── TimeoutException           sent, but no complete answer came back: the outcome is unknown
 *     └── OutcomeUnknownException  500 outcome-unknown: the service failed after reserving the
 *                                  charge (reservation, fingerprint: look it up with charge())
 * ```
 *
 * An error the service answered carries its RFC 9457 problem document in {@see $problem}
 * (null for an error the client found itself). This client never retries a request.
 */
class VeilException extends \RuntimeException
{
    public function __construct(
        string $message,
        public readonly ?Problem $problem = null,
        ?\Throwable $previous = null,
    ) {
        parent::__construct($message, $problem?->status ?? 0, $previous);
    }

    /** The problem type's URN (`urn:veil:problem:…`), null for a client-side error. */
    public function type(): ?string
    {
        return $this->problem?->type;
    }
}
