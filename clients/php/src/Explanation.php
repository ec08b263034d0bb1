<?php

declare(strict_types=1);

namespace Veil;

/**
 * What a query would cost and how large its error bars would be — computed without reading
 * any data and charged nothing. {@see $covered}: whether the remaining budget pays for it.
 */
final class Explanation
{
    /**
     * @param array<string, string> $expectedErrorBars output column → expected half-width, in words
     * @param list<string> $notes
     */
    public function __construct(
        public readonly string $dataset,
        public readonly Budget $cost,
        public readonly array $expectedErrorBars,
        public readonly ?Budget $remaining,
        public readonly ?bool $covered,
        public readonly string $sql,
        public readonly array $notes,
    ) {
    }

    /** @param array<mixed> $answer the service's `Explanation` */
    public static function fromAnswer(array $answer): self
    {
        $bars = [];
        foreach (Decode::array($answer, 'expected_error_bars') as $column => $bar) {
            $bars[(string) $column] = is_scalar($bar) ? (string) $bar : '';
        }
        $remaining = Decode::nullableArray($answer, 'remaining');
        $covered = $answer['covered'] ?? null;
        return new self(
            Decode::string($answer, 'dataset'),
            Budget::fromArray(Decode::array($answer, 'cost')),
            $bars,
            $remaining === null ? null : Budget::fromArray($remaining),
            is_bool($covered) ? $covered : null,
            Decode::string($answer, 'sql'),
            Decode::strings($answer, 'notes'),
        );
    }
}
