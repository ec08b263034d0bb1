"""The persistent privacy-budget ledger (DESIGN §4).

A :class:`Ledger` keeps, in SQLite (default) or PostgreSQL, a budget per (analyst, dataset),
every charge with its query fingerprint, loss, time, status and released answer, cache hits and
alerts. The protocol is *reserve* (atomic check-and-spend) → run → *commit* (the answer is
cached) or *refund* (only if nothing was released). A crashed process leaves its reservation
charged: conservative, never undercounted.

Atomicity: every write is one transaction that first locks the budget — SQLite
``BEGIN IMMEDIATE`` (the database write lock, with a busy timeout), PostgreSQL
``SELECT … FOR UPDATE`` on the budget row — so concurrent threads and processes serialise on
it and the budget cannot be overspent.
"""

from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any, NoReturn, TypeVar

from sqlalchemy import Connection, Row, bindparam, delete, insert, select, update
from sqlalchemy.exc import SQLAlchemyError

from veil.accounting import integrity, pages, records, spending
from veil.accounting.budget import Budget, Number, exact
from veil.accounting.failures import described, surely_not_committed, unavailable, unsettled
from veil.accounting.grouping import (
    BudgetRow,
    CapRow,
    GroupCommit,
    Statements,
    cursor_of,
    split_budget_and_cap,
)
from veil.accounting.history import HistoryPage, check_page
from veil.accounting.integrity import Mismatch
from veil.accounting.limits import check_grant
from veil.accounting.records import Alert, Record
from veil.accounting.reservation import LIVE, Reservation, check_reserved
from veil.accounting.spending import Spent
from veil.accounting.store import (
    READ_ONLY,
    alerts,
    budgets,
    dataset_caps,
    datasets,
    events,
    open_ledger,
)
from veil.errors import (
    BudgetExhaustedError,
    InternalError,
    InvalidArgumentError,
    LedgerError,
    LedgerUnavailableError,
    ReservationStateError,
    UnsettledChargeError,
    UserError,
)

__all__ = [
    "DEFAULT_THRESHOLDS",
    "Alert",
    "HistoryPage",
    "Ledger",
    "Mismatch",
    "Record",
    "Reservation",
    "Standing",
]

logger = logging.getLogger("veil.ledger")

DEFAULT_THRESHOLDS: tuple[Fraction, ...] = (Fraction(1, 2), Fraction(4, 5), Fraction(1))
_DEFAULT_SHARES = json.dumps([str(t) for t in DEFAULT_THRESHOLDS])  # as a budget row stores them


def _name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > 200:
        raise InvalidArgumentError(f"{what} must be at most 200 characters, got {len(value)}")
    return value


def _loss(value: object, what: str = "loss") -> Budget:
    if not isinstance(value, Budget):
        raise InvalidArgumentError(
            f"{what} must be a veil.Budget, e.g. Budget(epsilon=0.1), got {value!r}"
        )
    return value


def _thresholds(values: Sequence[Number] | None) -> list[Fraction]:
    if values is None:
        return list(DEFAULT_THRESHOLDS)
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise InvalidArgumentError(
            f"alert_thresholds must be a list of shares in (0, 1], got {values!r}"
        )
    out = sorted({exact(v, "alert threshold") for v in values})
    for t in out:
        if not 0 < t <= 1:
            raise InvalidArgumentError(
                f"alert thresholds are shares of the budget in (0, 1], got {float(t)!r}; "
                "e.g. alert_thresholds=(0.5, 0.8, 1.0)"
            )
    return out


_T = TypeVar("_T")


_INHERITED: list[Any] = []  # a forked child's copies of its parent's kept connections


class _NoBudget(Exception):
    """Raised inside a hot-path transaction for an (analyst, dataset) without a budget; the
    caller raises the ``LedgerError`` that says so (it reads the analyst's other grants)."""


ANSWERS_REMEMBERED = 1024  # cached answers a ledger object remembers (least recently used go)
HIT_FLUSH_S = 0.05  # how long a deferred cache-hit record waits at most before it is written


class _HitLog:
    """Cache-hit events queued for one write transaction every ``HIT_FLUSH_S`` seconds (a
    daemon thread, started at the first hit). A forked child starts with an empty queue and
    no thread: the parent writes what it queued."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = weakref.ref(ledger)
        self._lock = threading.Lock()
        # held from taking the queue to its rows committed: a flush that finds the queue
        # empty while another is writing waits for that write (its caller reads them next)
        self._flushing = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        os.register_at_fork(after_in_child=self._forget)
        atexit.register(self.flush)  # a daemon thread dies at exit: what it holds is written

    def _forget(self) -> None:
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        self._pending = []
        self._wake = threading.Event()
        self._thread = None

    def add(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._pending.append(event)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="veil-ledger-hits", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while not self._wake.wait(HIT_FLUSH_S) and self._ledger() is not None:
            self.flush()

    def flush(self) -> None:
        """Write every hit queued before this call: on return they are committed (or, the
        database unreachable, queued again) — also those another thread's flush had taken
        and was still writing."""
        with self._flushing:
            with self._lock:
                rows, self._pending = self._pending, []
            ledger = self._ledger()
            if not rows or ledger is None:
                return
            try:
                ledger._write_hits(rows)
            except LedgerUnavailableError:  # the database is down: keep them for the next try
                logger.exception("veil ledger: %d cache-hit records not written yet", len(rows))
                with self._lock:
                    self._pending[:0] = rows

    def stop(self) -> None:
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        self.flush()


# built once: a statement made per call costs more than SQLite takes to run it
STANDING = (  # the service's per-request read (see Ledger.standing)
    select(budgets, datasets.c.spec)
    .select_from(budgets.outerjoin(datasets, datasets.c.name == budgets.c.dataset))
    .where(budgets.c.analyst == bindparam("analyst"), budgets.c.dataset == bindparam("dataset"))
)


@dataclass(frozen=True)
class Standing:
    """An analyst's grant on a dataset as one read saw it (see :meth:`Ledger.standing`)."""

    granted: Budget
    spent: Spent
    spec: str | None  # the dataset's catalog entry (JSON), None when it is not in the catalog

    @property
    def remaining(self) -> Budget:
        """What may still be spent (``veil.accounting.spending.remaining``)."""
        return spending.remaining(self.granted, self.spent)


def standing_of(row: Any) -> Standing:
    """The standing a row of :data:`STANDING` gives."""
    return Standing(Ledger._granted(row), Ledger._spent(row), row.spec)


