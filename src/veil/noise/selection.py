"""DP partition selection: the release threshold for groups whose keys are not public.

A group with unknown key is released iff its noisy row count is at least ``threshold``.
Proof note (Korolova et al. 2009; Wilson et al., "Differentially Private SQL with Bounded User
Contribution", PETS 2020, §3; Desfontaines et al. 2022 for the optimal variant): for
neighbouring datasets D, D' = D + one unit u, groups present in both are covered by the noisy
count's own guarantee. Groups present only in D' hold rows of u alone: at most ``max_groups``
of them, each with a count of at most ``max_rows_per_group`` = R. Each is released with
probability P[R + Z ≥ τ] = P[Z ≥ τ − R]; by the union bound the probability that any of them is
released is at most G·P[Z ≥ τ − R] ≤ δ, and conditioned on that event not happening the output
distributions are those of the count mechanism. Hence (ε, δ)-DP, resp. the zCDP guarantee of
the counts plus δ.
"""

from __future__ import annotations

import math
from fractions import Fraction

from veil.errors import InvalidArgumentError

__all__ = ["gaussian_tail_bound", "gaussian_threshold", "laplace_tail", "laplace_threshold"]


def _check(groups: int, rows: int, delta: Fraction) -> None:
    if groups < 1 or rows < 1:
        raise InvalidArgumentError("partition selection needs max_groups ≥ 1 and max_rows ≥ 1")
    if not 0 < delta < 1:
        raise InvalidArgumentError(
            f"partition selection needs 0 < delta < 1, got {float(delta):g}; pass delta=1e-6"
        )


def laplace_tail(scale: Fraction, t: int) -> float:
    """P[Z ≥ t] for the discrete Laplace P(z) ∝ exp(−|z|/scale), t ≥ 1: α^t/(1+α),
    α = exp(−1/scale)."""
    alpha = math.exp(-1 / float(scale))
    return math.exp(-t / float(scale)) / (1 + alpha)


def laplace_threshold(scale: Fraction, *, groups: int, rows: int, delta: Fraction) -> int:
    """The smallest integer τ with ``groups · P[Z ≥ τ − rows] ≤ delta`` for discrete Laplace Z.

    Contract: precondition scale > 0, groups, rows ≥ 1, 0 < δ < 1. Postcondition: with
    t = τ − rows ≥ 1, groups·α^t/(1+α) ≤ δ·(1 − 10⁻⁹), checked in floating point whose
    relative error (< 10⁻¹²) the 10⁻⁹ margin absorbs, so τ never errs toward less privacy.
    """
    _check(groups, rows, delta)
    alpha = math.exp(-1 / float(scale))
    target = float(delta) * (1 - 1e-9)
    t = max(1, math.ceil(float(scale) * (math.log(groups / target) - math.log1p(alpha))) - 1)
    while groups * laplace_tail(scale, t) > target:
        t += 1
    while t > 1 and groups * laplace_tail(scale, t - 1) <= target:
        t -= 1
    return rows + t


def gaussian_tail_bound(sigma2: Fraction, t: int) -> float:
    """An upper bound on P[Z ≥ t] for the discrete Gaussian with variance parameter σ²:
    exp(−t²/(2σ²)) (it is σ-subgaussian; Canonne, Kamath, Steinke 2020, Prop. 18 (Cor.))."""
    return math.exp(-(t * t) / (2 * float(sigma2)))


def gaussian_threshold(sigma2: Fraction, *, groups: int, rows: int, delta: Fraction) -> int:
    """The smallest integer τ with ``groups · exp(−(τ − rows)²/(2σ²)) ≤ δ·(1 − 10⁻⁹)``, which
    bounds groups · P[Z ≥ τ − rows] for the discrete Gaussian Z (see
    :func:`gaussian_tail_bound`). Contract as :func:`laplace_threshold`.
    """
    _check(groups, rows, delta)
    target = float(delta) * (1 - 1e-9)
    t = max(1, math.ceil(math.sqrt(2 * float(sigma2) * max(math.log(groups / target), 0.0))))
    while groups * gaussian_tail_bound(sigma2, t) > target:
        t += 1
    while t > 1 and groups * gaussian_tail_bound(sigma2, t - 1) <= target:
        t -= 1
    return rows + t
