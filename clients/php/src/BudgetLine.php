<?php

declare(strict_types=1);

namespace Veil;

/** Your grant on one dataset: what was granted, what remains, and the share used (0 to 1). */
final class BudgetLine
{
    public function __construct(
        public readonly string $dataset,
        public readonly Budget $granted,
        public readonly Budget $remaining,
        public readonly float $used,
    ) {
    }

    /** @param array<mixed> $line a `BudgetLine` of `GET /v1/budget` */
    public static function fromArray(array $line): self
    {
        return new self(
            Decode::string($line, 'dataset'),
            Budget::fromArray(Decode::array($line, 'granted')),
            Budget::fromArray(Decode::array($line, 'remaining')),
            Decode::float($line, 'used'),
        );
    }
}
