"""The scratch ledger's grants and the parts of the ledger protocol it accepts but keeps
nothing for (answers, alerts)."""

from __future__ import annotations

from fractions import Fraction

import pytest

import veil
from veil.accounting.scratch import ScratchLedger
from veil.errors import LedgerError


def test_a_second_grant_of_the_same_kind_adds_to_the_first() -> None:
    ledger = ScratchLedger()
    assert ledger.grant("alice", "people", veil.Budget(epsilon=1)) == veil.Budget(epsilon=1)
    ledger.reserve("alice", "people", veil.Budget(epsilon=Fraction(3, 4)), fingerprint="q1")
    total = ledger.grant("alice", "people", veil.Budget(epsilon=Fraction(1, 2)))
    assert total == veil.Budget(epsilon=Fraction(3, 2))
    assert ledger.granted("alice", "people") == total
    assert ledger.remaining("alice", "people") == veil.Budget(epsilon=Fraction(3, 4))


def test_a_zcdp_grant_cannot_be_added_to_an_epsilon_grant() -> None:
    ledger = ScratchLedger()
    ledger.grant("alice", "people", veil.Budget(epsilon=1))
    with pytest.raises(LedgerError, match=r"a zcdp grant \(ρ=0.5\) cannot be added to a pure one"):
        ledger.grant("alice", "people", veil.Budget(rho=Fraction(1, 2)))
    assert ledger.granted("alice", "people") == veil.Budget(epsilon=1)


def test_it_keeps_no_answers_but_still_checks_the_grant_exists() -> None:
    ledger = ScratchLedger()
    ledger.grant("alice", "people", veil.Budget(epsilon=1))
    loss = veil.Budget(epsilon=Fraction(1, 10))
    reservation = ledger.reserve("alice", "people", loss, fingerprint="q1")
    reservation.commit({"value": 1})
    assert (
        ledger.cached_answer("alice", "people", fingerprint="q1", data_version="", loss=loss)
        is None
    )
    with pytest.raises(LedgerError):
        ledger.cached_answer("bob", "people", fingerprint="q1", data_version="", loss=loss)


def test_alert_callbacks_are_accepted_and_never_called() -> None:
    ledger = ScratchLedger()
    calls: list[object] = []
    assert ledger.on_alert(calls.append) == calls.append
    ledger.grant("alice", "people", veil.Budget(epsilon=1))
    ledger.reserve("alice", "people", veil.Budget(epsilon=1), fingerprint="all").commit(None)
    assert ledger.used_share("alice", "people") == 1
    assert calls == []
    assert repr(ledger) == "ScratchLedger()"
