<?php

declare(strict_types=1);

namespace Veil\Exception;

use Veil\Problem;

/**
 * Too many requests with this key (`urn:veil:problem:rate-limited`, 429). Nothing was done or
 * charged; send it again after {@see $retryAfter} seconds (the `Retry-After` header). The
 * client does not wait and retry by itself.
 */
class RateLimitedException extends VeilException
{
    public function __construct(
        string $message,
        public readonly int $retryAfter,
        ?Problem $problem = null,
        ?\Throwable $previous = null,
    ) {
        parent::__construct($message, $problem, $previous);
    }
}
