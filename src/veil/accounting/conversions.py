"""Conversions between kinds of privacy loss, rounded toward more loss.

The one conversion that needs real numbers (ρ-zCDP → (ε, δ)) is computed in two steps: a
floating-point search picks the Rényi order α, then ε at that α is evaluated in 60-digit
decimal arithmetic, padded and rounded *up* to a multiple of 10⁻¹², and checked by recomputing
the δ it implies. Any α > 1 gives a valid bound, so the search may be approximate; only the
evaluation at the chosen α must not round down, and it does not.
"""

from __future__ import annotations

import functools
import math
from decimal import ROUND_CEILING, Decimal, localcontext
from fractions import Fraction

from veil.accounting.budget import Budget, Number, exact
from veil.errors import InternalError, InvalidArgumentError

__all__ = [
    "bun_steinke_epsilon",
    "group_privacy",
    "pure_to_zcdp",
    "round_up",
    "zcdp_to_approx",
]

_PRECISION = 60
_PAD = Decimal("1e-40")
GRID = 10**12  # ε from a real-valued bound is rounded up to a multiple of 1/GRID


def round_up(value: Decimal, grid: int = GRID) -> Fraction:
    """The smallest multiple of ``1/grid`` that is ≥ ``value`` (plus a 10⁻⁴⁰ safety pad)."""
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        scaled = ((value + _PAD) * grid).to_integral_value(rounding=ROUND_CEILING)
    return Fraction(int(scaled), grid)


def _dec(x: Fraction) -> Decimal:
    return Decimal(x.numerator) / Decimal(x.denominator)


def pure_to_zcdp(epsilon: Number) -> Budget:
    """ε-DP implies (ε²/2)-zCDP (Bun & Steinke 2016, Prop. 1.4). Exact."""
    return Budget(epsilon=epsilon).to_zcdp()


def bun_steinke_epsilon(rho: Fraction, delta: Fraction) -> float:
    """Bun–Steinke's ε = ρ + 2·sqrt(ρ·ln(1/δ)) (2016, Prop. 1.3), for comparison only."""
    return float(rho) + 2 * math.sqrt(float(rho) * math.log(1 / float(delta)))


def _cks_epsilon_float(alpha: float, rho: float, log_inv_delta: float) -> float:
    # ε(α) = αρ + (ln(1/δ) + (α−1)·ln(1−1/α) − ln α) / (α−1)
    am1 = alpha - 1
    return alpha * rho + (log_inv_delta + am1 * math.log1p(-1 / alpha) - math.log(alpha)) / am1


def _best_alpha(rho: float, log_inv_delta: float) -> Fraction:
    """An order α > 1 near the minimiser of the CKS bound (search in floats; any α is valid)."""
    # The objective is unimodal in log(α − 1): scan a log grid, then refine by golden section.
    lo_t, hi_t = -12.0, 40.0
    ts = [lo_t + (hi_t - lo_t) * i / 400 for i in range(401)]

    def f(t: float) -> float:
        try:
            return _cks_epsilon_float(1 + math.exp(t), rho, log_inv_delta)
        except (OverflowError, ValueError):  # pragma: no cover - outside the searched range
            return math.inf

    best = min(range(len(ts)), key=lambda i: f(ts[i]))
    a, b = ts[max(best - 1, 0)], ts[min(best + 1, len(ts) - 1)]
    g = (math.sqrt(5) - 1) / 2
    for _ in range(80):
        c, d = b - g * (b - a), a + g * (b - a)
        if f(c) <= f(d):
            b = d
        else:
            a = c
    alpha = 1 + math.exp((a + b) / 2)
    return Fraction(alpha).limit_denominator(10**9) if alpha < 1e9 else Fraction(int(alpha))


def _cks_epsilon_exact(alpha: Fraction, rho: Fraction, delta: Fraction) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        a, r, d = _dec(alpha), _dec(rho), _dec(delta)
        am1 = a - 1
        return a * r + ((1 / d).ln() + am1 * (1 - 1 / a).ln() - a.ln()) / am1


def _cks_log_delta(alpha: Fraction, rho: Fraction, epsilon: Fraction) -> Decimal:
    # ln δ = (α−1)(αρ − ε) + α·ln(1 − 1/α) − ln(α − 1)
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        a, r, e = _dec(alpha), _dec(rho), _dec(epsilon)
        return (a - 1) * (a * r - e) + a * (1 - 1 / a).ln() - (a - 1).ln()


