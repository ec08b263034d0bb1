<?php

declare(strict_types=1);

namespace Veil;

/**
 * A page of your audit trail on a dataset, newest first ({@see Client::historyPage()}): pass
 * `$next` as `before` to read the older events (null: this page reaches the first one).
 */
final class HistoryPage
{
    /** @param list<HistoryEvent> $events */
    public function __construct(
        public readonly array $events,
        public readonly ?string $next,
    ) {
    }
}
