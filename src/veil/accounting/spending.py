"""How charges of different kinds are counted against one grant (the ledger's rule).

A grant keeps three exact running sums: ε (of pure and approximate charges), δ (of approximate
charges) and ρ (of zCDP charges). What a grant accepts:

- a pure ε grant: pure charges only (ε adds). zCDP and (ε, δ) charges give no pure guarantee and
  are refused.
- an (ε, δ) grant: pure and (ε, δ) charges add up in ε and δ. zCDP charges are summed as ρ and
  converted once, by Canonne–Kamath–Steinke, using all of the grant's δ that the other charges
  have not spent: the charges fit when ``Σε + ε_CKS(Σρ, δ − Σδ) ≤ ε`` (and ``Σδ < δ`` when
  ρ > 0). Proof note, for charges whose parameters are fixed in advance: on each pair of
  neighbours an (ε_i, δ_i) mechanism is a post-processing of randomized response (Kairouz, Oh &
  Viswanath 2015, §2), which reveals with probability δ_i and is otherwise ε_i-DP; outside
  those events (probability ≥ 1 − Σδ) every pure step has Rényi divergence ≤ ε_i at every order
  and every zCDP step ≤ α·ρ_j, so the whole run is (α, Σε + α·Σρ)-RDP (Mironov 2017) and the
  conversion of Canonne–Kamath–Steinke (2020, Prop. 12) at any α gives ε; the δ's add.
- a ρ-zCDP grant: zCDP charges add ρ; pure ε charges count as ε²/2 (Bun–Steinke Prop. 1.4);
  (ε, δ) charges are refused (δ > 0 implies no zCDP guarantee).

Charges are only ever added as sums. When each charge is chosen after seeing earlier answers,
sums of one kind stay valid as privacy filters (Rogers et al. 2016 for ε and δ; Whitehouse et
al. 2023 for ρ). Mixing zCDP with ε/δ charges in one (ε, δ) grant combines the two arguments;
no single published filter theorem covers that mixture, so a deployment that wants only
textbook guarantees keeps to one kind of charge per grant (a ρ grant for zCDP mechanisms).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from veil.accounting.budget import Budget
from veil.accounting.conversions import zcdp_to_approx
from veil.errors import LedgerError

__all__ = ["Spent", "add_charge", "fits", "remaining", "remove_charge", "used_fraction"]


@dataclass(frozen=True)
class Spent:
    """The exact running sums of a grant."""

    epsilon: Fraction = Fraction(0)
    delta: Fraction = Fraction(0)
    rho: Fraction = Fraction(0)


def _signed(total: Budget, spent: Spent, loss: Budget, sign: int) -> Spent:
    if total.kind == "pure":
        if loss.kind != "pure":
            raise LedgerError(
                f"a pure ε grant ({total}) cannot pay for the {loss.kind} loss {loss}: it gives "
                "no pure guarantee; grant an (ε, δ) or ρ budget, or use a pure mechanism"
            )
        return Spent(spent.epsilon + sign * loss.eps, spent.delta, spent.rho)
    if total.kind == "zcdp":
        if loss.kind == "approx":
            raise LedgerError(
                f"a zCDP grant ({total}) cannot pay for the (ε, δ) loss {loss}: δ > 0 implies no "
                "zCDP guarantee; use a zCDP or pure mechanism, or grant an (ε, δ) budget"
            )
        return Spent(spent.epsilon, spent.delta, spent.rho + sign * loss.rho_value)
    if loss.kind == "zcdp":
        return Spent(spent.epsilon, spent.delta, spent.rho + sign * (loss.rho or 0))
    return Spent(spent.epsilon + sign * loss.eps, spent.delta + sign * loss.delta, spent.rho)


def add_charge(total: Budget, spent: Spent, loss: Budget) -> Spent:
    """The sums after charging ``loss`` (raises ``LedgerError`` if the grant refuses its kind)."""
    return _signed(total, spent, loss, 1)


def remove_charge(total: Budget, spent: Spent, loss: Budget) -> Spent:
    """The sums after refunding ``loss``."""
    return _signed(total, spent, loss, -1)


def _zcdp_epsilon(total: Budget, spent: Spent) -> Fraction | None:
    """ε spent by the zCDP charges of an (ε, δ) grant; None when no δ is left to convert."""
    if spent.rho == 0:
        return Fraction(0)
    left = total.delta - spent.delta
    if left <= 0:
        return None
    return zcdp_to_approx(spent.rho, left).eps


def fits(total: Budget, spent: Spent) -> bool:
    """Whether the sums stay within the grant."""
    if total.kind == "pure":
        return spent.epsilon <= total.eps
    if total.kind == "zcdp":
        return spent.rho <= (total.rho or 0)
    if spent.delta > total.delta:
        return False
    z = _zcdp_epsilon(total, spent)
    return z is not None and spent.epsilon + z <= total.eps


def remaining(total: Budget, spent: Spent) -> Budget:
    """What is left, in the grant's kind (never negative).

    For an (ε, δ) grant with zCDP charges the δ shown is what the other charges have not spent;
    the ε shown is what a further *pure* charge may use.
    """
    if total.kind == "pure":
        return Budget(epsilon=max(total.eps - spent.epsilon, Fraction(0)))
    if total.kind == "zcdp":
        return Budget(rho=max((total.rho or 0) - spent.rho, Fraction(0)))
    z = _zcdp_epsilon(total, spent)
    if z is None:
        return Budget(epsilon=0)
    eps = max(total.eps - spent.epsilon - z, Fraction(0))
    return Budget(epsilon=eps, delta=max(total.delta - spent.delta, Fraction(0)))


def used_fraction(total: Budget, spent: Spent) -> Fraction:
    """The share of the grant spent, the largest over its components (1 = exhausted)."""

    def share(used: Fraction, whole: Fraction) -> Fraction:
        if whole == 0:
            return Fraction(0) if used <= 0 else Fraction(1)
        return used / whole

    if total.kind == "pure":
        return share(spent.epsilon, total.eps)
    if total.kind == "zcdp":
        return share(spent.rho, total.rho or Fraction(0))
    z = _zcdp_epsilon(total, spent)
    if z is None:
        return Fraction(1)
    return max(share(spent.epsilon + z, total.eps), share(spent.delta, total.delta))
