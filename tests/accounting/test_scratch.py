"""The scratch ledger: the Ledger's protocol and exact arithmetic, in memory, keeping nothing."""

from __future__ import annotations

import threading
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil import Budget, Ledger
from veil.accounting.scratch import ScratchLedger
from veil.errors import BudgetExhaustedError, LedgerError, ReservationStateError


def test_ten_charges_of_a_tenth_exhaust_one_exactly() -> None:
    led = ScratchLedger()
    led.grant("a", "d", Budget(epsilon=1))
    for _ in range(10):
        led.reserve("a", "d", Budget(epsilon=0.1), fingerprint="q").commit()
    assert led.remaining("a", "d") == Budget(epsilon=0)
    with pytest.raises(BudgetExhaustedError, match="requested ε=1e-18"):
        led.reserve("a", "d", Budget(epsilon="1e-18"), fingerprint="q")


def test_a_reservation_is_reserved_then_committed_or_refunded_once() -> None:
    led = ScratchLedger()
    led.grant("a", "d", Budget(epsilon=1))
    r = led.reserve("a", "d", Budget(epsilon=0.5), fingerprint="q")
    r.refund()
    assert led.remaining("a", "d") == Budget(epsilon=1)
    with pytest.raises(ReservationStateError, match="was refunded; it cannot commit any more"):
        r.commit()
    c = led.reserve("a", "d", Budget(epsilon=0.5), fingerprint="q")
    c.commit()
    with pytest.raises(ReservationStateError, match="cannot be refunded: it was committed"):
        c.refund()
    assert led.remaining("a", "d") == Budget(epsilon=0.5)


def test_a_grant_refuses_a_loss_of_a_kind_it_cannot_pay_and_unknown_grants_are_errors() -> None:
    led = ScratchLedger()
    led.grant("a", "d", Budget(epsilon=1))
    with pytest.raises(LedgerError, match="cannot pay for"):
        led.reserve("a", "d", Budget(epsilon=0.1, delta=1e-9), fingerprint="q")
    assert not led.covers("a", "d", Budget(rho=0.1))
    with pytest.raises(LedgerError, match="no budget on dataset 'x'"):
        led.reserve("a", "x", Budget(epsilon=0.1), fingerprint="q")
    assert (
        led.cached_answer("a", "d", fingerprint="q", data_version="", loss=Budget(epsilon=1))
        is None
    )


def test_concurrent_reservations_never_overspend() -> None:
    led = ScratchLedger()
    led.grant("a", "d", Budget(epsilon=10))
    granted: list[int] = []

    def spend() -> None:
        for _ in range(100):
            try:
                led.reserve("a", "d", Budget(epsilon="0.01"), fingerprint="q").commit()
                granted.append(1)
            except BudgetExhaustedError:
                pass

    threads = [threading.Thread(target=spend) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 1000  # exactly what fits: 10 / 0.01
    assert led.remaining("a", "d") == Budget(epsilon=0)


charges = st.lists(
    st.sampled_from(
        [Budget(epsilon="0.1"), Budget(epsilon="0.3", delta="1e-7"), Budget(rho="0.02")]
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(grant=st.sampled_from([Budget(epsilon=1, delta=1e-6), Budget(rho=0.5)]), losses=charges)
def test_it_accepts_refuses_and_counts_exactly_as_the_database_ledger(
    grant: Budget, losses: list[Budget]
) -> None:
    scratch, sql = ScratchLedger(), Ledger("sqlite://")
    for led in (scratch, sql):
        led.grant("a", "d", grant)
    for loss in losses:
        outcomes = []
        for led in (scratch, sql):
            try:
                led.reserve("a", "d", loss, fingerprint="q").commit()
                outcomes.append("charged")
            except (BudgetExhaustedError, LedgerError) as err:
                outcomes.append(type(err).__name__)
        assert outcomes[0] == outcomes[1], loss
        assert scratch.remaining("a", "d") == sql.remaining("a", "d")
        assert scratch.used_share("a", "d") == sql.used_share("a", "d")
    assert scratch.used_share("a", "d") <= Fraction(1)
    sql.close()
