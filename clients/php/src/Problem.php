<?php

declare(strict_types=1);

namespace Veil;

use Veil\Exception\AuthenticationException;
use Veil\Exception\BudgetExhaustedException;
use Veil\Exception\InvalidRequestException;
use Veil\Exception\NotFoundException;
use Veil\Exception\OutcomeUnknownException;
use Veil\Exception\RateLimitedException;
use Veil\Exception\ServerException;
use Veil\Exception\UnsupportedQueryException;
use Veil\Exception\VeilException;

/**
 * An RFC 9457 problem document (`application/problem+json`), the body of every error the
 * service answers. {@see $type} is a stable URN, `urn:veil:problem:<slug>` (the list is served at
 * `GET /problems`); {@see $extensions} holds the members beyond RFC 9457's (`requested`,
 * `remaining`, `line`, `column`, `errors`).
 */
final class Problem
{
    public const PREFIX = 'urn:veil:problem:';

    /**
     * @param array<string, mixed> $extensions
     * @param array<string, string> $headers the response's headers, names in lower case
     */
    public function __construct(
        public readonly string $type,
        public readonly string $title,
        public readonly int $status,
        public readonly string $detail,
        public readonly ?string $instance = null,
        public readonly array $extensions = [],
        public readonly array $headers = [],
    ) {
    }

    /**
     * The problem of an error response; a body that is not a problem document (a proxy's HTML
     * page, say) becomes one of type `about:blank` with the status.
     *
     * @param array<string, string> $headers
     */
    public static function fromResponse(int $status, array $headers, mixed $body): self
    {
        if (!is_array($body) || !is_string($body['type'] ?? null)) {
            return new self('about:blank', 'HTTP ' . $status, $status, sprintf(
                'the service answered HTTP %d without a problem document',
                $status,
            ), null, [], $headers);
        }
        $known = ['type', 'title', 'status', 'detail', 'instance'];
        $extensions = [];
        foreach ($body as $name => $value) {
            if (is_string($name) && !in_array($name, $known, true)) {
                $extensions[$name] = $value;
            }
        }
        return new self(
            $body['type'],
            is_string($body['title'] ?? null) ? $body['title'] : '',
            is_int($body['status'] ?? null) ? $body['status'] : $status,
            is_string($body['detail'] ?? null) ? $body['detail'] : '',
            is_string($body['instance'] ?? null) ? $body['instance'] : null,
            $extensions,
            $headers,
        );
    }

    /** The end of the type's URN (`budget-exhausted`), or the whole type if it is not veil's. */
    public function slug(): string
    {
        return str_starts_with($this->type, self::PREFIX)
            ? substr($this->type, strlen(self::PREFIX))
            : $this->type;
    }

    /** The typed exception for this problem (see {@see VeilException} for the tree). */
    public function toException(): VeilException
    {
        $message = $this->detail !== '' ? $this->detail : $this->title;
        switch ($this->slug()) {
            case 'unauthorized':
            case 'forbidden':
                return new AuthenticationException($message, $this);
            case 'not-found':
                return new NotFoundException($message, $this);
            case 'unsupported-query':
                return new UnsupportedQueryException($message, $this);
            case 'invalid-request':
            case 'invalid-argument':
            case 'bounds':
            case 'schema':
            case 'payload-too-large':
            case 'method-not-allowed':
                return new InvalidRequestException($message, $this);
            case 'budget-exhausted':
                $requested = $this->extensions['requested'] ?? null;
                $remaining = $this->extensions['remaining'] ?? null;
                if (is_array($requested) && is_array($remaining)) {
                    return new BudgetExhaustedException(
                        $message,
                        Budget::fromArray($requested),
                        Budget::fromArray($remaining),
                        $this,
                    );
                }
                return new ServerException('a budget-exhausted problem without requested and '
                    . 'remaining: ' . $message, $this);
            case 'outcome-unknown':
                $reservation = $this->extensions['reservation'] ?? null;
                $fingerprint = $this->extensions['fingerprint'] ?? null;
                return new OutcomeUnknownException(
                    $message,
                    is_int($reservation) ? $reservation : null,
                    is_string($fingerprint) ? $fingerprint : null,
                    $this,
                );
            case 'rate-limited':
                $after = $this->headers['retry-after'] ?? '';
                $seconds = ctype_digit($after) ? (int) $after : 1;
                return new RateLimitedException($message, $seconds, $this);
            default:
                return new ServerException($message, $this);
        }
    }
}
