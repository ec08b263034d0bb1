<?php

declare(strict_types=1);

namespace Veil;

/**
 * Randomized response: each value of {@see $values} is the true one with probability
 * `e^ε / (e^ε + k − 1)` and otherwise one of the other k − 1 categories, uniformly — ε-DP for
 * the one value it reports (local DP).
 */
final class Reported
{
    /** @param list<scalar|null> $values */
    public function __construct(
        public readonly array $values,
        public readonly Budget $cost,
        public readonly Budget $remaining,
    ) {
    }
}
