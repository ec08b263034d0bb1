"""The ledger under concurrent processes and crashes: it cannot be overspent and loses nothing.

Eight forked processes make 200 reservations each against one budget (SQLite file and
PostgreSQL); some are committed, some refunded, some left reserved. Afterwards: the committed
total never exceeds the grant, the stored running sum equals the sum of the committed and
reserved records, and every refusal was a ``BudgetExhaustedError``.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from fractions import Fraction
from multiprocessing.connection import Connection
from typing import Any

import pytest

from ledger_support import assert_unlocked, start_forked
from veil import Budget, BudgetExhaustedError, Ledger

pytestmark = pytest.mark.slow

PROCESSES = 8
ATTEMPTS = 200
CHARGE = Fraction(1, 100)
TOTAL = Fraction(10)  # room for 1000 of the 1600 charges (more with refunds)

_fork = mp.get_context("fork")


def _hammer(url: str, worker: int, start: Any, out: Connection) -> None:
    """Reserve ATTEMPTS times; commit 8 in 10, refund 1 in 10, leave 1 in 10 reserved."""
    report: dict[str, Any] = {"reserved": 0, "committed": 0, "refunded": 0, "refused": 0}
    report["errors"] = []
    try:
        with Ledger(url) as ledger:
            start.wait(timeout=60)
            for i in range(ATTEMPTS):
                try:
                    r = ledger.reserve(
                        "alice", "people", Budget(epsilon=CHARGE), fingerprint=f"w{worker}-{i}"
                    )
                except BudgetExhaustedError:
                    report["refused"] += 1
                    continue
                if i % 10 == 0:
                    r.refund()
                    report["refunded"] += 1
                elif i % 10 == 1:
                    report["reserved"] += 1
                else:
                    r.commit({"worker": worker, "i": i})
                    report["committed"] += 1
    except Exception as exc:  # reported to the parent, which fails the test
        report["errors"].append(repr(exc))
    out.send(report)
    out.close()


def _run_hammer(url: str) -> tuple[list[dict[str, Any]], float]:
    with Ledger(url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=TOTAL))
    start = _fork.Barrier(PROCESSES)
    pipes = [_fork.Pipe(duplex=False) for _ in range(PROCESSES)]
    procs = [
        _fork.Process(target=_hammer, args=(url, w, start, pipes[w][1])) for w in range(PROCESSES)
    ]
    began = time.monotonic()
    for p in procs:
        start_forked(p)
    reports = [pipes[w][0].recv() for w in range(PROCESSES)]
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    return reports, time.monotonic() - began


def _check_after_hammer(url: str, reports: list[dict[str, Any]]) -> None:
    assert [r["errors"] for r in reports] == [[]] * PROCESSES
    tried = sum(r[k] for r in reports for k in ("reserved", "committed", "refunded", "refused"))
    assert tried == PROCESSES * ATTEMPTS
    refused = sum(r["refused"] for r in reports)
    assert refused > 0  # the budget ran out under contention
    with Ledger(url) as ledger:
        charges = [h for h in ledger.history("alice", "people") if h.event == "charge"]
        by_status: dict[str, list[Fraction]] = {"reserved": [], "committed": [], "refunded": []}
        for h in charges:
            assert h.loss is not None
            assert h.status is not None
            by_status[h.status].append(h.loss.eps)
        # what each process saw is what the ledger recorded
        for status in by_status:
            assert len(by_status[status]) == sum(r[status] for r in reports)
        committed = sum(by_status["committed"], Fraction(0))
        held = sum(by_status["reserved"], Fraction(0))
        assert committed <= TOTAL
        spent = ledger.spent("alice", "people")
        assert spent.epsilon == committed + held
        assert spent.epsilon <= TOTAL
        assert ledger.check("alice", "people").epsilon == spent.epsilon
        assert ledger.remaining("alice", "people") == Budget(epsilon=TOTAL - spent.epsilon)
        # the budget reached 100 % (every charge is 1/100 of a 10 budget): three alerts, once each
        alerts = [h.detail for h in ledger.history("alice", "people") if h.event == "alert"]
        assert len(alerts) == 3
        assert all(a is not None for a in alerts)
        assert [a.split("crossed the ")[1] for a in alerts if a] == [
            "50% threshold",
            "80% threshold",
            "100% threshold",
        ]


def test_eight_processes_cannot_overspend_a_sqlite_budget(sqlite_url: str) -> None:
    reports, seconds = _run_hammer(sqlite_url)
    print(f"SQLite: {PROCESSES}x{ATTEMPTS} reservations in {seconds:.1f}s")
    _check_after_hammer(sqlite_url, reports)


@pytest.mark.postgres
def test_eight_processes_cannot_overspend_a_postgresql_budget(pg_url: str) -> None:
    reports, seconds = _run_hammer(pg_url)
    print(f"PostgreSQL: {PROCESSES}x{ATTEMPTS} reservations in {seconds:.1f}s")
    _check_after_hammer(pg_url, reports)


def _crash_victim(url: str, out: Connection) -> None:
    """Commit charges as fast as possible, reporting each committed id, then hold one."""
    with Ledger(url) as ledger:
        held = ledger.reserve("alice", "people", Budget(epsilon=0.5), fingerprint="held")
        out.send(("held", held.id))
        i = 0
        while True:  # until killed, often in the middle of a transaction
            r = ledger.reserve("alice", "people", Budget(epsilon="1/1000000"), fingerprint=f"c{i}")
            r.commit({"i": i})
            out.send(("committed", r.id))
            i += 1


def _kill_mid_flight(url: str) -> None:
    with Ledger(url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
    recv, send = _fork.Pipe(duplex=False)
    victim = _fork.Process(target=_crash_victim, args=(url, send))
    start_forked(victim)
    send.close()
    kind, held_id = recv.recv()
    assert kind == "held"
    committed: list[int] = []
    while len(committed) < 10:  # a few commits in, however slow the machine: kill mid-flight
        assert recv.poll(120), "the victim committed nothing for 120 s"
        committed.append(recv.recv()[1])
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(timeout=30)
    assert victim.exitcode == -signal.SIGKILL
    while recv.poll(0.1):  # ids sent just before the kill
        try:
            committed.append(recv.recv()[1])
        except EOFError:
            break
    assert committed, "the victim committed nothing before it was killed"

    with Ledger(url) as ledger:
        status = {h.id: h.status for h in ledger.history("alice", "people") if h.event == "charge"}
        assert status[held_id] == "reserved"  # a crash leaves the reservation charged
        assert all(status[i] == "committed" for i in committed)  # no committed charge lost
        sums = ledger.check("alice", "people")  # the running sums match the records
        assert sums.epsilon >= Fraction(1, 2) + len(committed) * Fraction(1, 1000000)
        # the ledger is not left locked: no lock to wait for, and the next charge goes through
        assert_unlocked(url)
        ledger.reserve("alice", "people", Budget(epsilon=0.1), fingerprint="after").commit()
        assert ledger.check("alice", "people").epsilon == sums.epsilon + Fraction(1, 10)


def test_a_process_killed_while_holding_a_reservation_leaves_a_consistent_sqlite_ledger(
    sqlite_url: str,
) -> None:
    _kill_mid_flight(sqlite_url)


@pytest.mark.postgres
def test_a_process_killed_while_holding_a_reservation_leaves_a_consistent_postgresql_ledger(
    pg_url: str,
) -> None:
    _kill_mid_flight(pg_url)


def _use_inherited(ledger: Ledger, out: Connection) -> None:
    try:
        ledger.reserve("alice", "people", Budget(epsilon=0.25), fingerprint="child").commit()
        out.send("ok")
    except Exception as exc:  # reported to the parent
        out.send(repr(exc))


@pytest.mark.parametrize("storage", ["sqlite", "postgresql"])
def test_a_ledger_opened_before_a_fork_works_in_parent_and_child(
    storage: str, request: pytest.FixtureRequest
) -> None:
    url: str = request.getfixturevalue("sqlite_url" if storage == "sqlite" else "pg_url")
    with Ledger(url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        ledger.reserve("alice", "people", Budget(epsilon=0.25), fingerprint="parent").commit()
        recv, send = _fork.Pipe(duplex=False)
        child = _fork.Process(target=_use_inherited, args=(ledger, send))
        start_forked(child)
        assert recv.recv() == "ok"
        child.join(timeout=60)
        assert child.exitcode == 0
        ledger.reserve("alice", "people", Budget(epsilon=0.25), fingerprint="parent2").commit()
        assert ledger.remaining("alice", "people") == Budget(epsilon=0.25)
        assert ledger.check("alice", "people").epsilon == Fraction(3, 4)
