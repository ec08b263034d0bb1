"""What each worker does for its ledger besides answering (issue 34): check it, and settle
what crashed workers left open.

- **The running sums are checked against the charges** (:meth:`veil.Ledger.verify`) when the
  app opens the ledger and every ``ledger_check_s`` seconds after: a mismatch (a rewritten or
  corrupted cell) stops charging in this worker — every new query or mechanism call is refused
  with ``unavailable`` (503), free — and is logged at CRITICAL on ``veil.ledger``, the alert.
  Reading, answering from the cache and settling what is already reserved go on. It stays
  stopped until an operator has restored or corrected the ledger (``veil ledger check``) and
  restarted the service.
- **Reservations whose worker is gone** (a crash, a SIGKILL, a lost machine) are resolved as
  ``abandoned`` once ``reservation_ttl_s`` old (:meth:`veil.Ledger.abandon_stale`): still
  charged, nothing released. Every worker does it; the update is idempotent.

A failing database is logged and tried again at the next period.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from veil.accounting.ledger import Ledger
from veil.errors import LedgerUnavailableError

__all__ = ["LedgerUpkeep"]

logger = logging.getLogger("veil.ledger")


class LedgerUpkeep:
    """The periodic check and settling of ``ledger`` (a daemon thread, :meth:`start`)."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        every_s: float,
        reservation_ttl_s: float,
        after: Callable[[Ledger], None] | None = None,
    ) -> None:
        self._ledger = ledger
        self._after = after
        self._every_s = every_s
        self._ttl_s = reservation_ttl_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.rounds = 0  # rounds completed (for tests and the curious)

    def run_once(self) -> None:
        """Check the running sums (stopping charging on a mismatch) and abandon stale
        reservations, now; then call ``after`` with the ledger (whatever happened)."""
        try:
            self._check()
        finally:
            if self._after is not None:
                self._after(self._ledger)

    def _check(self) -> None:
        try:
            if self._ledger.halted is None:
                self._ledger.verify(halt=True)
            abandoned = self._ledger.abandon_stale(self._ttl_s)
        except LedgerUnavailableError as exc:
            logger.error("veil ledger upkeep: the database failed, trying again later: %s", exc)
            return
        if abandoned:
            logger.warning(
                "veil ledger: %d reservation(s) still open after %g s resolved as abandoned "
                "(their worker is gone; still charged, nothing released): %s",
                len(abandoned),
                self._ttl_s,
                abandoned,
            )
        self.rounds += 1

    def start(self) -> None:
        """Run :meth:`run_once` every ``every_s`` seconds in a daemon thread."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="veil-ledger-upkeep", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every_s):
            self.run_once()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=10)
