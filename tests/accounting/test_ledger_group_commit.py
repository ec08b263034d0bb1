"""Group commit (``Ledger(group_commit=True)``): concurrent reserves and commits of one
process batched into one durable transaction, deciding exactly as they would alone (issue 15).

Threads racing for one budget never overspend it; a batch holding reserves that fit, reserves
that do not, an unknown analyst, a loss of the wrong kind and commits gives each caller what
the sequential path gives it, message for message; a process killed while its threads charge
leaves a consistent ledger in which every answer it released has a durable, committed charge.
On a SQLite file, and the racing and killing on PostgreSQL too, where ``group_commit=True``
leaves each write its own transaction (see ``Ledger``).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable
from fractions import Fraction
from multiprocessing.connection import Connection
from typing import Any

import pytest

from ledger_support import assert_unlocked, start_forked
from veil import Budget, BudgetExhaustedError, Ledger, UnsettledChargeError

_fork = mp.get_context("fork")

STORAGES = ["sqlite", "postgresql"]


def _url(storage: str, request: pytest.FixtureRequest) -> str:
    url: str = request.getfixturevalue("sqlite_url" if storage == "sqlite" else "pg_url")
    return url


THREADS = 8
ATTEMPTS = 40
CHARGE = Fraction(1, 100)  # room for 100 of the 320 attempts


@pytest.mark.parametrize("storage", STORAGES)
def test_threads_racing_for_one_budget_with_group_commit_never_overspend(
    storage: str, request: pytest.FixtureRequest
) -> None:
    url = _url(storage, request)
    with Ledger(url) as admin:
        admin.grant("alice", "people", Budget(epsilon=1))
    charged: list[int] = []
    refused: list[BudgetExhaustedError] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = threading.Barrier(THREADS)
    with Ledger(url, group_commit=True) as ledger:

        def hammer(worker: int) -> None:
            start.wait()
            for i in range(ATTEMPTS):
                try:
                    r = ledger.reserve(
                        "alice", "people", Budget(epsilon=CHARGE), fingerprint=f"w{worker}-{i}"
                    )
                except BudgetExhaustedError as exc:
                    with lock:
                        refused.append(exc)
                    continue
                except BaseException as exc:  # reported below
                    with lock:
                        errors.append(exc)
                    continue
                if i % 3:
                    r.commit({"worker": worker, "i": i})
                with lock:
                    charged.append(r.id)

        threads = [threading.Thread(target=hammer, args=(w,)) for w in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        group = ledger._group  # PostgreSQL: a transaction per write, concurrently (no group)
        assert (group is None) == (storage == "postgresql")
        batches, operations = (0, 1) if group is None else (group.transactions, group.operations)
    assert errors == []
    # exactly the room there was: 100 charges of 1/100, the 220 others refused
    assert len(charged) == 100
    assert len(refused) == THREADS * ATTEMPTS - 100
    assert all(exc.remaining.epsilon < CHARGE for exc in refused)
    assert batches < operations  # SQLite: the threads' writes did share transactions
    with Ledger(url) as ledger:
        assert ledger.check("alice", "people").epsilon == 1
        assert ledger.remaining("alice", "people") == Budget(epsilon=0)
        charges = [h for h in ledger.history("alice", "people") if h.event == "charge"]
        assert sorted(h.id for h in charges) == sorted(charged)
        for h in charges:  # the threads committed those of i % 3 != 0, and only those
            assert h.fingerprint is not None
            committed = int(h.fingerprint.split("-")[1]) % 3 != 0
            assert h.status == ("committed" if committed else "reserved")
            assert (h.answer_id is not None) == committed
        alerts = [h.detail for h in ledger.history("alice", "people") if h.event == "alert"]
        assert len(alerts) == 3  # 50 %, 80 %, 100 %: once each, inside the batches


def _in_one_batch(
    ledger: Ledger, calls: list[Callable[[], Any]], *, transactions: int = 1
) -> list[tuple[str, Any]]:
    """Run ``calls`` from threads of their own queued into one group commit, in this order:
    the group is paused while they queue, so the first to run after it takes them all.
    Each outcome: ("ok", result) or ("error", exception)."""
    group = ledger._group
    assert group is not None
    outcomes: list[tuple[str, Any]] = [("none", None)] * len(calls)

    def run(k: int) -> None:
        try:
            outcomes[k] = ("ok", calls[k]())
        except Exception as exc:
            outcomes[k] = ("error", exc)

    threads = []
    before = group.transactions
    with group.paused() as queue:
        for k in range(len(calls)):
            t = threading.Thread(target=run, args=(k,))
            t.start()
            threads.append(t)
            deadline = time.monotonic() + 120  # a safety net only
            while len(queue) < k + 1:  # queued, in this order
                assert time.monotonic() < deadline
                time.sleep(0.001)
    for t in threads:
        t.join(timeout=60)
    assert group.transactions == before + transactions  # one transaction for all of them
    return outcomes


def _shown(outcome: tuple[str, Any]) -> tuple[str, str]:
    kind, value = outcome
    if kind == "error":
        return type(value).__name__, str(value)
    if hasattr(value, "loss"):  # a Reservation
        return "reserved", f"{value.analyst} {value.dataset} {value.loss!r} {value.status}"
    return "ok", repr(value)


def test_a_batch_decides_each_reservation_as_the_sequential_path_does(sqlite_url: str) -> None:
    url = sqlite_url
    sequential = Ledger("sqlite://")  # the reference: the same calls one after another
    grouped = Ledger(url, group_commit=True)
    for led in (sequential, grouped):
        led.grant("alice", "people", Budget(epsilon=1), alert_thresholds=[Fraction(1, 2)])
        led.grant("bob", "people", Budget(epsilon=1))
    held = {
        id(led): led.reserve("bob", "people", Budget(epsilon=0.25), fingerprint="held")
        for led in (sequential, grouped)
    }
    # committed earlier on both: committing it again is a ReservationStateError
    done = {
        id(led): led.reserve("bob", "people", Budget(epsilon=0.25), fingerprint="done")
        for led in (sequential, grouped)
    }
    for r in done.values():
        r.commit({"x": 0})

    def calls(led: Ledger) -> list[Callable[[], Any]]:
        def reserve(eps: str, who: str = "alice", **kw: Any) -> Callable[[], Any]:
            return lambda: led.reserve(who, "people", Budget(epsilon=eps, **kw), fingerprint=eps)

        return [
            reserve("3/10"),
            reserve("1/2"),  # 4/5 spent: crosses the 50 % alert inside the batch
            reserve("2/5"),  # refused: 1/5 left
            lambda: held[id(led)].commit({"rows": [[1]]}),
            reserve("1/5"),  # fits exactly: the budget is spent
            reserve("1/10"),  # refused: nothing left
            reserve("1/10", "carol"),  # unknown analyst
            reserve("1/10", "bob", delta="1/1000000"),  # an (ε, δ) loss on a pure grant
            lambda: done[id(led)].commit({"x": 1}),  # committed already
            reserve("1/2", "bob"),  # bob: 1/4 + 1/4 spent, 1/2 fits
        ]

    expected = []
    for f in calls(sequential):
        try:
            expected.append(_shown(("ok", f())))
        except Exception as exc:
            expected.append(_shown(("error", exc)))
    got = [_shown(o) for o in _in_one_batch(grouped, calls(grouped))]
    assert got == expected
    kinds = [k for k, _ in got]
    assert kinds.count("BudgetExhaustedError") == 2
    assert "LedgerError" in kinds
    assert "ReservationStateError" in kinds
    for led in (sequential, grouped):
        assert led.remaining("alice", "people") == Budget(epsilon=0)
        assert led.check("alice", "people").epsilon == 1
        assert led.check("bob", "people").epsilon == 1
        alerts = [h.detail for h in led.history("alice", "people") if h.event == "alert"]
        assert alerts == ["80.00% spent, crossed the 50% threshold"]
    assert grouped.cached_answer(
        "bob", "people", fingerprint="held", data_version="", loss=Budget(epsilon=0.25)
    ) == {"rows": [[1]]}
    sequential.close()
    grouped.close()


def test_a_batch_whose_transaction_fails_runs_each_operation_alone(sqlite_url: str) -> None:
    """A database error inside a batch rolls the batch back and runs each operation in a
    transaction of its own: only the failing one fails, and nothing of it stands. (The error:
    a commit whose answer row breaks a NOT NULL constraint, after its charge was marked
    committed in the batch's transaction.)"""
    with Ledger(sqlite_url, group_commit=True) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
        broken = ledger.reserve("alice", "people", Budget(epsilon=0.1), fingerprint="broken")
        broken.fingerprint = None  # type: ignore[assignment]
        outcomes = _in_one_batch(
            ledger,
            [
                lambda: ledger.reserve("alice", "people", Budget(epsilon=0.2), fingerprint="a"),
                lambda: broken.commit({"x": 1}),
                lambda: ledger.reserve("alice", "people", Budget(epsilon=0.3), fingerprint="b"),
            ],
            transactions=2,  # the failed batch is not counted; then 3 alone, of which 2 commit
        )
        assert [k for k, _ in outcomes] == ["ok", "error", "ok"]
        # the commit's write failed: its charge stays reserved, which the error says
        assert isinstance(outcomes[1][1], UnsettledChargeError)
        assert outcomes[1][1].reservation == broken.id
        assert "NOT NULL" in str(outcomes[1][1])
        status = {h.fingerprint: h.status for h in ledger.history("alice", "people")}
        assert status == {None: None, "broken": "reserved", "a": "reserved", "b": "reserved"}
        assert ledger.check("alice", "people").epsilon == Fraction(6, 10)


def _grouped_victim(url: str, out: Connection) -> None:
    """Threads charging through one group-committing ledger until the process is killed;
    each reports a charge once reserve returned, and an answer once commit returned (when
    the answer would be released)."""
    ledger = Ledger(url, group_commit=True)
    send = threading.Lock()

    def charge(worker: int) -> None:
        i = 0
        while True:
            fp = f"t{worker}-{i}"
            r = ledger.reserve("alice", "people", Budget(epsilon="1/1000000"), fingerprint=fp)
            with send:
                out.send(("reserved", r.id))
            r.commit({"i": i})
            with send:
                out.send(("released", r.id))
            i += 1

    for w in range(6):
        threading.Thread(target=charge, args=(w,), daemon=True).start()
    time.sleep(3600)


@pytest.mark.slow
@pytest.mark.parametrize("storage", STORAGES)
def test_a_process_killed_mid_batch_leaves_every_released_answer_durably_charged(
    storage: str, request: pytest.FixtureRequest
) -> None:
    url = _url(storage, request)
    with Ledger(url) as ledger:
        ledger.grant("alice", "people", Budget(epsilon=1))
    recv, send = _fork.Pipe(duplex=False)
    victim = _fork.Process(target=_grouped_victim, args=(url, send))
    start_forked(victim)
    send.close()
    seen: dict[str, list[int]] = {"reserved": [], "released": []}
    while len(seen["released"]) <= 10:  # a dozen answers in, however slow the machine
        assert recv.poll(120), "the victim released nothing for 120 s"
        kind, charge_id = recv.recv()
        seen[kind].append(charge_id)
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)  # with batches in flight
    victim.join(timeout=30)
    assert victim.exitcode == -signal.SIGKILL
    while recv.poll(0.1):
        try:
            kind, charge_id = recv.recv()
        except EOFError:
            break
        seen[kind].append(charge_id)
    assert len(seen["released"]) > 10, "the victim released nothing before it was killed"
    with Ledger(url) as ledger:
        charges = {h.id: h for h in ledger.history("alice", "people") if h.event == "charge"}
        for charge_id in seen["reserved"]:  # every reservation a thread was handed is durable
            assert charges[charge_id].status in ("reserved", "committed")
        for charge_id in seen["released"]:  # every released answer: a committed charge
            assert charges[charge_id].status == "committed"
            assert charges[charge_id].answer_id is not None
        sums = ledger.check("alice", "people")  # the running sums match the records
        assert sums.epsilon == len(charges) * Fraction(1, 1000000)
        assert_unlocked(url)  # not left locked
        ledger.reserve("alice", "people", Budget(epsilon=0.1), fingerprint="after").commit()
