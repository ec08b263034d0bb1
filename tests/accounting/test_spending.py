"""Charges of different kinds against one grant: never undercounted."""

from __future__ import annotations

import contextlib
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil import Budget, BudgetExhaustedError, Ledger, LedgerError
from veil.accounting import Accountant, compose, sequential, zcdp_to_approx
from veil.accounting.spending import (
    Spent,
    add_charge,
    fits,
    remaining,
    remove_charge,
    used_fraction,
)


def test_an_approximate_grant_adds_pure_and_approximate_charges() -> None:
    total = Budget(epsilon=1, delta=1e-6)
    spent = add_charge(total, Spent(), Budget(epsilon=0.5))
    spent = add_charge(total, spent, Budget(epsilon=0.25, delta=4e-7))
    assert spent == Spent(Fraction(3, 4), Fraction(4, 10**7), Fraction(0))
    assert remaining(total, spent) == Budget(epsilon=0.25, delta=6e-7)
    assert fits(total, spent)
    assert not fits(total, add_charge(total, spent, Budget(epsilon=0.25, delta=7e-7)))


def test_an_approximate_grant_converts_the_summed_rho_once_with_the_delta_left() -> None:
    total = Budget(epsilon=5, delta=1e-5)
    spent = Spent()
    for _ in range(4):
        spent = add_charge(total, spent, Budget(rho=0.05))
    spent = add_charge(total, spent, Budget(epsilon=0.5, delta=2e-6))
    assert spent.rho == Fraction(1, 5)
    z = zcdp_to_approx(Fraction(1, 5), Fraction(8, 10**6)).eps
    assert remaining(total, spent) == Budget(epsilon=5 - Fraction(1, 2) - z, delta=8e-6)
    # converting each ρ on its own would cost more: the sum is never undercounted, only tighter
    each = 4 * zcdp_to_approx(Fraction(1, 20), Fraction(2, 10**6)).eps
    assert z < each
    assert used_fraction(total, spent) == (Fraction(1, 2) + z) / 5


def test_zcdp_charges_need_some_delta_left() -> None:
    total = Budget(epsilon=10, delta=1e-6)
    spent = add_charge(total, Spent(), Budget(epsilon=0.1, delta=1e-6))
    assert fits(total, spent)
    assert not fits(total, add_charge(total, spent, Budget(rho=1e-9)))
    assert remaining(total, spent) == Budget(epsilon=9.9)


def test_a_pure_grant_refuses_zcdp_and_approximate_charges() -> None:
    total = Budget(epsilon=1)
    with pytest.raises(LedgerError, match=r"a pure ε grant .* cannot pay for the zcdp loss"):
        add_charge(total, Spent(), Budget(rho=0.01))
    with pytest.raises(LedgerError, match="cannot pay for the approx loss"):
        add_charge(total, Spent(), Budget(epsilon=0.1, delta=1e-9))


def test_mixed_charges_through_the_ledger(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(epsilon=2, delta=1e-6))
    ledger.reserve("alice", "people", Budget(rho=0.02), fingerprint="g").commit()
    ledger.reserve("alice", "people", Budget(epsilon=0.5), fingerprint="l").commit()
    z = zcdp_to_approx(Fraction(1, 50), Fraction(1, 10**6)).eps
    left = Fraction(3, 2) - z
    assert ledger.remaining("alice", "people") == Budget(epsilon=left, delta=1e-6)
    with pytest.raises(BudgetExhaustedError):
        ledger.reserve(
            "alice", "people", Budget(epsilon=left + Fraction(1, 10**12)), fingerprint="x"
        )
    ledger.reserve("alice", "people", Budget(epsilon=left), fingerprint="y").commit()
    assert ledger.remaining("alice", "people").eps == 0
    # the zCDP part owns all the δ left: a further (ε, δ) charge does not fit
    with pytest.raises(BudgetExhaustedError):
        ledger.reserve("alice", "people", Budget(epsilon=0, delta=1e-7), fingerprint="z")


charge_lists = st.lists(
    st.one_of(
        st.fractions(min_value=0, max_value=1, max_denominator=1000).map(
            lambda e: Budget(epsilon=e)
        ),
        st.tuples(
            st.fractions(min_value=0, max_value=1, max_denominator=1000),
            st.sampled_from([Fraction(1, 10**8), Fraction(1, 10**7)]),
        ).map(lambda p: Budget(epsilon=p[0], delta=p[1])),
        st.fractions(min_value=0, max_value=Fraction(1, 4), max_denominator=1000).map(
            lambda r: Budget(rho=r)
        ),
    ),
    max_size=15,
)


@settings(max_examples=50, deadline=None)
@given(charge_lists)
def test_what_an_approximate_grant_accepts_is_within_it_by_a_composition_theorem(
    charges: list[Budget],
) -> None:
    grant = Budget(epsilon=3, delta=Fraction(1, 10**6))
    acct = Accountant(grant)
    for loss in charges:
        with contextlib.suppress(BudgetExhaustedError):
            acct.charge(loss)
    if not acct.charges:
        return
    assert compose(acct.charges, delta=grant.delta).loss <= grant


@settings(max_examples=50, deadline=None)
@given(charge_lists.map(lambda cs: [c for c in cs if c.kind != "approx"]))
def test_what_a_zcdp_grant_accepts_adds_up_to_at_most_its_rho(charges: list[Budget]) -> None:
    acct = Accountant(Budget(rho=1))
    for loss in charges:
        with contextlib.suppress(BudgetExhaustedError):
            acct.charge(loss)
    assert sequential([c.to_zcdp() for c in acct.charges]) <= Budget(rho=1)


@settings(max_examples=50, deadline=None)
@given(charge_lists, st.data())
def test_a_refund_restores_the_sums_exactly(charges: list[Budget], data: st.DataObject) -> None:
    total = Budget(epsilon=100, delta=Fraction(1, 1000))
    spent = Spent()
    for loss in charges:
        spent = add_charge(total, spent, loss)
    if not charges:
        return
    loss = data.draw(st.sampled_from(charges))
    assert add_charge(total, remove_charge(total, spent, loss), loss) == spent
