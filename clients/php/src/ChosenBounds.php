<?php

declare(strict_types=1);

namespace Veil;

/**
 * Clamping bounds the service found under differential privacy for one column (`'bounds' =>
 * 'auto'` in a query, or {@see Client::findBounds()}): a noisy log-scale histogram of the column,
 * charged like a query. {@see $lower}–{@see $upper} are the bounds (per group: the groups'
 * hull, and {@see $groups} each group's own); {@see $clampedShare} is the noisy estimate of the
 * share of rows they clamp (±{@see $clampedBar} at 95 %); {@see $cost} what finding them was
 * charged now (zero when {@see $cached}).
 */
final class ChosenBounds
{
    /**
     * @param array<string, array{0: float, 1: float}> $groups per group (keyed by the group's
     *     key as a string): [lower, upper]; empty unless found per group of {@see $key}
     * @param array{0: float, 1: float}|null $within the outer range they stayed in (the owner's)
     */
    public function __construct(
        public readonly string $column,
        public readonly float $lower,
        public readonly float $upper,
        public readonly float $clampedShare,
        public readonly float $clampedBar,
        public readonly ?array $within,
        public readonly Budget $loss,
        public readonly Budget $cost,
        public readonly bool $cached,
        public readonly ?string $key = null,
        public readonly array $groups = [],
    ) {
    }

    /** @param array<mixed> $entry one member of an answer's `auto_bounds` or `bounds` */
    public static function fromArray(array $entry): self
    {
        $within = Decode::nullableArray($entry, 'within');
        $groups = [];
        foreach (Decode::nullableArray($entry, 'groups') ?? [] as $group) {
            if (!is_array($group)) {
                continue;
            }
            $label = $group['group'] ?? null;
            $name = is_bool($label) ? ($label ? 'true' : 'false') : (string) $label;
            $groups[$name] = [Decode::float($group, 'lower'), Decode::float($group, 'upper')];
        }
        return new self(
            Decode::string($entry, 'column'),
            Decode::float($entry, 'lower'),
            Decode::float($entry, 'upper'),
            Decode::float($entry, 'clamped_share'),
            Decode::float($entry, 'clamped_bar'),
            $within === null ? null : [(float) $within[0], (float) $within[1]],
            Budget::fromArray(Decode::array($entry, 'loss')),
            Budget::fromArray(Decode::array($entry, 'cost')),
            Decode::bool($entry, 'cached'),
            Decode::nullableString($entry, 'key'),
            $groups,
        );
    }

    /**
     * The bounds as a query takes them: `[lower, upper]`, or per group `['north' => [lo, hi],
     * …]` (to ask again with the same bounds, free of the bounds step).
     *
     * @return array{0: float, 1: float}|array<string, array{0: float, 1: float}>
     */
    public function value(): array
    {
        return $this->key === null ? [$this->lower, $this->upper] : $this->groups;
    }
}
