<?php

declare(strict_types=1);

namespace Veil;

use Veil\Exception\ServerException;

/**
 * Typed reads of the service's JSON answers: a member missing or of the wrong type is a
 * {@see ServerException} naming it (the service's OpenAPI document promises these shapes).
 *
 * @internal
 */
final class Decode
{
    /** @param array<mixed> $data */
    public static function string(array $data, string $key): string
    {
        $value = $data[$key] ?? null;
        if (!is_string($value)) {
            throw self::wrong($key, 'a string', $value);
        }
        return $value;
    }

    /** @param array<mixed> $data */
    public static function nullableString(array $data, string $key): ?string
    {
        $value = $data[$key] ?? null;
        if ($value !== null && !is_string($value)) {
            throw self::wrong($key, 'a string or null', $value);
        }
        return $value;
    }

    /** @param array<mixed> $data */
    public static function int(array $data, string $key): int
    {
        $value = $data[$key] ?? null;
        if (!is_int($value)) {
            throw self::wrong($key, 'an integer', $value);
        }
        return $value;
    }

    /** @param array<mixed> $data */
    public static function float(array $data, string $key): float
    {
        $value = $data[$key] ?? null;
        if (!is_int($value) && !is_float($value)) {
            throw self::wrong($key, 'a number', $value);
        }
        return (float) $value;
    }

    /** @param array<mixed> $data */
    public static function nullableFloat(array $data, string $key): ?float
    {
        $value = $data[$key] ?? null;
        if ($value === null) {
            return null;
        }
        if (!is_int($value) && !is_float($value)) {
            throw self::wrong($key, 'a number or null', $value);
        }
        return (float) $value;
    }

    /** @param array<mixed> $data */
    public static function bool(array $data, string $key): bool
    {
        $value = $data[$key] ?? null;
        if (!is_bool($value)) {
            throw self::wrong($key, 'true or false', $value);
        }
        return $value;
    }

    /**
     * @param array<mixed> $data
     * @return array<mixed>
     */
    public static function array(array $data, string $key): array
    {
        $value = $data[$key] ?? null;
        if (!is_array($value)) {
            throw self::wrong($key, 'an array or object', $value);
        }
        return $value;
    }

    /**
     * @param array<mixed> $data
     * @return array<mixed>|null
     */
    public static function nullableArray(array $data, string $key): ?array
    {
        $value = $data[$key] ?? null;
        if ($value !== null && !is_array($value)) {
            throw self::wrong($key, 'an array, an object or null', $value);
        }
        return $value;
    }

    /**
     * @param array<mixed> $data
     * @return list<string>
     */
    public static function strings(array $data, string $key): array
    {
        $out = [];
        foreach (self::array($data, $key) as $item) {
            if (!is_string($item)) {
                throw self::wrong($key, 'a list of strings', $item);
            }
            $out[] = $item;
        }
        return $out;
    }

    private static function wrong(string $key, string $expected, mixed $value): ServerException
    {
        return new ServerException(sprintf(
            'the service answered with %s where `%s` should be %s; is the URL a veil service of '
            . 'a version this client knows?',
            get_debug_type($value),
            $key,
            $expected,
        ));
    }
}