# The statements of refunds, grants and reads, built once with bound parameters: SQLAlchemy
# then reuses each one's cache key and compiled form, where a statement built per call costs
# ~0.2 ms of construction and cache-key work. A charge's reserve and commit and a cache hit's
# record go below SQLAlchemy altogether (veil.accounting.grouping.Statements).
_BUDGET = select(budgets).where(
    budgets.c.analyst == bindparam("b_analyst"), budgets.c.dataset == bindparam("b_dataset")
)
# FOR NO KEY UPDATE in PostgreSQL: it serialises every check-and-spend of one budget as FOR
# UPDATE does, but not the FOR KEY SHARE lock that inserting a row referencing the budget (an
# answer, an event) takes — so a commit never waits for a reserve, nor deadlocks with a refund
_BUDGET_LOCKED = _BUDGET.with_for_update(key_share=True)
_CAP = select(dataset_caps).where(dataset_caps.c.dataset == bindparam("c_dataset"))
_CAP_LOCKED = _CAP.with_for_update()
_SET_SPENT = (
    update(budgets)
    .where(budgets.c.id == bindparam("b_id"))
    .values(
        spent_epsilon=bindparam("s_epsilon"),
        spent_delta=bindparam("s_delta"),
        spent_rho=bindparam("s_rho"),
        updated_at=bindparam("s_at"),
    )
)
_SET_CAP_SPENT = (
    update(dataset_caps)
    .where(dataset_caps.c.dataset == bindparam("c_dataset"))
    .values(
        spent_epsilon=bindparam("s_epsilon"),
        spent_delta=bindparam("s_delta"),
        spent_rho=bindparam("s_rho"),
        updated_at=bindparam("s_at"),
    )
)
_CHARGE_LOCKED = (
    select(events)
    .where(events.c.id == bindparam("e_id"), events.c.event == "charge")
    .with_for_update()
)
_SET_STATUS = (
    update(events)
    .where(events.c.id == bindparam("e_id"))
    .values(status=bindparam("e_status"), updated_at=bindparam("e_at"))
)


def _spent_values(spent: Spent) -> tuple[str, str, str]:
    return str(spent.epsilon), str(spent.delta), str(spent.rho)


# a grant's total and its running sums are read back as the text this process (or another)
# wrote: parsed once per text (Fraction and Budget are immutable), not per charge
@functools.lru_cache(maxsize=1024)
def _granted_of(kind: str, epsilon: str | None, delta: str, rho: str | None) -> Budget:
    return records.loss_from(kind, epsilon, delta, rho)


def _granted_values(total: Budget) -> tuple[str, str | None, str, str | None]:
    """A granted total as the budget row's (kind, epsilon, delta, rho) text columns."""
    loss = records.loss_columns(total)
    return total.kind, loss["epsilon"], str(total.delta), loss["rho"]


@functools.lru_cache(maxsize=4096)
def _fraction(text: str) -> Fraction:
    return Fraction(text)


@functools.lru_cache(maxsize=256)
def _threshold_list(text: str) -> tuple[Fraction, ...]:
    """A budget's alert thresholds (its stored JSON), parsed once per text."""
    return tuple(Fraction(t) for t in json.loads(text))


def _spent_params(spent: Spent, now: str) -> dict[str, str]:
    return {
        "s_epsilon": str(spent.epsilon),
        "s_delta": str(spent.delta),
        "s_rho": str(spent.rho),
        "s_at": now,
    }


