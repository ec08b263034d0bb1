"""A history read a page at a time, newest first (issue 34: each cache hit is an event, so a
whole history read per request grew without bound)."""

from __future__ import annotations

import pytest

from veil import Budget, InvalidArgumentError, Ledger, LedgerError
from veil.accounting.pages import MAX_PAGE, HistoryPage


def _charged(ledger: Ledger, n: int) -> None:
    ledger.grant("alice", "people", Budget(epsilon=100))
    ledger.grant("bob", "people", Budget(epsilon=100))
    for i in range(n):
        ledger.reserve("alice", "people", Budget(epsilon="1/100"), fingerprint=f"a{i}").commit()
        ledger.reserve("bob", "people", Budget(epsilon="1/100"), fingerprint=f"b{i}").commit()


def test_pages_walk_the_whole_history_newest_first_without_gaps(ledger_url: str) -> None:
    with Ledger(ledger_url) as ledger:
        _charged(ledger, 7)
        whole = ledger.history("alice", "people")  # oldest first, all of it
        walked: list[int] = []
        before = None
        while True:
            page = ledger.history_page("alice", "people", limit=3, before=before)
            assert isinstance(page, HistoryPage)
            assert len(page) <= 3
            walked += [r.id for r in page]
            if page.next is None:
                break
            assert page.next == page[-1].id
            before = page.next
        assert walked == [r.id for r in reversed(whole)]  # bob's are not alice's
        assert len(walked) == 8
        first = ledger.history_page("alice", "people", limit=1)
        assert [r.fingerprint for r in first] == ["a6"]
        assert first[0] == whole[-1]
        last = ledger.history_page("alice", "people", limit=MAX_PAGE)
        assert last.next is None
        assert list(last) == list(reversed(whole))


def test_a_cache_hit_written_later_is_on_the_first_page() -> None:
    with Ledger("sqlite://", defer_cache_hits=True) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        ledger.reserve("alice", "people", Budget(epsilon="1/2"), fingerprint="q").commit({"n": 3})
        ledger.cached_answer(
            "alice", "people", fingerprint="q", data_version="", loss=Budget(epsilon="1/2")
        )
        (newest,) = ledger.history_page("alice", "people", limit=1)
        assert newest.event == "cache_hit"


@pytest.mark.parametrize(
    ("limit", "before", "says"),
    [
        (0, None, "limit must be a whole number of events from 1 to 1000"),
        (MAX_PAGE + 1, None, "from 1 to 1000, got 1001"),
        (True, None, "got True"),
        ("10", None, "got '10'"),
        (10, 0, "before must be the cursor a page gave as next"),
        (10, "5", "got '5'"),
    ],
)
def test_a_page_outside_its_bounds_is_refused(limit: object, before: object, says: str) -> None:
    with Ledger("sqlite://") as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        with pytest.raises(InvalidArgumentError, match=says):
            ledger.history_page("alice", "people", limit=limit, before=before)  # type: ignore[arg-type]


def test_a_page_of_a_grant_that_does_not_exist_says_so() -> None:
    with Ledger("sqlite://") as ledger, pytest.raises(LedgerError, match="unknown analyst 'zed'"):
        ledger.history_page("zed", "people")


def test_a_charge_is_found_by_its_id_and_nothing_else_is() -> None:
    with Ledger("sqlite://") as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        r = ledger.reserve("alice", "people", Budget(epsilon="1/4"), fingerprint="q", query="Q")
        found = ledger.charge(r.id)
        assert found is not None
        assert (found.analyst, found.dataset, found.status, found.fingerprint, found.query) == (
            "alice", "people", "reserved", "q", "Q",
        )  # fmt: skip
        grant_event = ledger.history("alice", "people")[0]
        assert ledger.charge(grant_event.id) is None  # a grant is not a charge
        assert ledger.charge(10**9) is None


def test_counts_stop_at_their_cap() -> None:
    """A count reads an index range of at most cap + 1 entries, whatever the history's
    length: more than the cap reads as cap + 1."""
    from veil.accounting import pages

    with Ledger("sqlite://") as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        for i in range(5):
            ledger.reserve("alice", "people", Budget(epsilon="1/100"), fingerprint=f"q{i}")
        budget_id = ledger.reserve(
            "alice", "people", Budget(epsilon="1/100"), fingerprint="last"
        ).budget_id
        assert budget_id is not None
        assert ledger.read(lambda conn: pages.counts(conn, budget_id)) == {
            "grant": 1, "charge": 6, "cache_hit": 0, "alert": 0,
        }  # fmt: skip
        assert ledger.read(lambda conn: pages.counts(conn, budget_id, cap=3))["charge"] == 4
        assert ledger.read(lambda conn: pages.counts(conn, budget_id, cap=6))["charge"] == 6


def test_the_charges_of_several_grants_are_merged_newest_first_page_by_page() -> None:
    from veil.accounting import pages

    with Ledger("sqlite://") as ledger:
        _charged(ledger, 6)  # alice's and bob's charges interleaved, with a grant each
        grants = [
            (r.budget_id, r.analyst, r.dataset)
            for r in (
                ledger.reserve(who, "people", Budget(epsilon="1/100"), fingerprint=f"{who}-last")
                for who in ("alice", "bob")
            )
        ]
        every = sorted(
            (r.id for who in ("alice", "bob") for r in ledger.history(who, "people")
             if r.event == "charge"),
            reverse=True,
        )  # fmt: skip
        walked: list[int] = []
        before = None
        while True:
            page = ledger.read(
                lambda conn, b=before: pages.charges(conn, grants, limit=5, before=b)
            )
            assert len(page) <= 5
            walked += [r.id for r in page]
            if page.next is None:
                break
            before = page.next
        assert walked == every
        assert len(every) == 14
        only_bob = ledger.read(lambda conn: pages.charges(conn, grants[1:], limit=100, before=None))
        assert {r.analyst for r in only_bob} == {"bob"}
        assert only_bob.next is None
