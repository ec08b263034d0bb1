<?php

declare(strict_types=1);

namespace Veil;

/**
 * One released number — a noisy count, sum or mean — with its error bar and cost.
 *
 * The true value lies within `value ± errorBar` with probability {@see $errorBarLevel} (0.95).
 * A count is an integer (discrete noise on the exact count); a sum or a mean is a float. A mean
 * may be null when the service cannot release it (no rows survive, say).
 */
final class Estimate
{
    public function __construct(
        public readonly int|float|null $value,
        public readonly ?float $errorBar,
        public readonly float $errorBarLevel,
        public readonly Budget $cost,
        public readonly ?Budget $remaining,
        public readonly bool $cached,
        public readonly string $fingerprint,
    ) {
    }
}
