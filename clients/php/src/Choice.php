<?php

declare(strict_types=1);

namespace Veil;

/**
 * The exponential mechanism's choice: {@see $key} is the chosen key of the scores you passed
 * (chosen with probability proportional to `exp(ε·score / 2Δ)`: the best most often).
 */
final class Choice
{
    public function __construct(
        public readonly int|string $key,
        public readonly int $index,
        public readonly Budget $cost,
        public readonly Budget $remaining,
    ) {
    }
}
