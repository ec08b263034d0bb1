"""Budget alerts: each threshold fires once, through callbacks and a log warning, and the
record survives restarts."""

from __future__ import annotations

import logging
import sqlite3
from fractions import Fraction

import pytest

from veil import Budget, Ledger
from veil.accounting import Alert


def _charge(ledger: Ledger, n: int, eps: str = "0.1", analyst: str = "alice") -> None:
    for _ in range(n):
        ledger.reserve(analyst, "people", Budget(epsilon=eps), fingerprint="q").commit()


def test_default_thresholds_fire_once_each_through_callback_and_log(
    ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[Alert] = []
    ledger.on_alert(seen.append)
    ledger.grant("alice", "people", Budget(epsilon=1))
    with caplog.at_level(logging.WARNING, logger="veil.ledger"):
        _charge(ledger, 4)
        assert seen == []
        _charge(ledger, 1)
        assert [a.threshold for a in seen] == [Fraction(1, 2)]
        _charge(ledger, 3)
        assert [a.threshold for a in seen] == [Fraction(1, 2), Fraction(4, 5)]
        _charge(ledger, 2)
    assert [a.threshold for a in seen] == [Fraction(1, 2), Fraction(4, 5), Fraction(1)]
    assert seen[-1].used == 1
    assert (seen[-1].analyst, seen[-1].dataset) == ("alice", "people")
    assert seen[-1].granted == Budget(epsilon=1)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3
    assert "is 100% spent (crossed the 100% alert" in warnings[-1]
    alerts = [h for h in ledger.history("alice", "people") if h.event == "alert"]
    assert [a.detail for a in alerts] == [
        "50.00% spent, crossed the 50% threshold",
        "80.00% spent, crossed the 80% threshold",
        "100.00% spent, crossed the 100% threshold",
    ]


def test_a_charge_crossing_several_thresholds_fires_each_once(ledger: Ledger) -> None:
    seen: list[Alert] = []
    ledger.on_alert(seen.append)
    ledger.grant("alice", "people", Budget(epsilon=1))
    _charge(ledger, 1, "0.9")
    assert [a.threshold for a in seen] == [Fraction(1, 2), Fraction(4, 5)]


def test_thresholds_are_configurable_per_budget(ledger: Ledger) -> None:
    seen: list[Alert] = []
    ledger.on_alert(seen.append)
    ledger.grant("alice", "people", Budget(epsilon=1), alert_thresholds=[0.25])
    ledger.grant("bob", "people", Budget(epsilon=1))
    _charge(ledger, 3, analyst="alice")
    _charge(ledger, 3, analyst="bob")
    assert [(a.analyst, a.threshold) for a in seen] == [("alice", Fraction(1, 4))]


def test_a_refund_and_a_new_crossing_do_not_fire_again(ledger: Ledger) -> None:
    seen: list[Alert] = []
    ledger.on_alert(seen.append)
    ledger.grant("alice", "people", Budget(epsilon=1))
    r = ledger.reserve("alice", "people", Budget(epsilon=0.6), fingerprint="q")
    r.refund()
    _charge(ledger, 6)
    assert [a.threshold for a in seen] == [Fraction(1, 2)]


def test_a_failing_callback_is_logged_and_does_not_break_the_charge(
    ledger: Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(alert: Alert) -> None:
        raise RuntimeError("pager offline")

    ledger.on_alert(broken)
    ledger.grant("alice", "people", Budget(epsilon=1))
    with caplog.at_level(logging.WARNING, logger="veil.ledger"):
        r = ledger.reserve("alice", "people", Budget(epsilon=0.6), fingerprint="q")
    assert r.status == "reserved"
    assert any("alert callback failed" in rec.getMessage() for rec in caplog.records)


def test_a_restart_neither_refires_nor_misses_alerts(sqlite_url: str) -> None:
    first_seen: list[Alert] = []
    with Ledger(sqlite_url) as first:
        first.on_alert(first_seen.append)
        first.grant("alice", "people", Budget(epsilon=1))
        _charge(first, 6)
    assert [a.threshold for a in first_seen] == [Fraction(1, 2)]
    second_seen: list[Alert] = []
    with Ledger(sqlite_url) as second:
        second.on_alert(second_seen.append)
        _charge(second, 1)
        assert second_seen == []  # 50 % already fired before the restart
        _charge(second, 1)
        assert [a.threshold for a in second_seen] == [Fraction(4, 5)]


def test_an_alert_recorded_but_not_delivered_before_a_crash_is_delivered_once_after(
    sqlite_url: str,
) -> None:
    with Ledger(sqlite_url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
    # the state a process leaves when it dies after recording an alert, before delivering it
    db = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"))
    with db:
        db.execute(
            "INSERT INTO veil_alerts (budget_id, threshold, used, at, notified) "
            "VALUES (1, '1/2', '3/5', '2026-01-01T00:00:00+00:00', 0)"
        )
    db.close()
    seen: list[Alert] = []
    with Ledger(sqlite_url) as after:
        after.on_alert(seen.append)
    assert [(a.threshold, a.used) for a in seen] == [(Fraction(1, 2), Fraction(3, 5))]
    again: list[Alert] = []
    with Ledger(sqlite_url) as later:
        later.on_alert(again.append)
        _charge(later, 6)
    assert again == []  # delivered once; 50 % is not fired a second time
