<?php

declare(strict_types=1);

namespace Veil\Exception;

/**
 * The service could not be reached (the name did not resolve, the connection was refused or
 * not made within the connect timeout, TLS failed). No request reached the service, so nothing
 * was charged, and sending it again is safe.
 */
class ConnectionException extends VeilException
{
}
