<?php

declare(strict_types=1);

namespace Veil;

/**
 * One entry of your audit trail on a dataset: a `grant`, a `charge` (status `reserved` while the
 * query runs, then `committed` or `refunded`, or `abandoned` when its worker stopped before
 * answering: still charged, nothing released), a `cache_hit` (free) or an `alert`. `$dataset`
 * is set for a charge looked up by {@see Client::charge()}.
 */
final class HistoryEvent
{
    public function __construct(
        public readonly int $id,
        public readonly \DateTimeImmutable $at,
        public readonly string $event,
        public readonly ?string $status,
        public readonly ?Budget $loss,
        public readonly ?string $fingerprint,
        public readonly ?string $detail,
        public readonly ?string $query,
        public readonly ?string $dataset = null,
    ) {
    }

    /** @param array<mixed> $event an `Event` of `GET /v1/history` */
    public static function fromArray(array $event): self
    {
        $loss = Decode::nullableArray($event, 'loss');
        try {
            $at = new \DateTimeImmutable(Decode::string($event, 'at'));
        } catch (\Exception $e) {
            throw new Exception\ServerException('an event time the client cannot read', null, $e);
        }
        return new self(
            Decode::int($event, 'id'),
            $at,
            Decode::string($event, 'event'),
            Decode::nullableString($event, 'status'),
            $loss === null ? null : Budget::fromArray($loss),
            Decode::nullableString($event, 'fingerprint'),
            Decode::nullableString($event, 'detail'),
            Decode::nullableString($event, 'query'),
            Decode::nullableString($event, 'dataset'),
        );
    }
}
