"""Composition of privacy losses: sequential, parallel, advanced, optimal, zCDP — exact or
rounded toward more loss.

The theorems used:

- sequential (basic) composition: ε and δ add (Dwork et al. 2006); ρ adds for zCDP (Bun &
  Steinke 2016, Lemma 1.7); pure ε counts as ρ = ε²/2 (ibid., Prop. 1.4);
- parallel composition over disjoint partitions of the privacy units: the maximum
  (McSherry 2009, Thm. 4);
- advanced composition of k (ε_i, δ_i) mechanisms with slack δ':
  ε' = sqrt(2·ln(1/δ')·Σε_i²) + Σε_i·(e^ε_i − 1), δ' + Σδ_i (Dwork, Rothblum & Vadhan 2010;
  Dwork & Roth 2014, Thm. 3.20);
- optimal composition of k identical (ε, δ) mechanisms (Kairouz, Oh & Viswanath 2015, Thm.
  3.3; in the closed form of Murtagh & Vadhan 2016, Thm. 1.5): the k-fold composition is
  (ε̃, 1 − (1−δ)^k·(1 − δ_k(ε̃)))-DP with
  δ_k(ε̃) = Σ_l C(k,l)·max(0, e^{(k−l)ε} − e^{ε̃}·e^{lε}) / (1 + e^ε)^k.

:func:`compose` tries every valid option and returns the tightest. Advanced and optimal
composition hold for a set of k mechanisms fixed before any is run (their parameters chosen in
advance, the mechanisms themselves adaptive); the ledger, whose charges arrive one by one, only
uses sums (which stay valid as a privacy filter, Rogers et al. 2016).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

from veil.accounting.budget import Budget, Number, exact
from veil.accounting.conversions import round_up, zcdp_to_approx
from veil.errors import InternalError, InvalidArgumentError

__all__ = [
    "MAX_OPTIMAL_K",
    "Composition",
    "advanced_composition",
    "compose",
    "optimal_composition",
    "parallel",
    "sequential",
]

MAX_OPTIMAL_K = 2000  # optimal composition costs O(k) per evaluation; above this, DRV is used
_PREC = 60


def _losses(losses: Iterable[Budget]) -> list[Budget]:
    out = list(losses)
    for loss in out:
        if not isinstance(loss, Budget):
            raise InvalidArgumentError(f"expected veil.Budget losses, got {loss!r}")
    return out


def sequential(losses: Iterable[Budget]) -> Budget:
    """Basic sequential composition, exact: ε and δ add, ρ adds, pure ε joins zCDP as ε²/2.

    An empty list is no loss (``Budget(epsilon=0)``). Mixing (ε, δ) with zCDP raises: use
    :func:`compose` with a target δ.
    """
    items = _losses(losses)
    total = Budget.zero("zcdp" if items and all(b.kind == "zcdp" for b in items) else "pure")
    for loss in items:
        total = total + loss
    return total


def parallel(losses: Iterable[Budget]) -> Budget:
    """Parallel composition over *disjoint* partitions of the privacy units: the maximum.

    Precondition: each unit's rows reach at most one of the mechanisms (McSherry 2009,
    Thm. 4). Pure and (ε, δ) losses give (max ε, max δ); zCDP (and pure as ε²/2) give max ρ.
    """
    items = _losses(losses)
    if not items:
        return Budget(epsilon=0)
    if any(b.kind == "zcdp" for b in items):
        if any(b.kind == "approx" for b in items):
            raise InvalidArgumentError(
                "parallel composition of (ε, δ) and zCDP losses has no exact common form; "
                "convert the zCDP ones with .to_approx(delta) first"
            )
        return Budget(rho=max(b.rho_value for b in items))
    return Budget(epsilon=max(b.eps for b in items), delta=max(b.delta for b in items))


def _slack(delta_slack: Number) -> Fraction:
    d = exact(delta_slack, "delta_slack")
    if not 0 < d < 1:
        raise InvalidArgumentError(f"delta_slack must lie in (0, 1), got {delta_slack!r}")
    return d


def _dec(x: Fraction) -> Decimal:
    return Decimal(x.numerator) / Decimal(x.denominator)


def advanced_composition(
    losses: Sequence[Budget] | Budget, k: int | None = None, *, delta_slack: Number
) -> Budget:
    """Advanced composition (Dwork, Rothblum & Vadhan 2010) of (ε_i, δ_i) mechanisms.

    Call as ``advanced_composition(loss, k, delta_slack=…)`` for k copies of one loss, or with
    a list of losses. Returns (sqrt(2·ln(1/δ')·Σε_i²) + Σε_i(e^ε_i − 1), Σδ_i + δ'), ε rounded
    up to a multiple of 10⁻¹². Pure and approximate losses only.
    """
    items = _expand(losses, k)
    d = _slack(delta_slack)
    if any(b.kind == "zcdp" for b in items):
        raise InvalidArgumentError("advanced composition takes (ε, δ) losses; zCDP losses add ρ")
    with localcontext() as ctx:
        ctx.prec = _PREC
        squares = sum((_dec(b.eps) ** 2 for b in items), Decimal(0))
        drift = sum((_dec(b.eps) * (_dec(b.eps).exp() - 1) for b in items), Decimal(0))
        eps = (2 * (1 / _dec(d)).ln() * squares).sqrt() + drift
    delta = sum((b.delta for b in items), Fraction(0)) + d
    if delta >= 1:
        raise InvalidArgumentError(f"the composed delta {float(delta):.3g} is not below 1")
    return Budget(epsilon=round_up(eps), delta=delta)


def _expand(losses: Sequence[Budget] | Budget, k: int | None) -> list[Budget]:
    if isinstance(losses, Budget):
        if k is None or isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InvalidArgumentError(f"k must be a positive integer, got {k!r}")
        return [losses] * k
    if k is not None:
        raise InvalidArgumentError("pass k only with a single loss")
    items = _losses(losses)
    if not items:
        raise InvalidArgumentError("advanced composition needs at least one loss")
    return items


def _kov_delta(eps: Decimal, k: int, target: Decimal) -> Decimal:
    """δ_k(ε̃) of Murtagh–Vadhan Thm. 1.5 in the current decimal context."""
    e = eps.exp()
    et = target.exp()
    total = Decimal(0)
    binom = 1
    for l_ in range(k + 1):
        a = e ** (k - l_)
        b = et * e**l_
        if a <= b:
            break  # terms only shrink as l grows
        total += binom * (a - b)
        binom = binom * (k - l_) // (l_ + 1)
    return total / (1 + e) ** k


def optimal_composition(loss: Budget, k: int, *, delta_slack: Number) -> Budget:
    """The optimal k-fold composition of one (ε, δ) loss (Kairouz, Oh & Viswanath 2015).

    Contract: returns (ε̃, 1 − (1−δ)^k·(1−δ')) with ε̃ the smallest multiple of 10⁻¹² (up to
    the search tolerance, never below the true optimum at δ') such that δ_k(ε̃) ≤ δ'; δ_k is
    evaluated in 60-digit arithmetic and the final ε̃ is re-checked with a relative margin of
    10⁻³⁰. Feasible for k ≤ ``MAX_OPTIMAL_K``.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidArgumentError(f"k must be a positive integer, got {k!r}")
    if k > MAX_OPTIMAL_K:
        raise InvalidArgumentError(
            f"optimal composition is computed for k ≤ {MAX_OPTIMAL_K}, got k={k}; "
            "use advanced_composition"
        )
    if loss.kind == "zcdp":
        raise InvalidArgumentError("optimal composition takes an (ε, δ) loss; zCDP losses add ρ")
    d = _slack(delta_slack)
    delta_total = 1 - (1 - loss.delta) ** k * (1 - d)
    if loss.eps == 0:
        return Budget(epsilon=0, delta=delta_total)
    with localcontext() as ctx:
        ctx.prec = 34  # the search; the final check below runs at full precision
        eps = _dec(loss.eps)
        dd = _dec(d)
        lo, hi = Decimal(0), eps * k
        if _kov_delta(eps, k, lo) <= dd:
            hi = lo
        for _ in range(60):
            if hi - lo < Decimal("1e-13"):
                break
            mid = (lo + hi) / 2
            if _kov_delta(eps, k, mid) <= dd:
                hi = mid
            else:
                lo = mid
        result = Fraction(0) if hi == 0 else round_up(hi)
        ctx.prec = _PREC
        eps, dd = _dec(loss.eps), _dec(d)
        limit = dd * (1 - Decimal("1e-30"))
        for _ in range(3):
            if _kov_delta(eps, k, _dec(result)) <= limit:
                break
            result += Fraction(1, 10**12)  # pragma: no cover - beyond the 10⁻¹³ search tolerance
        else:  # pragma: no cover - a failed check is a bug
            raise InternalError(f"optimal composition failed its check for {loss}, k={k}")
    return Budget(epsilon=min(result, loss.eps * k), delta=delta_total)


@dataclass(frozen=True)
class Composition:
    """The composed loss and the theorem that gave it."""

    loss: Budget
    method: str


def compose(losses: Iterable[Budget], *, delta: Number | None = None) -> Composition:
    """The tightest valid composition of a fixed set of losses.

    Without ``delta``: exact sequential composition (:func:`sequential`). With a target
    ``delta``: an (ε, δ ≤ delta) loss, the smallest ε among basic composition, zCDP (pure and
    zCDP losses summed as ρ and converted by Canonne–Kamath–Steinke with the δ left over),
    advanced composition (Dwork–Rothblum–Vadhan) and, for identical losses, the optimal bound
    of Kairouz–Oh–Viswanath. Precondition: the mechanisms and their losses are fixed before
    any is run.
    """
    items = _losses(losses)
    if delta is None:
        return Composition(sequential(items), "sequential")
    target = exact(delta, "delta")
    if not 0 < target < 1:
        raise InvalidArgumentError(f"delta must lie in (0, 1), got {delta!r}")
    approx = [b for b in items if b.kind != "zcdp"]
    zcdp = [b for b in items if b.kind == "zcdp"]
    base_delta = sum((b.delta for b in approx), Fraction(0))
    if base_delta > target:
        raise InvalidArgumentError(
            f"the losses already spend delta={float(base_delta):.3g}, more than the target "
            f"delta={float(target):.3g}"
        )
    candidates: list[Composition] = []
    rho = sum((b.rho_value for b in zcdp), Fraction(0))
    if not zcdp:
        candidates.append(Composition(sequential(approx), "sequential"))
    slack = target - base_delta
    if slack > 0:
        # pure and approximate losses add linearly, the zCDP ones are converted once
        eps_linear = sum((b.eps for b in approx), Fraction(0))
        conv = zcdp_to_approx(rho, slack)
        candidates.append(
            Composition(
                Budget(epsilon=eps_linear + conv.eps, delta=base_delta + slack),
                "sequential+zcdp" if zcdp else "sequential",
            )
        )
        # pure losses join the zCDP sum as ε²/2
        pure = [b for b in approx if b.kind == "pure"]
        if pure:
            rest = [b for b in approx if b.kind == "approx"]
            conv = zcdp_to_approx(rho + sum((b.rho_value for b in pure), Fraction(0)), slack)
            candidates.append(
                Composition(
                    Budget(
                        epsilon=sum((b.eps for b in rest), Fraction(0)) + conv.eps,
                        delta=target,
                    ),
                    "zcdp",
                )
            )
        if not zcdp and len(approx) > 1:
            candidates.append(Composition(advanced_composition(approx, delta_slack=slack), "drv"))
            if len(set(approx)) == 1 and len(approx) <= MAX_OPTIMAL_K:
                one = approx[0]
                # 1 − (1−δ)^k (1−δ') ≤ target  ⇔  δ' ≤ 1 − (1−target)/(1−δ)^k
                kov_slack = 1 - (1 - target) / (1 - one.delta) ** len(approx)
                if 0 < kov_slack < 1:
                    candidates.append(
                        Composition(
                            optimal_composition(one, len(approx), delta_slack=kov_slack),
                            "kairouz-optimal",
                        )
                    )
    if not candidates:
        raise InvalidArgumentError(
            f"zCDP losses need some delta to convert, but the (ε, δ) losses use all of "
            f"delta={float(target):.3g}; pass a larger delta"
        )
    return min(candidates, key=lambda c: (c.loss.eps, c.loss.delta))
