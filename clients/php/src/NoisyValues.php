<?php

declare(strict_types=1);

namespace Veil;

/**
 * Laplace noise added by the service to values you computed: {@see $values} has the shape you
 * sent (one number or a list); each lies within `± errorBar` of its true value with probability
 * {@see $errorBarLevel}. Integers in, integers out (discrete Laplace); floats come back on a
 * grid of 2^k so that the set of possible outputs does not depend on the input.
 */
final class NoisyValues
{
    /** @param int|float|list<int|float> $values */
    public function __construct(
        public readonly int|float|array $values,
        public readonly string $mechanism,
        public readonly ?float $errorBar,
        public readonly ?float $errorBarLevel,
        public readonly ?float $scale,
        public readonly Budget $cost,
        public readonly Budget $remaining,
    ) {
    }
}
