<?php

declare(strict_types=1);

namespace Veil\Exception;

use Veil\Problem;

/**
 * The request was refused before anything was charged: the body does not fit the schema
 * (`invalid-request`, 422; {@see $errors} says where), a parameter is out of its domain or
 * widens what the data owner set (`invalid-argument`), bounds are missing or wider than the
 * owner's (`bounds`), an unknown column or a type that does not fit (`schema`), or the request
 * is too large (`payload-too-large`, 413).
 *
 * The client raises it too, before sending anything, for an argument it can check itself (an
 * identifier that is not a plain column name, a non-finite number, an unknown option); then
 * {@see $problem} is null.
 */
class InvalidRequestException extends VeilException
{
    /** @var list<array{loc: list<string>, msg: string}> where the body did not fit (422) */
    public readonly array $errors;

    public function __construct(string $message, ?Problem $problem = null, ?\Throwable $previous = null)
    {
        parent::__construct($message, $problem, $previous);
        $errors = [];
        foreach ((array) ($problem?->extensions['errors'] ?? []) as $error) {
            if (is_array($error)) {
                $errors[] = [
                    'loc' => array_values(array_map('strval', (array) ($error['loc'] ?? []))),
                    'msg' => (string) ($error['msg'] ?? ''),
                ];
            }
        }
        $this->errors = $errors;
    }
}