def zcdp_to_approx(rho: Number, delta: Number) -> Budget:
    """The (ε, δ)-DP guarantee implied by ρ-zCDP.

    Contract: for ρ ≥ 0 and 0 < δ < 1, returns ``Budget(epsilon=ε, delta=δ)`` such that every
    ρ-zCDP mechanism is (ε, δ)-DP. Uses Canonne, Kamath & Steinke, "The Discrete Gaussian for
    Differential Privacy" (NeurIPS 2020), Prop. 12 / Cor. 13 (the same bound as Asoodeh et al.
    2021's RDP conversion): for every α > 1,
    ``ε = αρ + (ln(1/δ) + (α−1)·ln(1−1/α) − ln α)/(α−1)``, which is at most Bun–Steinke's
    ``ρ + 2·sqrt(ρ·ln(1/δ))``. ε is rounded up to a multiple of 10⁻¹² and verified by
    recomputing δ in 60-digit arithmetic; a failed verification raises ``InternalError``.
    """
    r = exact(rho, "rho")
    d = exact(delta, "delta")
    if r < 0:
        raise InvalidArgumentError(f"rho must be ≥ 0, got {rho!r}")
    if not 0 < d < 1:
        raise InvalidArgumentError(f"delta must lie in (0, 1), got {delta!r}")
    if r == 0:
        return Budget(epsilon=0, delta=d)
    return _zcdp_to_approx(r, d)


@functools.lru_cache(maxsize=4096)
def _zcdp_to_approx(r: Fraction, d: Fraction) -> Budget:
    alpha = _best_alpha(float(r), math.log(1 / float(d)))
    if alpha <= 1:  # pragma: no cover - the search stays above 1 + e⁻¹²
        alpha = Fraction(1) + Fraction(1, 10**6)
    # a negative bound means (0, δ) holds: the implied δ only falls as ε grows
    eps = max(round_up(_cks_epsilon_exact(alpha, r, d)), Fraction(0))
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        implied = _cks_log_delta(alpha, r, eps)
        if not implied <= _dec(d).ln():  # pragma: no cover - the check the rounding guarantees
            raise InternalError(f"zCDP→(ε, δ) conversion failed its check for rho={r}, delta={d}")
    return Budget(epsilon=eps, delta=d)


def group_privacy(loss: Budget, k: int) -> Budget:
    """The loss toward groups of ``k`` rows of a mechanism with ``loss`` toward one row.

    Contract: precondition k ≥ 1 (an int), ``loss`` any kind. Postcondition: a mechanism that
    is ``loss``-private for neighbours differing in one row is private with the result for
    neighbours differing in up to k rows (a person's rows when each person has at most k):

    - ε-DP → kε-DP (chain of k neighbours; exact);
    - (ε, δ)-DP → (kε, k·e^{(k−1)ε}·δ)-DP (Dwork & Roth 2014, Thm 2.2's chain: δ_j = δ +
      e^ε·δ_{j−1} sums to δ·(e^{kε} − 1)/(e^ε − 1) ≤ k·e^{(k−1)ε}·δ); the δ is rounded *up* to
      a multiple of 10⁻¹² of itself in 60-digit arithmetic, and is refused when it reaches 1;
    - ρ-zCDP → k²ρ-zCDP (Bun & Steinke 2016, Prop. 1.9; exact).

    Where a mechanism's sensitivity can be scaled instead (every aggregate of
    ``veil.compile.statistics``: a person's k rows are an allocation of limits (k, k, k)), the
    scaled sensitivity is used, which is never worse; this is for the per-row mechanisms
    (``veil.local.perturb``).
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidArgumentError(
            f"a group has at least one row: k must be an integer ≥ 1, got {k!r}"
        )
    if k == 1:
        return loss
    if loss.kind == "zcdp":
        return Budget(rho=k * k * loss.rho_value)
    eps = k * loss.eps
    if loss.kind == "pure":
        return Budget(epsilon=eps)
    with localcontext() as ctx:
        ctx.prec = _PRECISION
        factor = ((k - 1) * _dec(loss.eps)).exp() * k
        bound = _dec(loss.delta) * factor
        # up to 12 significant digits: a grid of 10^(12 − exponent of the bound)
        delta = round_up(bound, grid=10 ** max(12, 12 - bound.adjusted()))
    if delta >= 1:
        raise InvalidArgumentError(
            f"group privacy over {k} rows turns delta={float(loss.delta):g} at "
            f"epsilon={float(loss.eps):g} into k·e^((k−1)ε)·δ = {float(bound):.3g} ≥ 1, which "
            "protects nothing; lower epsilon or delta, or contributions"
        )
    return Budget(epsilon=eps, delta=delta)
