<?php

declare(strict_types=1);

namespace Veil;

/**
 * A privacy loss or budget as the service states it: `pure` (ε), `approx` (ε, δ) or `zcdp` (ρ).
 * The floats are for reading; {@see $exact} holds the ledger's exact fractions as strings
 * (`['epsilon' => '1/3', 'delta' => '0']`), for auditing.
 */
final class Budget
{
    /** @param array<string, string> $exact */
    public function __construct(
        public readonly string $kind,
        public readonly ?float $epsilon,
        public readonly ?float $delta,
        public readonly ?float $rho,
        public readonly array $exact,
    ) {
    }

    /** @param array<mixed> $data a `BudgetOut` object of the service's answers */
    public static function fromArray(array $data): self
    {
        $exact = [];
        foreach (Decode::array($data, 'exact') as $name => $value) {
            if (is_string($name) && is_string($value)) {
                $exact[$name] = $value;
            }
        }
        return new self(
            Decode::string($data, 'kind'),
            Decode::nullableFloat($data, 'epsilon'),
            Decode::nullableFloat($data, 'delta'),
            Decode::nullableFloat($data, 'rho'),
            $exact,
        );
    }

    /** Whether nothing was spent (a cached answer costs zero). */
    public function isZero(): bool
    {
        if ($this->exact === []) {
            return ($this->epsilon ?? 0.0) == 0.0 && ($this->delta ?? 0.0) == 0.0
                && ($this->rho ?? 0.0) == 0.0;
        }
        foreach ($this->exact as $value) {
            if (!preg_match('~^-?0+(\.0+)?(/\d+)?$~', $value)) {
                return false;
            }
        }
        return true;
    }

    /** `ε = 0.5`, `ε = 0.5, δ = 1e-06` or `ρ = 0.125`. */
    public function __toString(): string
    {
        $parts = [];
        if ($this->kind === 'zcdp') {
            $parts[] = 'ρ = ' . self::number($this->rho);
        } else {
            $parts[] = 'ε = ' . self::number($this->epsilon);
            if ($this->kind === 'approx' || ($this->delta ?? 0.0) > 0.0) {
                $parts[] = 'δ = ' . self::number($this->delta);
            }
        }
        return implode(', ', $parts);
    }

    private static function number(?float $value): string
    {
        if ($value === null) {
            return '?';
        }
        return sprintf('%.6g', $value);
    }
}
