<?php

declare(strict_types=1);

namespace Veil\Tests;

use Veil\Exception\InvalidRequestException;
use Veil\HistoryEvent;

/** The audit trail a page at a time, newest first, and a charge looked up by its id. */
final class HistoryTest extends TestCase
{
    public function testPagesWalkTheWholeHistoryNewestFirstWithoutGapsOrRepeats(): void
    {
        $veil = self::client();
        for ($i = 0; $i < 5; $i++) {
            $veil->laplace(1.0, 0.01, 1.0, self::MECHANISMS);
        }
        $whole = $veil->historyPage(self::MECHANISMS, 1000);
        self::assertNull($whole->next);
        self::assertGreaterThanOrEqual(6, count($whole->events), 'the grant and five charges');

        $walked = [];
        $before = null;
        $pages = 0;
        do {
            $page = $veil->historyPage(self::MECHANISMS, 2, $before);
            self::assertLessThanOrEqual(2, count($page->events));
            $walked = [...$walked, ...$page->events];
            $before = $page->next;
            $pages++;
        } while ($before !== null);

        $ids = array_map(static fn (HistoryEvent $e): int => $e->id, $walked);
        self::assertSame(array_map(static fn (HistoryEvent $e): int => $e->id, $whole->events), $ids);
        $descending = $ids;
        rsort($descending);
        self::assertSame($descending, $ids, 'newest first');
        self::assertSame(count(array_unique($ids)), count($ids), 'no event twice');
        self::assertSame((int) ceil(count($ids) / 2), $pages);
        self::assertSame('grant', $walked[count($walked) - 1]->event, 'the oldest event last');
    }

    public function testAChargeIsFoundByItsReservationIdAndOnlyByItsAnalyst(): void
    {
        $veil = self::client();
        $veil->laplace(3.0, 0.01, 1.0, self::MECHANISMS);
        $latest = array_values(array_filter(
            $veil->history(self::MECHANISMS, 10),
            static fn (HistoryEvent $e): bool => $e->event === 'charge',
        ))[0];

        $found = $veil->charge($latest->id);
        self::assertNotNull($found);
        self::assertSame([$latest->id, 'committed', self::MECHANISMS, $latest->fingerprint],
            [$found->id, $found->status, $found->dataset, $found->fingerprint]);
        self::assertNotNull($veil->charge($latest->id, (string) $latest->fingerprint));
        self::assertNull($veil->charge($latest->id, 'another query'), 'another fingerprint');
        self::assertNull(self::client('carol')->charge($latest->id), "another analyst's");
        self::assertNull($veil->charge(1 << 40), 'no such charge');
    }

    public function testALimitOutsideOneToAThousandIsRefusedBeforeSending(): void
    {
        foreach ([0, 1001] as $limit) {
            try {
                self::client()->historyPage(self::DATASET, $limit);
                self::fail("limit $limit was sent");
            } catch (InvalidRequestException $e) {
                self::assertNull($e->problem);
                self::assertStringContainsString('nothing was sent', $e->getMessage());
            }
        }
    }
}
