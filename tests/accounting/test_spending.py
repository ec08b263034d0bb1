"""Charges of different kinds against one grant: never undercounted."""

from __future__ import annotations

from fractions import Fraction

import pytest

from veil import Budget, BudgetExhaustedError, Ledger, LedgerError
from veil.accounting import zcdp_to_approx
from veil.accounting.spending import Spent, add_charge, fits, remaining, used_fraction


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
