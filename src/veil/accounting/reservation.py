"""A charge's lifecycle, ``reserved → committed | refunded | abandoned``, shared by every ledger.

``abandoned`` is a reservation still open long after its worker should have settled it (the
process crashed or was killed): resolved so by :meth:`veil.Ledger.abandon_stale` (the service
does it after ``reservation_ttl_s``). Like ``reserved`` and ``committed`` it stays charged
(:data:`LIVE`); no answer was released, and none ever will be: a late commit is refused.

:class:`Reservation` is what ``Ledger.reserve`` and ``ScratchLedger.reserve`` return; the ledger
that made it does the work (``_commit``, ``_refund``) and checks, with
:func:`check_reserved`, that the charge is still reserved. No database import here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

from veil.accounting.budget import Budget
from veil.errors import ReservationStateError

__all__ = ["LIVE", "Reservation", "ReservationBackend", "Status", "check_reserved"]

Status = Literal["reserved", "committed", "refunded", "abandoned"]

LIVE: tuple[Status, ...] = ("reserved", "committed", "abandoned")
"""The statuses of charges that count against a grant (the running sums hold them)."""


class ReservationBackend(Protocol):
    """What a ledger does for its reservations."""

    def _commit(self, reservation: Reservation, answer: Mapping[str, Any] | None) -> int | None: ...

    def _refund(self, reservation: Reservation) -> None: ...


class Reservation:
    """A charge that is ``reserved → committed | refunded``. Made by :meth:`Ledger.reserve`."""

    def __init__(
        self,
        ledger: ReservationBackend,
        id: int,
        analyst: str,
        dataset: str,
        loss: Budget,
        fingerprint: str,
        data_version: str,
        *,
        budget_id: int | None = None,
    ) -> None:
        self._ledger = ledger
        self.budget_id = budget_id  # the grant's row in the ledger's database, when it has one
        self.id = id
        self.analyst = analyst
        self.dataset = dataset
        self.loss = loss
        self.fingerprint = fingerprint
        self.data_version = data_version
        self._status: Status = "reserved"
        self.answer_id: int | None = None

    @property
    def status(self) -> Status:
        """``"reserved"``, ``"committed"``, ``"refunded"`` or ``"abandoned"``."""
        return self._status

    def commit(self, answer: Mapping[str, Any] | None = None) -> int | None:
        """Make the charge final; cache the JSON-serialisable ``answer``; return its id."""
        self.answer_id = self._ledger._commit(self, answer)
        self._status = "committed"
        return self.answer_id

    def refund(self) -> None:
        """Give the loss back; allowed only before commit (nothing may have been released)."""
        self._ledger._refund(self)
        self._status = "refunded"

    def __repr__(self) -> str:
        return (
            f"Reservation(id={self.id}, analyst={self.analyst!r}, dataset={self.dataset!r}, "
            f"loss={self.loss!r}, status={self._status!r})"
        )


def check_reserved(reservation: Reservation, status: str, action: str) -> None:
    """Raise ``ReservationStateError`` unless a charge whose ``status`` is as stored may
    ``action`` (``"commit"`` or ``"refund"``)."""
    if status == "reserved":
        return
    if status == "committed":
        if action == "commit":
            raise ReservationStateError(
                f"reservation {reservation.id} is already committed; a reservation commits "
                "once (reserve again for a new answer)"
            )
        raise ReservationStateError(
            f"reservation {reservation.id} cannot be refunded: it was committed and its "
            "answer may have been released, so the charge stands"
        )
    if status == "abandoned":
        raise ReservationStateError(
            f"reservation {reservation.id} was resolved as abandoned (it stayed open past the "
            f"time its worker had to settle it); the charge stays and it cannot {action} any "
            "more: nothing of it is released"
        )
    raise ReservationStateError(
        f"reservation {reservation.id} was refunded; it cannot {action} any more (reserve again)"
    )
