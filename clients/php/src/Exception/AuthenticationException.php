<?php

declare(strict_types=1);

namespace Veil\Exception;

/**
 * The service refused the API key: none was sent, it is unknown, or it was revoked or rotated
 * (`urn:veil:problem:unauthorized`, 401) — or the key is valid but the endpoint is for
 * administrators (`urn:veil:problem:forbidden`, 403). Nothing was charged. Ask an administrator
 * for a live key (`veil admin key rotate NAME` makes a new one).
 */
class AuthenticationException extends VeilException
{
}
