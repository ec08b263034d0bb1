<?php

declare(strict_types=1);

namespace Veil\Exception;

/**
 * No such resource (`urn:veil:problem:not-found`, 404). A dataset that exists but is not granted
 * to you answers exactly like one that does not exist, so that names cannot be enumerated: ask
 * the administrator for a grant. Nothing was charged.
 */
class NotFoundException extends VeilException
{
}
