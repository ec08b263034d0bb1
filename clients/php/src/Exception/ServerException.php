<?php

declare(strict_types=1);

namespace Veil\Exception;

/**
 * The service failed: `query-failed` (500: the engine failed after it began reading the data —
 * the charge stays, and the engine's words are withheld because they could depend on the data),
 * `internal-error` (500: a bug in veil; the operator's log has the details), `unavailable`
 * (503: the ledger database or the random source failed; try again later), or an answer this
 * client could not read (then {@see VeilException::$problem} is null or of an unknown type).
 */
class ServerException extends VeilException
{
}
