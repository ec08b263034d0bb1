"""Ledger reads are lock-free snapshots: they never wait for a writer (SQLite WAL)."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from veil import Budget, Ledger


def test_a_read_does_not_wait_for_a_writer_holding_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    ledger = Ledger(f"sqlite:///{path}")
    ledger.grant("alice", "people", Budget(epsilon=1))
    ledger.reserve("alice", "people", Budget(epsilon="0.25"), fingerprint="q").commit()
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another process mid-charge, holding the write lock
    writer.execute("UPDATE veil_budgets SET spent_epsilon = '1/2'")  # not committed
    seen: list[object] = []

    def read() -> None:
        seen.append(ledger.remaining("alice", "people"))
        seen.append(ledger.has_grant("alice", "people"))
        seen.append([r.event for r in ledger.history("alice", "people")])

    reader = threading.Thread(target=read)
    reader.start()
    reader.join(timeout=10)  # a locking read would wait the 60 s busy timeout
    alive = reader.is_alive()
    writer.execute("ROLLBACK")
    writer.close()
    reader.join()
    assert not alive
    # the snapshot before the uncommitted write
    assert seen == [Budget(epsilon="0.75"), True, ["grant", "charge"]]


def test_a_cache_hit_is_recorded_after_a_lock_free_lookup(tmp_path: Path) -> None:
    ledger = Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.grant("alice", "people", Budget(epsilon=1))
    r = ledger.reserve("alice", "people", Budget(epsilon="0.5"), fingerprint="q", data_version="v")
    r.commit({"answer": 42})
    hit = ledger.cached_answer(
        "alice", "people", fingerprint="q", data_version="v", loss=Budget(epsilon="0.5")
    )
    miss = ledger.cached_answer(
        "alice", "people", fingerprint="q", data_version="w", loss=Budget(epsilon="0.5")
    )
    assert hit == {"answer": 42}
    assert miss is None
    events = [e.event for e in ledger.history("alice", "people")]
    assert events == ["grant", "charge", "alert", "cache_hit"]  # the 50 % alert
    assert ledger.remaining("alice", "people") == Budget(epsilon="0.5")


def test_standing_is_the_grant_its_spending_and_the_catalog_entry_in_one_read(
    ledger: Ledger,
) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1, delta="1/1000"))
    ledger.grant("alice", "elsewhere", Budget(epsilon=1))
    ledger.put_dataset("people", '{"name": "people"}')
    ledger.reserve("alice", "people", Budget(epsilon="0.25"), fingerprint="q").commit()
    people = ledger.standing("alice", "people")
    assert people is not None
    assert (people.granted, people.spent) == (
        ledger.granted("alice", "people"),
        ledger.spent("alice", "people"),
    )
    assert people.remaining == ledger.remaining("alice", "people")
    assert people.spec == '{"name": "people"}'
    elsewhere = ledger.standing("alice", "elsewhere")  # granted, not in the catalog
    assert elsewhere is not None
    assert elsewhere.spec is None
    assert ledger.standing("bob", "people") is None
    assert ledger.standing("alice", "nowhere") is None


def test_shown_again_records_a_hit_only_for_an_answer_the_ledger_holds(ledger: Ledger) -> None:
    loss = Budget(epsilon="0.25")
    ledger.grant("alice", "people", Budget(epsilon=1))
    ledger.reserve("alice", "people", loss, fingerprint="q", data_version="v").commit({"n": 1})

    def hits() -> int:
        return sum(r.event == "cache_hit" for r in ledger.history("alice", "people"))

    shown = {"fingerprint": "q", "data_version": "v", "loss": loss}
    assert ledger.shown_again("alice", "people", **shown)
    assert hits() == 1
    assert not ledger.shown_again("alice", "people", **{**shown, "data_version": "w"})
    assert not ledger.shown_again("alice", "people", **{**shown, "loss": Budget(epsilon=1)})
    assert hits() == 1