class Ledger:
    """A durable privacy-budget ledger in SQLite or PostgreSQL.

    ``Ledger("sqlite:///ledger.db")`` (a file, created if missing), ``Ledger("sqlite://")`` (in
    memory, one process), ``Ledger("postgresql://user@host:5432/db")``. A ``pathlib.Path`` is
    read as a SQLite file. With ``create=False`` a ledger that does not exist yet (no SQLite
    file; no veil tables in the PostgreSQL database) is a ``LedgerError`` instead: a mistyped
    path must not quietly become a new, empty ledger. What exists but is not a veil ledger — an
    empty file (a failed copy or restore), a file that is not SQLite, another application's
    tables, a damaged or newer schema — is always refused (``veil.accounting.store.open_ledger``);
    ``init=True`` (:meth:`initialise`, ``veil ledger init``) makes a new ledger of an empty file
    or database, the explicit path. A failing database is a ``LedgerUnavailableError``; a charge
    it may have left standing, an ``UnsettledChargeError`` (see :meth:`reserve`). With
    ``defer_cache_hits=True`` a cache
    hit's history record is written shortly after the answer, batched (see
    :meth:`cached_answer`): the service's choice, so that a repeated query takes no write lock.
    With ``group_commit=True`` the reserves, commits and cache-hit records of concurrent
    threads of this process are batched into one durable transaction (one fsync for many
    charges; see :class:`veil.accounting.grouping.GroupCommit`): each call still returns only
    once its own write is durable, and decides exactly as it would alone (a refusal is the
    same refusal; the budget is checked charge by charge inside the batch). The service's
    choice too. On PostgreSQL the option changes nothing: each write keeps a transaction (and a
    pooled connection) of its own, so the threads' transactions run concurrently and the server
    flushes concurrent commits together itself; a batch there would hold several budget rows
    and caps at once, in arrival order, and could deadlock with other processes' transactions,
    which lock a budget before its cap and a charge before its budget.
    """

    def __init__(
        self,
        url: str | os.PathLike[str] = "sqlite:///veil-ledger.db",
        *,
        create: bool = True,
        init: bool = False,
        defer_cache_hits: bool = False,
        group_commit: bool = False,
    ) -> None:
        # answers found in the cache, remembered in this process: budgets and answers are
        # never updated nor deleted, so a found answer is found again, unchanged
        self._answers: OrderedDict[tuple[str, ...], tuple[int, int, str]] = OrderedDict()
        self._answers_lock = threading.Lock()
        self._hits = _HitLog(self) if defer_cache_hits else None
        self._engine, memory = open_ledger(url, create=create, init=init)
        self._memory = memory
        self._halted: str | None = None  # why charging stopped (verify), or None
        self._tracked = threading.local()  # per thread: the lists tracking() fills
        self.url = self._engine.url.render_as_string(hide_password=True)
        self._postgres = self._engine.dialect.name == "postgresql"
        self._sqlite = self._engine.dialect.name == "sqlite"
        self._writers = threading.RLock()
        # one shared in-memory connection: serialise transactions across threads here
        self._lock: AbstractContextManager[Any] = threading.RLock() if memory else nullcontext()
        self._callbacks: list[Callable[[Alert], object]] = []
        self._sql = Statements(self._postgres)
        self._keep_writer = self._sqlite and not memory  # see _write
        self._writer: Any = None
        self._driver_error: type[BaseException] = self._engine.dialect.loaded_dbapi.Error
        self._integrity_error: type[BaseException] = (
            self._engine.dialect.loaded_dbapi.IntegrityError
        )
        # SQLite only: see the class's docstring
        batched = group_commit and self._sqlite
        self._group = (
            GroupCommit(self._write, (UserError, _NoBudget), final=(UnsettledChargeError,))
            if batched
            else None
        )
        if not memory:
            # a forked child must not reuse the parent's connections: it opens its own
            engine = weakref.ref(self._engine)

            me = weakref.ref(self)

            def forget_parent_connections() -> None:
                alive = engine()
                if alive is not None:
                    alive.dispose(close=False)
                ledger = me()
                if ledger is not None and ledger._writer is not None:
                    # the parent's: never used, closed nor given back to a pool here
                    _INHERITED.append(ledger._writer)
                    ledger._writer = None

            os.register_at_fork(after_in_child=forget_parent_connections)

    @classmethod
    def initialise(cls, url: str | os.PathLike[str], **options: Any) -> Ledger:
        """Open the ledger at ``url``, first making a new, empty one where there is none or
        only an empty file or database (0 bytes, or no tables: what a failed copy or restore
        leaves) — the explicit path to a new ledger (``veil ledger init``). Anything else that
        is not a veil ledger is refused, as by the constructor; ``options`` are its own."""
        return cls(url, init=True, **options)

    @property
    def persistent(self) -> bool:
        """True for a ledger that outlives this process (a SQLite file, PostgreSQL); False for
        an in-memory one, whose budgets and charges vanish with it."""
        return not self._memory

    # -- plumbing -------------------------------------------------------------------------

    def close(self) -> None:
        """Write the cache hits not yet written, and release the database connections."""
        if self._hits is not None:
            self._hits.stop()
        with self._writers:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        self._engine.dispose()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self.url!r})"

    @contextmanager
    def _tx(self, *, read: bool = False, snapshot: bool = False) -> Iterator[Connection]:
        """A transaction. A write one takes SQLite's write lock at its start (``BEGIN
        IMMEDIATE``) and locks the rows it reads in PostgreSQL (``FOR UPDATE``), so that a
        check-and-spend cannot interleave; a ``read`` one takes neither (a consistent snapshot:
        readers never wait for each other, and never for a writer in SQLite's WAL mode).
        ``snapshot``: a read whose statements all see one state of the database (PostgreSQL's
        REPEATABLE READ; SQLite's read transactions already do)."""
        # SQLite: this process's writers queue on a Python lock before BEGIN IMMEDIATE, so
        # that they wait their turn instead of polling SQLite's lock with its sleeping busy
        # handler (which, with many threads, turns waits of a millisecond into seconds);
        # writers of other processes still meet at SQLite's lock
        queue = self._writers if (self._sqlite and not read) else nullcontext()
        with self._lock, queue:
            try:
                with self._engine.connect() as conn:
                    conn.info[READ_ONLY] = read
                    if snapshot and self._postgres:
                        conn.execution_options(isolation_level="REPEATABLE READ")
                    try:
                        with conn.begin():
                            yield conn
                    finally:
                        conn.info.pop(READ_ONLY, None)
            except SQLAlchemyError as exc:
                raise unavailable(exc, self.url) from exc

    @contextmanager
    def _write(self) -> Iterator[Any]:
        """A write transaction on a driver connection, below SQLAlchemy's execution layer (the
        hot path: a reserve, a commit, a cache hit's record), as :meth:`_tx` makes one:
        SQLite's ``BEGIN IMMEDIATE`` after this process's writers' queue; PostgreSQL's
        transaction begun by the driver, rows locked by the statements. Yields a cursor;
        commits when the block ends, rolls back when it raises. A SQLite file's writers take
        turns on the writers' queue anyway, so they share one connection, kept checked out of
        the pool (a checkout and its reset cost as much Python as a statement); PostgreSQL's
        come from the pool, one per concurrent writer.

        A database failure is a :class:`~veil.errors.LedgerUnavailableError` (nothing written),
        or an :class:`~veil.errors.UnsettledChargeError` when the COMMIT itself failed in a way
        that may have committed (:func:`veil.accounting.failures.surely_not_committed`)."""
        queue = self._writers if self._sqlite else nullcontext()
        with self._lock, queue:
            connection = self._writer if self._keep_writer else None
            if connection is None:
                try:
                    connection = self._engine.raw_connection()
                except SQLAlchemyError as exc:
                    raise unavailable(exc, self.url) from exc
            keep = self._keep_writer
            committing = False
            try:
                with cursor_of(connection) as cur:
                    if self._sqlite:
                        cur.execute("BEGIN IMMEDIATE")
                    try:
                        yield cur
                    except BaseException:
                        connection.rollback()
                        raise
                    committing = True
                    connection.commit()
            except self._driver_error as exc:
                keep = False  # a fresh connection next time
                driver = connection.dbapi_connection
                if self._postgres and driver is not None and driver.closed:
                    connection.invalidate(exc)  # lost: never hand it out again
                if committing and not surely_not_committed(exc):
                    raise unsettled(exc, self.url) from exc
                raise unavailable(exc, self.url) from exc
            finally:
                if keep:
                    self._writer = connection
                else:
                    if self._keep_writer:
                        self._writer = None
                    connection.close()  # back to the pool

    def _read_one(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The first row of one read-only statement on a pooled driver connection (no
        transaction around it, no lock: a single statement reads one consistent snapshot)."""
        with self._lock:
            try:
                connection = self._engine.raw_connection()
            except SQLAlchemyError as exc:
                raise unavailable(exc, self.url) from exc
            try:
                with cursor_of(connection) as cur:
                    cur.execute(sql, params)
                    row: tuple[Any, ...] | None = cur.fetchone()
                if self._postgres:
                    connection.rollback()  # the driver's implicit transaction: ended
                return row
            except self._driver_error as exc:
                driver = connection.dbapi_connection
                if self._postgres and driver is not None and driver.closed:
                    connection.invalidate(exc)
                raise unavailable(exc, self.url) from exc
            finally:
                connection.close()

    def _writing(self, op: Callable[[Any], _T]) -> _T:
        """``op(cursor)`` in a write transaction of its own, or in this process's next
        group commit (``group_commit=True``); its result once that transaction is durable."""
        if self._group is not None:
            return self._group.run(op)
        with self._write() as cur:
            return op(cur)

    @staticmethod
    def _find_budget(conn: Connection, analyst: str, dataset: str) -> Row[Any] | None:
        """The budget row of (``analyst``, ``dataset``), locked for this transaction unless it
        is a read."""
        query = _BUDGET if conn.info.get(READ_ONLY) else _BUDGET_LOCKED
        return conn.execute(query, {"b_analyst": analyst, "b_dataset": dataset}).one_or_none()

    def _budget_row(self, conn: Connection, analyst: str, dataset: str) -> Row[Any]:
        row = self._find_budget(conn, analyst, dataset)
        if row is None:
            self._no_budget(conn, analyst, dataset)
        return row

    def _no_budget(self, conn: Connection, analyst: str, dataset: str) -> NoReturn:
        """Raise the ``LedgerError`` of an (``analyst``, ``dataset``) without a budget."""
        known = conn.execute(
            select(budgets.c.dataset).where(budgets.c.analyst == analyst)
        ).scalars()
        datasets = sorted(known)
        python = f"ledger.grant({analyst!r}, {dataset!r}, Budget(epsilon=…))"
        cli = (
            f"veil budget grant --ledger {self.url} --analyst {analyst} --dataset "
            f"{dataset} --epsilon E"
        )
        if datasets:
            why = (
                f"analyst {analyst!r} has no budget on dataset {dataset!r} (they have "
                f"budgets on {datasets}); an administrator grants one with "
            )
        else:
            why = (
                f"unknown analyst {analyst!r}: no budget is granted to them on any "
                "dataset; an administrator grants one with "
            )
        raise LedgerError(why + python, cli=why + cli)

    @staticmethod
    def _granted(row: Any) -> Budget:
        return _granted_of(row.kind, row.epsilon, row.delta, row.rho)

    @staticmethod
    def _spent(row: Any) -> Spent:
        return Spent(
            _fraction(row.spent_epsilon), _fraction(row.spent_delta), _fraction(row.spent_rho)
        )

    # -- administration -------------------------------------------------------------------

    def grant(
        self,
        analyst: str,
        dataset: str,
        budget: Budget,
        *,
        alert_thresholds: Sequence[Number] | None = None,
    ) -> Budget:
        """Grant ``budget`` to ``analyst`` on ``dataset`` (added to an existing grant of the
        same kind); return the new total. ``alert_thresholds`` (shares in (0, 1], default
        50 %, 80 %, 100 %) replace the budget's thresholds when given."""
        _name(analyst, "analyst")
        _name(dataset, "dataset")
        check_grant(_loss(budget, "budget"))  # δ ≥ 1/2: refused, as queries are
        thresholds = None if alert_thresholds is None else _thresholds(alert_thresholds)
        for attempt in range(2):
            try:
                return self._grant(analyst, dataset, budget, thresholds)
            except LedgerUnavailableError as exc:
                # two processes creating the same grant: the loser retries as a top-up
                if attempt or not isinstance(exc.__cause__, self._integrity_error):
                    raise
        raise InternalError("grant retry fell through")  # pragma: no cover

    def _grant(
        self, analyst: str, dataset: str, budget: Budget, thresholds: list[Fraction] | None
    ) -> Budget:
        now = records.now()
        sql = self._sql
        given = None if thresholds is None else json.dumps([str(t) for t in thresholds])

        with self._write() as cur:
            cur.execute(sql.budget_locked, (analyst, dataset))
            found = cur.fetchone()
            if found is None:
                total = budget
                shares = given if given is not None else _DEFAULT_SHARES
                cur.execute(
                    sql.insert_budget,
                    (analyst, dataset, *_granted_values(total), shares, now, now),
                )
                (budget_id,) = cur.fetchone()
            else:
                row = BudgetRow(*found)
                old = self._granted(row)
                if (old.kind == "zcdp") != (budget.kind == "zcdp"):
                    raise LedgerError(
                        f"analyst {analyst!r} on dataset {dataset!r} holds a {old.kind} grant "
                        f"({old}); a {budget.kind} grant ({budget}) cannot be added to it"
                    )
                total = old + budget
                check_grant(total)  # nor may top-ups add up to δ ≥ 1/2
                budget_id = row.id
                kind, epsilon, delta, rho = _granted_values(total)
                cur.execute(sql.top_up_budget, (kind, delta, now, epsilon, rho, given, row.id))
            loss = records.loss_columns(budget)
            cur.execute(
                sql.insert_grant_event,
                (budget_id, now, f"total {total!r}", loss["loss_kind"], loss["epsilon"],
                 loss["delta"], loss["rho"]),
            )  # fmt: skip
            return total

    def grants(self) -> list[tuple[str, str]]:
        """Every (analyst, dataset) that holds a budget, sorted."""
        with self._tx(read=True) as conn:
            rows = conn.execute(
                select(budgets.c.analyst, budgets.c.dataset).order_by(
                    budgets.c.analyst, budgets.c.dataset
                )
            ).all()
        return [(r.analyst, r.dataset) for r in rows]

    def spent_by_dataset(self) -> dict[str, tuple[Fraction, Fraction]]:
        """(ε, ρ) reserved or committed per dataset, summed over analysts: what the service's
        ``/metrics`` shows (one read of the budget rows, never of the events)."""
        with self._tx(read=True) as conn:
            rows = conn.execute(
                select(budgets.c.dataset, budgets.c.spent_epsilon, budgets.c.spent_rho)
            ).all()
        out: dict[str, tuple[Fraction, Fraction]] = {}
        for r in rows:
            eps, rho = out.get(r.dataset, (Fraction(0), Fraction(0)))
            out[r.dataset] = (eps + Fraction(r.spent_epsilon), rho + Fraction(r.spent_rho))
        return out

    def alerts(self) -> list[tuple[str, str, Fraction, Fraction, datetime]]:
        """Every alert recorded, oldest first: (analyst, dataset, threshold, used share, at)."""
        with self._tx(read=True) as conn:
            rows = conn.execute(
                select(
                    budgets.c.analyst,
                    budgets.c.dataset,
                    alerts.c.threshold,
                    alerts.c.used,
                    alerts.c.at,
                )
                .join(budgets, budgets.c.id == alerts.c.budget_id)
                .order_by(alerts.c.id)
            ).all()
        return [
            (r.analyst, r.dataset, Fraction(r.threshold), Fraction(r.used),
             datetime.fromisoformat(r.at))
            for r in rows
        ]  # fmt: skip

    def has_grant(self, analyst: str, dataset: str) -> bool:
        """Whether ``analyst`` holds a budget on ``dataset`` (one driver-level read: a
        session opened with a budget asks it of each new ledger object)."""
        return self._read_one(self._sql.has_budget, (analyst, dataset)) is not None

    def standing(self, analyst: str, dataset: str) -> Standing | None:
        """``analyst``'s grant on ``dataset``, what it has spent, and the dataset's catalog
        entry (JSON, or None), in one snapshot read; None when there is no grant. The
        service's per-request read: one statement instead of three transactions."""
        with self._tx(read=True) as conn:
            row = conn.execute(STANDING, {"analyst": analyst, "dataset": dataset}).one_or_none()
        return None if row is None else standing_of(row)

    def granted(self, analyst: str, dataset: str) -> Budget:
        """The total granted to ``analyst`` on ``dataset``."""
        with self._tx(read=True) as conn:
            return self._granted(self._budget_row(conn, analyst, dataset))

    def spent(self, analyst: str, dataset: str) -> Spent:
        """The exact running sums of reserved and committed charges."""
        with self._tx(read=True) as conn:
            return self._spent(self._budget_row(conn, analyst, dataset))

    def remaining(self, analyst: str, dataset: str) -> Budget:
        """What ``analyst`` may still spend on ``dataset`` (see ``veil.accounting.spending``)."""
        with self._tx(read=True) as conn:
            row = self._budget_row(conn, analyst, dataset)
            return spending.remaining(self._granted(row), self._spent(row))

    def used_share(self, analyst: str, dataset: str) -> Fraction:
        """The share of the grant spent — the largest over its parts (ε, δ, ρ), as the alerts
        count it: 1 means exhausted. The one definition of "spent" everywhere veil shows it."""
        with self._tx(read=True) as conn:
            row = self._budget_row(conn, analyst, dataset)
            return spending.used_fraction(self._granted(row), self._spent(row))

    def covers(self, analyst: str, dataset: str, loss: Budget) -> bool:
        """Whether ``loss`` would fit what ``analyst`` has left on ``dataset`` now (a read:
        nothing is reserved, and a concurrent charge may change the answer)."""
        _loss(loss)
        with self._tx(read=True) as conn:
            row = self._budget_row(conn, analyst, dataset)
            total = self._granted(row)
            try:
                after = spending.add_charge(total, self._spent(row), loss)
            except LedgerError:  # a loss of a kind the grant cannot pay
                return False
            return spending.fits(total, after)

    # -- dataset-wide caps ----------------------------------------------------------------

    @staticmethod
    def _find_cap(conn: Connection, dataset: str) -> Row[Any] | None:
        """The cap row of ``dataset``, locked for this transaction unless it is a read (None:
        no cap)."""
        query = _CAP if conn.info.get(READ_ONLY) else _CAP_LOCKED
        return conn.execute(query, {"c_dataset": dataset}).one_or_none()

    @staticmethod
    def _set_cap_spent(conn: Connection, dataset: str, spent: Spent, now: str) -> None:
        conn.execute(_SET_CAP_SPENT, {"c_dataset": dataset, **_spent_params(spent, now)})

    def cap_dataset(self, dataset: str, total: Budget) -> Budget:
        """Cap what all analysts together may spend on ``dataset`` at ``total`` (a privacy
        filter over every grant on it: each charge must fit both the analyst's grant and the
        cap, checked and spent in one transaction).

        The first cap counts every charge already reserved or committed on the dataset; a cap
        that they exceed is refused. Setting it again replaces the total (lowering it is
        allowed down to what is spent). Returns the total.
        """
        _name(dataset, "dataset")
        _loss(total, "total")
        now = records.now()
        with self._tx() as conn:
            row = self._find_cap(conn, dataset)
            if row is None:
                spent = Spent()
                charges = conn.execute(
                    select(events)
                    .join(budgets, events.c.budget_id == budgets.c.id)
                    .where(
                        budgets.c.dataset == dataset,
                        events.c.event == "charge",
                        events.c.status.in_(LIVE),
                    )
                    .order_by(events.c.id)
                ).all()
                for charge in charges:
                    loss = records.loss_from(
                        charge.loss_kind, charge.epsilon, charge.delta, charge.rho
                    )
                    spent = spending.add_charge(total, spent, loss)
            else:
                spent = self._spent(row)
            if not spending.fits(total, spent):
                raise LedgerError(
                    f"dataset {dataset!r} has already spent more than the cap {total}; "
                    "set a larger cap"
                )
            values = {
                "kind": total.kind,
                "epsilon": None if total.epsilon is None else str(total.epsilon),
                "delta": str(total.delta),
                "rho": None if total.rho is None else str(total.rho),
                "spent_epsilon": str(spent.epsilon),
                "spent_delta": str(spent.delta),
                "spent_rho": str(spent.rho),
                "updated_at": now,
            }
            if row is None:
                conn.execute(insert(dataset_caps).values(dataset=dataset, created_at=now, **values))
            else:
                conn.execute(
                    update(dataset_caps).where(dataset_caps.c.dataset == dataset).values(**values)
                )
        return total

    def dataset_cap(self, dataset: str) -> tuple[Budget, Budget] | None:
        """(the cap, what is left of it) for ``dataset``, or None when it has no cap."""
        with self._tx(read=True) as conn:
            row = self._find_cap(conn, dataset)
            if row is None:
                return None
            total = self._granted(row)
            return total, spending.remaining(total, self._spent(row))

    # -- the catalog's rows (veil.catalog reads and writes them) ------------------------

    def put_dataset(self, name: str, spec: str, *, replace: bool = False) -> None:
        """Store the catalog entry ``name`` (its JSON ``spec``); the same spec again is a no-op,
        a different one needs ``replace``."""
        _name(name, "dataset")
        now = records.now()
        with self._tx() as conn:
            row = conn.execute(
                select(datasets).where(datasets.c.name == name).with_for_update()
            ).one_or_none()
            if row is None:
                conn.execute(
                    insert(datasets).values(name=name, spec=spec, created_at=now, updated_at=now)
                )
            elif row.spec != spec:
                if not replace:
                    raise LedgerError(
                        f"dataset {name!r} is already in the catalog with other metadata; "
                        "pass replace=True (veil catalog add --replace) to change it"
                    )
                conn.execute(
                    update(datasets)
                    .where(datasets.c.name == name)
                    .values(spec=spec, updated_at=now)
                )

    def get_dataset(self, name: str) -> str | None:
        """The catalog entry ``name`` (JSON), or None."""
        with self._tx(read=True) as conn:
            found: str | None = conn.execute(
                select(datasets.c.spec).where(datasets.c.name == name)
            ).scalar_one_or_none()
        return found

    def list_datasets(self) -> list[tuple[str, str]]:
        """Every catalog entry as (name, JSON), by name."""
        with self._tx(read=True) as conn:
            rows = conn.execute(select(datasets.c.name, datasets.c.spec).order_by(datasets.c.name))
            return [(r.name, r.spec) for r in rows]

    def delete_dataset(self, name: str) -> bool:
        """Remove the catalog entry ``name``; whether there was one."""
        with self._tx() as conn:
            return conn.execute(delete(datasets).where(datasets.c.name == name)).rowcount > 0

    # -- the protocol ---------------------------------------------------------------------

    def reserve(
        self,
        analyst: str,
        dataset: str,
        loss: Budget,
        *,
        fingerprint: str,
        data_version: str = "",
        query: str | None = None,
    ) -> Reservation:
        """Atomically check that ``loss`` fits and charge it; return the reservation.

        ``query`` is the text recorded with the charge for the audit trail (the SQL, a plan,
        the call), never used to decide anything.

        Raises ``BudgetExhaustedError`` (nothing charged) when it does not fit, ``LedgerError``
        for an unknown analyst or dataset or a loss of a kind the grant cannot pay for,
        ``LedgerUnavailableError`` (nothing charged) when the database fails or charging was
        stopped (:meth:`verify`), and ``UnsettledChargeError`` when the database failed while
        the charge was being committed (it may stand: ``reservation`` is its id).

        Contract: returns only once the charge is durable (its transaction committed, alone or
        in this process's group commit); the check and the spend are one transaction holding
        the budget's lock (SQLite's write lock; PostgreSQL's row lock, and the dataset cap's),
        so concurrent reserves of any process serialise and the running sums never exceed the
        grant nor the cap; a refusal writes nothing and depends only on the sums before it.
        """
        _name(analyst, "analyst")
        _name(dataset, "dataset")
        _loss(loss)
        _name(fingerprint, "fingerprint")
        if self._halted is not None:
            raise LedgerUnavailableError(
                f"charging is stopped: {self._halted}",
                public="charging is stopped: the ledger failed its integrity check and the "
                "operator has been alerted; nothing was charged",
            )
        if not isinstance(data_version, str):
            raise InvalidArgumentError(f"data_version must be a string, got {data_version!r}")
        if query is not None and not isinstance(query, str):
            raise InvalidArgumentError(f"query must be a string, got {type(query).__name__}")
        now = records.now()
        columns = records.loss_columns(loss)
        sql = self._sql
        made: list[int] = []  # the charge's id, as soon as the database gave it

        def spend(cur: Any) -> tuple[int, int, list[int]]:
            # every refusal is raised before the first write (group commit relies on it)
            cur.execute(sql.budget_and_cap, (analyst, dataset))
            found = cur.fetchone()
            if found is None:
                raise _NoBudget
            row, cap = split_budget_and_cap(found)
            total, before = self._granted(row), self._spent(row)
            after = spending.add_charge(total, before, loss)
            if not spending.fits(total, after):
                raise BudgetExhaustedError(
                    loss, spending.remaining(total, before), analyst=analyst, dataset=dataset
                )
            cap_after = None
            if cap is not None:
                # the dataset's total across all analysts, in the same transaction (locked
                # after the analyst's own row: one lock order, no deadlock)
                if sql.postgres:
                    cur.execute(sql.cap_locked, (dataset,))
                    cap = CapRow(*cur.fetchone())
                cap_total, cap_before = self._granted(cap), self._spent(cap)
                try:
                    cap_after = spending.add_charge(cap_total, cap_before, loss)
                except LedgerError:
                    cap_after = None
                if cap_after is None or not spending.fits(cap_total, cap_after):
                    raise BudgetExhaustedError(
                        loss,
                        spending.remaining(cap_total, cap_before),
                        analyst=analyst,
                        dataset=dataset,
                        scope="the dataset's total across all analysts",
                    )
            if cap_after is not None:
                cur.execute(sql.set_cap_spent, (*_spent_values(cap_after), now, dataset))
            charge = (
                row.id, now, fingerprint, data_version, now, query,
                columns["loss_kind"], columns["epsilon"], columns["delta"], columns["rho"],
            )  # fmt: skip
            if sql.spend_and_charge is not None:  # PostgreSQL: one statement
                cur.execute(sql.spend_and_charge, (*_spent_values(after), now, row.id, *charge))
            else:
                cur.execute(sql.spend, (*_spent_values(after), now, row.id))
                cur.execute(sql.insert_charge, charge)
            (charge_id,) = cur.fetchone()
            made.append(int(charge_id))
            return row.id, int(charge_id), self._record_alerts(cur, row, total, after, now)

        try:
            budget_id, charge_id, fired = self._writing(spend)
        except _NoBudget:
            with self._tx(read=True) as conn:
                self._no_budget(conn, analyst, dataset)
        except UnsettledChargeError as exc:  # the COMMIT failed: the charge may stand
            charge = made[-1] if made else None
            raise UnsettledChargeError(
                f"{exc} (the charge of {loss} for fingerprint {fingerprint!r}, reservation "
                f"{charge})",
                reservation=charge,
                fingerprint=fingerprint,
            ) from exc
        if fired:
            try:
                self._deliver(budget_id=budget_id)
            except LedgerUnavailableError:  # delivered by the next on_alert registration
                logger.exception("veil ledger: an alert recorded but not delivered yet")
        reservation = Reservation(
            self, charge_id, analyst, dataset, loss, fingerprint, data_version, budget_id=budget_id
        )
        for made_here in getattr(self._tracked, "lists", ()):
            made_here.append(reservation)
        return reservation

    @contextmanager
    def tracking(self) -> Iterator[list[Reservation]]:
        """A list of the reservations this thread makes through this ledger while the block
        runs (the service's: a request that fails after reserving must not answer "retry")."""
        made: list[Reservation] = []
        lists: list[list[Reservation]] = self._tracked.__dict__.setdefault("lists", [])
        lists.append(made)
        try:
            yield made
        finally:
            lists.pop()  # this thread's blocks nest: the last one pushed is this one

    @staticmethod
    def _set_spent(conn: Connection, budget_id: int, spent: Spent, now: str) -> None:
        """Store the running sums ``spent`` of budget ``budget_id``."""
        conn.execute(_SET_SPENT, {"b_id": budget_id, **_spent_params(spent, now)})

    def _charge_row(self, conn: Connection, reservation: Reservation) -> Row[Any]:
        """The charge event of ``reservation``, locked for this transaction: a commit and a
        refund of one reservation serialise on it, and the later one sees the status the
        earlier one wrote (PostgreSQL re-reads a row it waited to lock). A commit locks only
        this row — committing moves a charge from reserved to committed, both counted as
        spent, so no budget sum changes and the budget row stays free for other reserves (its
        answer's foreign key takes PostgreSQL's FOR KEY SHARE on the budget row, which the
        reserves' FOR NO KEY UPDATE does not block); a refund locks this row first, then the
        budget and the cap, so a commit and a refund never wait on each other in a cycle."""
        row = conn.execute(_CHARGE_LOCKED, {"e_id": reservation.id}).one_or_none()
        if row is None:
            raise ReservationStateError(
                f"reservation {reservation.id} is not in this ledger (another ledger's?)"
            )
        return row

    def _commit(self, reservation: Reservation, answer: Mapping[str, Any] | None) -> int | None:
        payload = None
        if answer is not None:
            if not isinstance(answer, Mapping):
                raise InvalidArgumentError(
                    f"the answer to cache must be a mapping (a dict), got {type(answer).__name__}"
                )
            try:
                payload = json.dumps(dict(answer), sort_keys=True)
            except (TypeError, ValueError) as exc:
                raise InvalidArgumentError(
                    f"the answer to cache must be JSON-serialisable: {exc}"
                ) from exc
        now = records.now()
        key = records.loss_key(reservation.loss)
        sql = self._sql

        def commit(cur: Any) -> int | None:
            # the charge row is locked by this UPDATE (a commit and a refund of one charge
            # serialise on it; PostgreSQL re-reads a row it waited for), and no budget row is:
            # committing moves a charge between two spent states, no sum changes
            cur.execute(sql.mark_committed, (now, reservation.id))
            found = cur.fetchone()
            if found is None:  # nothing written: say why
                cur.execute(sql.charge_status, (reservation.id,))
                status = cur.fetchone()
                if status is None:
                    raise ReservationStateError(
                        f"reservation {reservation.id} is not in this ledger (another ledger's?)"
                    )
                check_reserved(reservation, status[0], "commit")
                raise InternalError(f"reservation {reservation.id} is reserved but not found")
            if payload is None:
                return None
            answer = (
                found[0], reservation.fingerprint, reservation.data_version, key, payload,
                reservation.id, now,
            )  # fmt: skip
            if sql.answer_and_link is not None:  # PostgreSQL: one statement
                cur.execute(sql.answer_and_link, (*answer, reservation.id))
                (answer_id,) = cur.fetchone()
            else:
                cur.execute(sql.insert_answer, answer)
                (answer_id,) = cur.fetchone()
                cur.execute(sql.set_answer, (answer_id, reservation.id))
            return int(answer_id)

        try:
            return self._writing(commit)
        except LedgerUnavailableError as exc:
            raise self._unsettled(reservation, "committing", exc) from exc

    @staticmethod
    def _unsettled(
        reservation: Reservation, doing: str, exc: LedgerUnavailableError
    ) -> UnsettledChargeError:
        """The error of the database failing while ``doing`` ``reservation``: it may stand."""
        return UnsettledChargeError(
            f"the ledger's database failed while {doing} reservation {reservation.id} "
            f"({described(exc.__cause__ or exc)}); its charge of {reservation.loss} (fingerprint "
            f"{reservation.fingerprint!r}) may stand",
            reservation=reservation.id,
            fingerprint=reservation.fingerprint,
        )

    def _refund(self, reservation: Reservation) -> None:
        try:
            self._refund_now(reservation)
        except LedgerUnavailableError as exc:
            raise self._unsettled(reservation, "refunding", exc) from exc

    def _refund_now(self, reservation: Reservation) -> None:
        now = records.now()
        with self._tx() as conn:
            row = self._charge_row(conn, reservation)
            check_reserved(reservation, row.status, "refund")
            budget = self._budget_row(conn, reservation.analyst, reservation.dataset)
            after = spending.remove_charge(
                self._granted(budget), self._spent(budget), reservation.loss
            )
            self._set_spent(conn, budget.id, after, now)
            cap = self._find_cap(conn, reservation.dataset)
            if cap is not None:
                released = spending.remove_charge(
                    self._granted(cap), self._spent(cap), reservation.loss
                )
                self._set_cap_spent(conn, reservation.dataset, released, now)
            conn.execute(_SET_STATUS, {"e_id": reservation.id, "e_status": "refunded", "e_at": now})

    # -- cache ----------------------------------------------------------------------------

    def cached_answer(
        self,
        analyst: str,
        dataset: str,
        *,
        fingerprint: str,
        data_version: str,
        loss: Budget,
    ) -> dict[str, Any] | None:
        """The answer committed earlier for the same fingerprint, data version and loss, at no
        cost (recorded in the history as a cache hit), or None.

        An answer found once is remembered in this process (at most ``ANSWERS_REMEMBERED``):
        budgets and answers are never updated nor deleted, so looking it up again would find
        the same row. The hit is recorded before the answer is returned — or, for a ledger
        opened with ``defer_cache_hits=True`` (the service's), queued and written within
        ``HIT_FLUSH_S`` seconds by a background thread, several hits in one transaction: a
        hit costs nothing, so a process killed in that window loses only the record that
        an already released answer was shown again, never a charge."""
        text = self._hit(analyst, dataset, fingerprint, data_version, loss)
        if text is None:
            return None
        result: dict[str, Any] = json.loads(text)
        return result

    def shown_again(
        self,
        analyst: str,
        dataset: str,
        *,
        fingerprint: str,
        data_version: str,
        loss: Budget,
    ) -> bool:
        """Record a cache hit as :meth:`cached_answer` does, for a caller that kept the answer
        it showed (the service's): whether there is such an answer (False: nothing recorded)."""
        return self._hit(analyst, dataset, fingerprint, data_version, loss) is not None

    def _hit(
        self, analyst: str, dataset: str, fingerprint: str, data_version: str, loss: Budget
    ) -> str | None:
        """The cached answer's JSON text, its hit recorded (or queued); None without one."""
        _name(analyst, "analyst")
        _name(dataset, "dataset")
        _name(fingerprint, "fingerprint")
        _loss(loss)
        key = (analyst, dataset, fingerprint, data_version, records.loss_key(loss))
        with self._answers_lock:
            known = self._answers.get(key)
            if known is not None:
                self._answers.move_to_end(key)
        if known is None:
            # the lookup takes no lock: one statement, its own consistent snapshot
            found = self._read_one(
                self._sql.budget_and_answer,
                (fingerprint, data_version, records.loss_key(loss), analyst, dataset),
            )
            if found is None:
                with self._tx(read=True) as conn:
                    self._no_budget(conn, analyst, dataset)
            budget_id, answer_id, answer_text = found
            if answer_id is None:
                return None
            known = (int(budget_id), int(answer_id), str(answer_text))
            with self._answers_lock:
                self._answers[key] = known
                while len(self._answers) > ANSWERS_REMEMBERED:
                    self._answers.popitem(last=False)
        budget_id, answer_id, text = known
        event = {
            "budget_id": budget_id,
            "at": records.now(),
            "event": "cache_hit",
            "fingerprint": fingerprint,
            "data_version": data_version,
            "answer_id": answer_id,
            "detail": "answered from the cache at no cost",
            **records.loss_columns(loss),
        }
        if self._hits is not None:
            self._hits.add(event)
        else:  # the hit, recorded in the history before the answer is out
            self._writing(functools.partial(self._insert_hit, event))
        return text

    def _insert_hit(self, event: dict[str, Any], cur: Any) -> None:
        cur.execute(
            self._sql.insert_hit,
            (
                event["budget_id"], event["at"], event["fingerprint"], event["data_version"],
                event["answer_id"], event["detail"], event["loss_kind"], event["epsilon"],
                event["delta"], event["rho"],
            ),
        )  # fmt: skip

    def flush_cache_hits(self) -> None:
        """Write the cache hits queued by this process (``defer_cache_hits=True``) now."""
        if self._hits is not None:
            self._hits.flush()

    def _write_hits(self, rows: list[dict[str, Any]]) -> None:
        with self._tx() as conn:
            conn.execute(insert(events), rows)

    # -- alerts ---------------------------------------------------------------------------

    def on_alert(self, callback: Callable[[Alert], object]) -> Callable[[Alert], object]:
        """Register ``callback(alert)``; alerts not yet delivered by any process go to it now."""
        self._callbacks.append(callback)
        self._deliver(budget_id=None)
        return callback

    def _record_alerts(
        self, cur: Any, row: BudgetRow, total: Budget, spent: Spent, now: str
    ) -> list[int]:
        """Record (in the reserve's transaction, on its driver cursor) the alerts whose
        thresholds ``spent`` crosses for the first time; their ids."""
        used = spending.used_fraction(total, spent)
        crossed = [t for t in _threshold_list(row.thresholds) if used >= t]
        if not crossed:
            return []
        sql = self._sql
        cur.execute(sql.alerts_done, (row.id,))
        done = {r[0] for r in cur.fetchall()}
        fired = []
        for t in crossed:
            if str(t) in done:
                continue
            cur.execute(sql.insert_alert, (row.id, str(t), str(used), now))
            fired.append(int(cur.fetchone()[0]))
            detail = f"{float(used):.2%} spent, crossed the {float(t):.0%} threshold"
            cur.execute(sql.insert_alert_event, (row.id, now, detail))
        return fired

    def _deliver(self, *, budget_id: int | None) -> None:
        """Claim undelivered alerts (each exactly once across processes) and fire them."""
        sql = self._sql

        def claim(cur: Any) -> list[Alert]:
            if budget_id is None:
                cur.execute(sql.claim_every_alert)
            else:
                cur.execute(sql.claim_alerts, (budget_id,))
            claimed = sorted(cur.fetchall())  # rows: (id, budget_id, threshold, used, at)
            budgets: dict[int, tuple[Any, ...]] = {}
            for _, b_id, _, _, _ in claimed:
                if b_id not in budgets:
                    cur.execute(sql.alerted_budget, (b_id,))
                    budgets[b_id] = cur.fetchone()
            alerts = []
            for _, b_id, threshold, used, at in claimed:
                analyst, dataset, kind, epsilon, delta, rho = budgets[b_id]
                granted = _granted_of(kind, epsilon, delta, rho)
                alerts.append(
                    Alert(
                        analyst, dataset, Fraction(threshold), Fraction(used), granted,
                        datetime.fromisoformat(at),
                    )
                )  # fmt: skip
            return alerts

        with self._write() as cur:  # never batched: a group commit is for the charges
            claimed = claim(cur)
        for alert in claimed:
            logger.warning("%s", alert)
            for callback in self._callbacks:
                try:
                    callback(alert)
                except Exception:
                    logger.exception("a veil ledger alert callback failed")

    # -- history and audit ----------------------------------------------------------------

    def history(self, analyst: str, dataset: str) -> list[Record]:
        """Every grant, charge, cache hit and alert of ``analyst`` on ``dataset``, oldest
        first."""
        self.flush_cache_hits()
        with self._tx(read=True) as conn:
            row = self._budget_row(conn, analyst, dataset)
            rows = conn.execute(
                select(events).where(events.c.budget_id == row.id).order_by(events.c.id)
            ).all()
        return [records.record(r, analyst, dataset) for r in rows]

    def history_page(
        self, analyst: str, dataset: str, *, limit: int = 100, before: int | None = None
    ) -> HistoryPage:
        """The newest ``limit`` events of ``analyst`` on ``dataset`` (at most ``MAX_PAGE``),
        older than the cursor ``before`` when given: pass a page's ``next`` to read the page
        after it. Its cost does not grow with the history (an index read)."""
        limit, before = check_page(limit, before)
        self.flush_cache_hits()
        with self._tx(read=True) as conn:
            row = self._budget_row(conn, analyst, dataset)
            return pages.events_page(conn, row.id, analyst, dataset, limit=limit, before=before)

    def charge(self, charge_id: int) -> Record | None:
        """The charge ``charge_id`` (a reservation's id), or None when there is none."""
        with self._tx(read=True) as conn:
            found = conn.execute(
                select(events, budgets.c.analyst, budgets.c.dataset)
                .join(budgets, budgets.c.id == events.c.budget_id)
                .where(events.c.id == charge_id, events.c.event == "charge")
            ).one_or_none()
        return None if found is None else records.record(found, found.analyst, found.dataset)

    def read(self, fn: Callable[[Connection], _T]) -> _T:
        """``fn(connection)`` in one read-only snapshot of the ledger's database (for readers
        such as :mod:`veil.accounting.pages`); a failing database is a
        ``LedgerUnavailableError``."""
        with self._tx(read=True, snapshot=True) as conn:
            return fn(conn)

    # -- integrity ------------------------------------------------------------------------

    @property
    def halted(self) -> str | None:
        """Why this ledger object stopped charging (:meth:`verify`), or None."""
        return self._halted

    def verify(self, *, halt: bool = True) -> list[Mismatch]:
        """Every grant and dataset cap whose running sums differ from its live charges, in one
        snapshot (:func:`veil.accounting.integrity.mismatches`). With ``halt``, a mismatch
        stops this object's charging for good: every later :meth:`reserve` raises
        ``LedgerUnavailableError`` (reading, committing what is reserved and answering from
        the cache go on), and the mismatches are logged at CRITICAL on ``veil.ledger``. An
        operator restores or corrects the ledger, then restarts what uses it."""
        with self._tx(read=True, snapshot=True) as conn:
            found = integrity.mismatches(conn)
        if found and halt:
            self._halted = (
                f"the running sums of {len(found)} grant(s) or cap(s) differ from their "
                f"charges in the ledger at {self.url} ({found[0]}"
                + (", …" if len(found) > 1 else "")
                + "); restore or correct the ledger, then restart (veil ledger check)"
            )
            for mismatch in found:
                logger.critical("veil ledger at %s: charging stopped: %s", self.url, mismatch)
        return found

    def abandon_stale(self, older_than_s: float) -> list[int]:
        """Resolve as ``abandoned`` every reservation still open ``older_than_s`` seconds after
        it was made — its worker is taken to be gone — and return their ids. They stay
        charged; a late commit of one raises ``ReservationStateError`` and releases nothing,
        so choose a time above the slowest query."""
        if (
            isinstance(older_than_s, bool)
            or not isinstance(older_than_s, int | float)
            or not (older_than_s > 0)
        ):
            raise InvalidArgumentError(
                f"older_than_s must be a positive number of seconds, got {older_than_s!r}"
            )
        now = datetime.now(UTC)
        cutoff = (now - timedelta(seconds=older_than_s)).isoformat(timespec="microseconds")
        with self._tx() as conn:
            return integrity.abandon(
                conn,
                made_before=cutoff,
                now=now.isoformat(timespec="microseconds"),
                seconds=older_than_s,
            )

    def _dump(self) -> dict[str, Any]:
        self.flush_cache_hits()
        with self._tx(read=True) as conn:
            return records.dump(conn)

    def export_json(self, path: str | os.PathLike[str] | None = None) -> str:
        """The whole ledger (budgets, every event, alerts, cached answers) as JSON; exact
        numbers are fraction strings. Written to ``path`` too when given."""
        text = json.dumps(self._dump(), indent=2, sort_keys=True)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    def export_csv(self, path: str | os.PathLike[str] | None = None) -> str:
        """Every event of every budget as CSV, oldest first. Written to ``path`` when given."""
        text = records.to_csv(self._dump()["events"])
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    def check(self, analyst: str, dataset: str) -> Spent:
        """Recompute the running sums from the charge records and compare them with the stored
        ones; raise ``LedgerError`` on a mismatch. Returns the sums."""
        with self._tx() as conn:
            row = self._budget_row(conn, analyst, dataset)
            total = self._granted(row)
            live = conn.execute(
                select(events).where(
                    events.c.budget_id == row.id,
                    events.c.event == "charge",
                    events.c.status.in_(LIVE),
                )
            ).all()
        sums = Spent()
        for r in live:
            sums = spending.add_charge(
                total, sums, records.loss_from(r.loss_kind, r.epsilon, r.delta, r.rho)
            )
        if sums != self._spent(row):
            raise LedgerError(
                f"ledger inconsistency for {analyst!r} on {dataset!r}: the records sum to "
                f"{sums}, the budget row says {self._spent(row)}"
            )
        return sums
