"""The ledger's hot path below SQLAlchemy, and group commit (issue 15).

A charge is two durable transactions (reserve, commit). Through SQLAlchemy's execution layer
each statement cost more Python than SQLite took to run it, so the hot path's statements are
fixed SQL texts run on the pooled driver connection (:class:`Statements`), fewer of them than
before: the budget and the dataset's cap in one read, and in PostgreSQL the running sums'
update and the charge's insert in one statement, so the budget row is locked for one statement
plus the commit.

:class:`GroupCommit` batches the write transactions of concurrent threads of one process into
one durable transaction: each operation runs in turn, exactly as it would alone, on the same
transaction, and every caller returns only after that transaction is committed. An operation
must raise its refusals before it writes anything (a reserve checks the budget, a commit the
charge's status, and only then write), so a refused one leaves the batch's transaction as it
found it; an unexpected database error rolls the batch back and runs each operation again in
a transaction of its own, so that only the failing one fails.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Generic, NamedTuple, TypeVar

__all__ = ["BudgetRow", "GroupCommit", "Statements"]

T = TypeVar("T")

_BUDGET_COLUMNS = (
    "b.id, b.kind, b.epsilon, b.delta, b.rho, b.spent_epsilon, b.spent_delta, b.spent_rho, "
    "b.thresholds"
)
_CAP_COLUMNS = (
    "c.dataset, c.kind, c.epsilon, c.delta, c.rho, c.spent_epsilon, c.spent_delta, c.spent_rho"
)
_EVENT_COLUMNS = (
    "budget_id, at, event, status, fingerprint, data_version, updated_at, query_text, "
    "loss_kind, epsilon, delta, rho"
)


class BudgetRow(NamedTuple):
    """A budget row as the hot path reads it (the fields ``Ledger._granted`` and
    ``Ledger._spent`` read)."""

    id: int
    kind: str
    epsilon: str | None
    delta: str
    rho: str | None
    spent_epsilon: str
    spent_delta: str
    spent_rho: str
    thresholds: str


class CapRow(NamedTuple):
    """A dataset cap row as the hot path reads it."""

    dataset: str
    kind: str
    epsilon: str | None
    delta: str
    rho: str | None
    spent_epsilon: str
    spent_delta: str
    spent_rho: str


class Statements:
    """The hot path's SQL for one dialect, with the driver's parameter marks."""

    def __init__(self, postgres: bool) -> None:
        self.postgres = postgres
        lock = " FOR NO KEY UPDATE OF b" if postgres else ""

        def sql(text: str) -> str:
            return text.replace("?", "%s") if postgres else text

        # the budget (locked in PostgreSQL; SQLite's BEGIN IMMEDIATE has locked the database)
        # and the dataset's cap, if any, in one statement. PostgreSQL cannot lock the nullable
        # side of an outer join: a cap found here is read again, locked (cap_locked).
        self.budget_and_cap = sql(
            f"SELECT {_BUDGET_COLUMNS}, {_CAP_COLUMNS} FROM veil_budgets b "
            "LEFT JOIN veil_dataset_caps c ON c.dataset = b.dataset "
            f"WHERE b.analyst = ? AND b.dataset = ?{lock}"
        )
        self.cap_locked = sql(
            f"SELECT {_CAP_COLUMNS} FROM veil_dataset_caps c WHERE c.dataset = ? FOR UPDATE"
        )
        set_spent = (
            "UPDATE veil_budgets SET spent_epsilon = ?, spent_delta = ?, spent_rho = ?, "
            "updated_at = ? WHERE id = ?"
        )
        self.set_cap_spent = sql(
            "UPDATE veil_dataset_caps SET spent_epsilon = ?, spent_delta = ?, spent_rho = ?, "
            "updated_at = ? WHERE dataset = ?"
        )
        insert_charge = (
            f"INSERT INTO veil_events ({_EVENT_COLUMNS}) "
            "VALUES (?, ?, 'charge', 'reserved', ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id"
        )
        if postgres:
            # one statement: the budget row is locked from the SELECT to the COMMIT only
            self.spend = None
            self.spend_and_charge: str | None = sql(f"WITH spent AS ({set_spent}) {insert_charge}")
        else:
            self.spend = set_spent
            self.spend_and_charge = None
        self.insert_charge = sql(insert_charge)
        # a commit: the status moves only from reserved (the row is locked by the UPDATE, so
        # a commit and a refund of one charge serialise on it); nothing is written otherwise
        self.mark_committed = sql(
            "UPDATE veil_events SET status = 'committed', updated_at = ? "
            "WHERE id = ? AND event = 'charge' AND status = 'reserved' RETURNING budget_id"
        )
        self.insert_answer = sql(
            "INSERT INTO veil_answers (budget_id, fingerprint, data_version, loss_key, answer, "
            "charge_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id"
        )
        self.set_answer = sql("UPDATE veil_events SET answer_id = ? WHERE id = ?")
        self.answer_and_link: str | None = None
        if postgres:  # the answer and its link from the charge in one statement
            self.answer_and_link = sql(
                "WITH a AS (INSERT INTO veil_answers (budget_id, fingerprint, data_version, "
                "loss_key, answer, charge_id, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "RETURNING id) UPDATE veil_events SET answer_id = (SELECT id FROM a) "
                "WHERE id = ? RETURNING answer_id"
            )
        # a cache lookup and the hit's record in one write transaction: the budget (None: no
        # grant) and the earliest answer for the key (None: no answer)
        self.budget_and_answer = sql(
            "SELECT b.id, a.id, a.answer FROM veil_budgets b LEFT JOIN veil_answers a "
            "ON a.budget_id = b.id AND a.fingerprint = ? AND a.data_version = ? "
            "AND a.loss_key = ? WHERE b.analyst = ? AND b.dataset = ? ORDER BY a.id LIMIT 1"
        )
        self.has_budget = sql("SELECT id FROM veil_budgets WHERE analyst = ? AND dataset = ?")
        # a grant: the budget (locked), then a new one or its new total, and the grant event
        self.budget_locked = sql(
            f"SELECT {_BUDGET_COLUMNS} FROM veil_budgets b "
            f"WHERE b.analyst = ? AND b.dataset = ?{lock}"
        )
        self.insert_budget = sql(
            "INSERT INTO veil_budgets (analyst, dataset, kind, epsilon, delta, rho, "
            "spent_epsilon, spent_delta, spent_rho, thresholds, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, '0', '0', '0', ?, ?, ?) RETURNING id"
        )
        # a part the total has not (ε of a zCDP grant, ρ of another) and thresholds not
        # given: kept as they are
        self.top_up_budget = sql(
            "UPDATE veil_budgets SET kind = ?, delta = ?, updated_at = ?, "
            "epsilon = COALESCE(?, epsilon), rho = COALESCE(?, rho), "
            "thresholds = COALESCE(?, thresholds) WHERE id = ?"
        )
        self.insert_grant_event = sql(
            "INSERT INTO veil_events (budget_id, at, event, detail, loss_kind, epsilon, delta, "
            "rho) VALUES (?, ?, 'grant', ?, ?, ?, ?, ?)"
        )
        self.charge_status = sql("SELECT status FROM veil_events WHERE id = ? AND event = 'charge'")
        self.alerts_done = sql("SELECT threshold FROM veil_alerts WHERE budget_id = ?")
        self.insert_alert = sql(
            "INSERT INTO veil_alerts (budget_id, threshold, used, at, notified) "
            "VALUES (?, ?, ?, ?, 0) RETURNING id"
        )
        self.insert_alert_event = sql(
            "INSERT INTO veil_events (budget_id, at, event, detail) VALUES (?, ?, 'alert', ?)"
        )
        # delivery: the undelivered alerts (of one budget, or all) claimed in one statement
        # (a row another process claimed first is no longer notified = 0: each goes once)
        claim = (
            "UPDATE veil_alerts SET notified = 1 WHERE notified = 0{} "
            "RETURNING id, budget_id, threshold, used, at"
        )
        self.claim_alerts = sql(claim.format(" AND budget_id = ?"))
        self.claim_every_alert = sql(claim.format(""))
        self.alerted_budget = sql(
            "SELECT analyst, dataset, kind, epsilon, delta, rho FROM veil_budgets WHERE id = ?"
        )
        self.insert_hit = sql(
            "INSERT INTO veil_events (budget_id, at, event, fingerprint, data_version, "
            "answer_id, detail, loss_kind, epsilon, delta, rho) "
            "VALUES (?, ?, 'cache_hit', ?, ?, ?, ?, ?, ?, ?, ?)"
        )


def split_budget_and_cap(row: tuple[Any, ...]) -> tuple[BudgetRow, CapRow | None]:
    """The budget and the cap (None: the dataset has none) of one ``budget_and_cap`` row."""
    budget = BudgetRow(*row[:9])
    cap = None if row[9] is None else CapRow(*row[9:17])
    return budget, cap


class _Request(Generic[T]):
    __slots__ = ("done", "error", "op", "result")

    def __init__(self, op: Callable[[Any], T]) -> None:
        self.op = op
        self.done = False
        self.result: T | None = None
        self.error: BaseException | None = None


class GroupCommit:
    """Concurrent write operations of one process, batched into one durable transaction.

    ``run(op)`` queues ``op`` (a function of a driver cursor in a write transaction) and
    waits. One waiting thread at a time — the leader — takes every operation queued so far,
    runs them in turn in one transaction (``transaction()``), commits it, and hands each
    caller its result or its error; the threads that queued while it ran form the next
    batch. Contract: a caller returns only after the transaction holding its operation is
    durable (or with that operation's own error, when it raised one: nothing of it written);
    operations run one after another in queue order, each seeing the writes of the ones before
    it, so each decides exactly as it would have run alone in that order. When the batch's
    transaction fails (a database error), each operation is run again in a transaction of its
    own: the failing one fails alone; none is applied twice (the failed batch was rolled
    back). A failure of one of the ``final`` types (a COMMIT that may have committed) is not
    retried: the batch may stand, so every operation in it fails with it."""

    def __init__(
        self,
        transaction: Callable[[], AbstractContextManager[Any]],
        expected: tuple[type[BaseException], ...],
        *,
        final: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._transaction = transaction
        self._expected = expected  # an operation's own refusals: not a failure of the batch
        self._final = final  # a failure after which the batch may have been applied
        self._forget()
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._mutex = threading.Lock()
        self._turn = threading.Condition(self._mutex)  # a batch ended, or the pause did
        self._leading = False  # a leader is running a batch (or the group is paused)
        self._queue: list[_Request[Any]] = []
        self.transactions = 0  # batches committed by this process (each one durable write)
        self.operations = 0  # operations they held

    def run(self, op: Callable[[Any], T]) -> T:
        """``op(cursor)``'s result once its transaction is committed, or its error."""
        request: _Request[T] = _Request(op)
        with self._mutex:
            self._queue.append(request)
            # the callers of a finished batch wake on the condition, not on a lock the next
            # leader holds for its whole batch (that would make them wait a batch longer)
            while self._leading and not request.done:
                self._turn.wait()
            if not request.done:  # no batch running and ours not taken: lead the next one
                self._leading = True
                batch, self._queue = self._queue, []
        if not request.done:
            try:
                self._run(batch)
            finally:
                with self._mutex:
                    self._leading = False
                    self._turn.notify_all()
        if request.error is not None:
            raise request.error
        return request.result  # type: ignore[return-value]

    @contextmanager
    def paused(self) -> Iterator[list[Any]]:
        """No batch starts while this is held (one running is waited for first): operations
        queue up, and the first caller after it leads them all, in queue order. Yields the
        queue (to watch it fill). For tests that need one known batch."""
        with self._mutex:
            while self._leading:
                self._turn.wait()
            self._leading = True
        try:
            yield self._queue
        finally:
            with self._mutex:
                self._leading = False
                self._turn.notify_all()

    def _run(self, batch: list[_Request[Any]]) -> None:
        try:
            with self._transaction() as cur:
                outcomes = [self._apply(request, cur) for request in batch]
        except BaseException as exc:  # the batch's transaction failed: nothing of it stands
            if len(batch) == 1 or not isinstance(exc, Exception) or isinstance(exc, self._final):
                for request in batch:
                    request.result, request.error, request.done = None, exc, True
                return
            for request in batch:  # each alone, so that only the failing one fails
                try:
                    with self._transaction() as cur:
                        outcome = self._apply(request, cur)
                    self.transactions += 1
                    self.operations += 1
                except BaseException as alone:
                    outcome = (None, alone)
                request.result, request.error = outcome
                request.done = True
            return
        self.transactions += 1
        self.operations += len(batch)
        for request, (result, error) in zip(batch, outcomes, strict=True):
            request.result, request.error, request.done = result, error, True

    def _apply(self, request: _Request[Any], cur: Any) -> tuple[Any, BaseException | None]:
        try:
            return request.op(cur), None
        except self._expected as refused:  # raised before the operation wrote anything
            return None, refused


@contextmanager
def cursor_of(connection: Any) -> Iterator[Any]:
    """A driver cursor of ``connection``, closed afterwards."""
    cur = connection.cursor()
    try:
        yield cur
    finally:
        cur.close()
