<?php

declare(strict_types=1);

namespace Veil\Exception;

use Veil\Problem;

/**
 * The request was sent, but no complete answer came back (the client's timeout passed, or the
 * connection broke): **the outcome is unknown, and the service may have charged it.** The client
 * never retries, and you should not either without looking first.
 *
 * How to learn the outcome of a query: call `$client->history($dataset)` and find the charge
 * recorded with this SQL ({@see $sql}):
 *
 * - status `committed`: it was answered. Re-issue the *identical* query (same SQL, ε and
 *   options): the service answers it from its cache at no cost and with the same noise.
 * - status `reserved`: it is still running. Wait and look again — re-issuing now would be
 *   charged a second time.
 * - status `abandoned`: its worker stopped before answering (the service resolves a charge
 *   left `reserved` after its `reservation_ttl_s`): the charge stays and nothing was released;
 *   re-issuing it is charged again.
 * - no charge: nothing was spent (it was refused, or never arrived); sending it again is safe.
 *
 * When the service itself said so ({@see OutcomeUnknownException}: its ledger failed after it
 * reserved the charge), the charge's id is known: `$client->charge($e->reservation)` looks it
 * up directly.
 *
 * A query slower than the service's `query_timeout_s` becomes a job (202) that this client
 * polls by itself, so set the client's `timeout` above the service's `query_timeout_s`
 * (30 s by default) rather than retrying. When waiting for a job timed out, {@see $jobId} names
 * it: `$client->awaitJob($jobId)` goes on waiting, free.
 *
 * Mechanism calls (`laplace`, `exponentialMechanism`, `randomizedResponse`) are not cached:
 * re-issuing one draws fresh noise and is charged again; `history($grant)` shows whether the
 * lost call was charged.
 */
class TimeoutException extends VeilException
{
    public function __construct(
        string $message,
        public readonly string $method,
        public readonly string $path,
        public readonly ?string $dataset = null,
        public readonly ?string $sql = null,
        public readonly ?string $jobId = null,
        ?\Throwable $previous = null,
        ?Problem $problem = null,
    ) {
        parent::__construct($message, $problem, $previous);
    }
}
