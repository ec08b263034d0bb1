"""Bad input raises a clear veil error and leaves the ledger exactly as it was."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from veil import (
    Budget,
    BudgetExhaustedError,
    InvalidArgumentError,
    Ledger,
    LedgerError,
    LedgerUnavailableError,
    MissingDependencyError,
    ReservationStateError,
    UserError,
)


def _state(ledger: Ledger) -> str:
    """Every row of every table, as exported."""
    return ledger.export_json()


@pytest.fixture
def used(ledger: Ledger) -> Ledger:
    """A ledger with some history: grants, commits, a refund, a held reservation, a cache hit."""
    ledger.grant("alice", "people", Budget(epsilon=1, delta=1e-6))
    ledger.grant("bob", "trips", Budget(rho=0.5))
    ledger.reserve("alice", "people", Budget(epsilon=0.5), fingerprint="a").commit({"x": 1})
    ledger.reserve("alice", "people", Budget(epsilon=0.1), fingerprint="b").refund()
    ledger.reserve("bob", "trips", Budget(rho=0.1), fingerprint="c")
    ledger.cached_answer(
        "alice", "people", fingerprint="a", data_version="", loss=Budget(epsilon=0.5)
    )
    return ledger


BAD_CALLS: list[tuple[str, Callable[[Ledger], Any], type[Exception], str]] = [
    (
        "negative epsilon",
        lambda led: led.reserve("alice", "people", Budget(epsilon=-0.1), fingerprint="z"),
        InvalidArgumentError,
        r"epsilon must be ≥ 0, got -0.1",
    ),
    (
        "NaN epsilon",
        lambda led: led.reserve("alice", "people", Budget(epsilon=math.nan), fingerprint="z"),
        InvalidArgumentError,
        r"epsilon must be finite, got nan",
    ),
    (
        "delta of one",
        lambda led: led.reserve("alice", "people", Budget(epsilon=0.1, delta=1), fingerprint="z"),
        InvalidArgumentError,
        r"delta must lie in \[0, 1\)",
    ),
    (
        "delta above one in a grant",
        lambda led: led.grant("alice", "people", Budget(epsilon=1, delta=1.5)),
        InvalidArgumentError,
        r"delta must lie in \[0, 1\)",
    ),
    (
        "a float instead of a Budget",
        lambda led: led.reserve("alice", "people", 0.1, fingerprint="z"),
        InvalidArgumentError,
        r"loss must be a veil.Budget",
    ),
    (
        "unknown analyst",
        lambda led: led.reserve("mallory", "people", Budget(epsilon=0.1), fingerprint="z"),
        LedgerError,
        r"unknown analyst 'mallory'",
    ),
    (
        "unknown dataset",
        lambda led: led.reserve("alice", "secrets", Budget(epsilon=0.1), fingerprint="z"),
        LedgerError,
        r"analyst 'alice' has no budget on dataset 'secrets'",
    ),
    (
        "unknown analyst in the cache",
        lambda led: led.cached_answer(
            "mallory", "people", fingerprint="a", data_version="", loss=Budget(epsilon=0.5)
        ),
        LedgerError,
        r"unknown analyst 'mallory'",
    ),
    (
        "unknown analyst's remaining budget",
        lambda led: led.remaining("mallory", "people"),
        LedgerError,
        r"unknown analyst 'mallory'",
    ),
    (
        "unknown analyst's history",
        lambda led: led.history("alice", "nowhere"),
        LedgerError,
        r"no budget on dataset 'nowhere'",
    ),
    (
        "an empty fingerprint",
        lambda led: led.reserve("alice", "people", Budget(epsilon=0.1), fingerprint=""),
        InvalidArgumentError,
        r"fingerprint must be a non-empty string",
    ),
    (
        "an over-budget charge",
        lambda led: led.reserve("alice", "people", Budget(epsilon=0.6), fingerprint="z"),
        BudgetExhaustedError,
        r"requested ε=0.6, remaining \(ε=0.5, δ=1e-06\), short by ε=0.1",
    ),
    (
        "an (ε, δ) charge on a zCDP grant",
        lambda led: led.reserve("bob", "trips", Budget(epsilon=0.1, delta=1e-9), fingerprint="z"),
        LedgerError,
        r"a zCDP grant \(ρ=0.5\) cannot pay for the \(ε, δ\) loss",
    ),
    (
        "a grant of another kind",
        lambda led: led.grant("bob", "trips", Budget(epsilon=1)),
        LedgerError,
        r"holds a zcdp grant",
    ),
    (
        "bad alert thresholds",
        lambda led: led.grant("carol", "people", Budget(epsilon=1), alert_thresholds=[0.5, 1.5]),
        InvalidArgumentError,
        r"alert thresholds are shares of the budget in \(0, 1\], got 1.5",
    ),
    (
        "an empty analyst name",
        lambda led: led.grant("", "people", Budget(epsilon=1)),
        InvalidArgumentError,
        r"analyst must be a non-empty string",
    ),
]


@pytest.mark.parametrize(
    ("what", "call", "error", "message"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS]
)
def test_bad_input_raises_a_clear_error_and_leaves_the_ledger_unchanged(
    used: Ledger,
    what: str,
    call: Callable[[Ledger], Any],
    error: type[Exception],
    message: str,
) -> None:
    before = _state(used)
    with pytest.raises(error, match=message) as info:
        call(used)
    assert isinstance(info.value, UserError)
    assert _state(used) == before


def test_a_second_commit_leaves_the_ledger_unchanged(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1))
    r = ledger.reserve("alice", "people", Budget(epsilon=0.5), fingerprint="q")
    r.commit({"v": 1})
    before = _state(ledger)
    with pytest.raises(ReservationStateError, match="already committed"):
        r.commit({"v": 2})
    with pytest.raises(ReservationStateError, match="cannot be refunded"):
        r.refund()
    assert _state(ledger) == before
    found = ledger.cached_answer(
        "alice", "people", fingerprint="q", data_version="", loss=Budget(epsilon=0.5)
    )
    assert found == {"v": 1}


def test_an_answer_that_is_not_json_leaves_the_reservation_open(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1))
    r = ledger.reserve("alice", "people", Budget(epsilon=0.5), fingerprint="q")
    before = _state(ledger)
    with pytest.raises(InvalidArgumentError, match="JSON-serialisable"):
        r.commit({"v": object()})
    with pytest.raises(InvalidArgumentError, match="JSON-serialisable"):
        r.commit({("a", "tuple"): 1})  # type: ignore[dict-item]
    with pytest.raises(InvalidArgumentError, match="must be a mapping"):
        r.commit([1, 2])  # type: ignore[arg-type]
    assert _state(ledger) == before
    assert r.status == "reserved"
    r.commit({"v": 1, "empty_mean": math.nan})
    assert r.status == "committed"
    found = ledger.cached_answer(
        "alice", "people", fingerprint="q", data_version="", loss=Budget(epsilon=0.5)
    )
    assert found is not None
    assert found["v"] == 1
    assert math.isnan(found["empty_mean"])


@pytest.mark.parametrize(
    ("url", "error", "message"),
    [
        ("ledger.db", LedgerError, r"malformed ledger URL 'ledger.db'"),
        ("sqlite:/ledger.db", LedgerError, r"malformed ledger URL"),
        ("://nothing", LedgerError, r"malformed ledger URL"),
        ("mysql://u@h/db", LedgerError, r"unsupported ledger database 'mysql'"),
        ("postgresql://u@h:notaport/db", LedgerError, r"malformed ledger URL"),
        ("sqlite:///no/such/directory/ledger.db", LedgerError, r"cannot open the ledger"),
    ],
)
def test_a_malformed_url_raises_a_ledger_error(
    url: str, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        Ledger(url)


def test_an_unreachable_postgresql_server_is_unavailable_not_a_user_error() -> None:
    # an outage, to retry later (the service's 503), not a mistake of the caller's
    with pytest.raises(LedgerUnavailableError, match="cannot open the ledger at postgresql"):
        Ledger("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2")


def test_a_ledger_from_a_newer_veil_is_refused(sqlite_url: str) -> None:
    import sqlite3

    Ledger(sqlite_url).close()
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE veil_schema_version SET version = 99")
    db.close()
    with pytest.raises(LedgerError, match="schema version 99, newer than this veil"):
        Ledger(sqlite_url)


def test_missing_psycopg_is_reported_with_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if it were not installed
    with pytest.raises(MissingDependencyError, match=r"pip install 'veil\[postgres\]'"):
        Ledger("postgresql://postgres@127.0.0.1:5432/test")


def test_the_json_export_holds_every_table(used: Ledger, tmp_path: Path) -> None:
    data = json.loads(used.export_json(tmp_path / "audit.json"))
    assert set(data) == {"schema_version", "budgets", "events", "alerts", "answers"}
    assert json.loads((tmp_path / "audit.json").read_text()) == data
    assert [e["event"] for e in data["events"]].count("charge") == 3
    assert {(b["analyst"], b["dataset"]) for b in data["budgets"]} == {
        ("alice", "people"),
        ("bob", "trips"),
    }
