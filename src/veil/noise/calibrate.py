"""Calibrating the discrete Gaussian to (ε, δ)-DP.

Scalar releases use the *exact* privacy curve of the discrete Gaussian (Canonne, Kamath,
Steinke 2020, Theorem 7): for an integer shift Δ,
``δ(ε) = P[X > εσ²/Δ − Δ/2] − e^ε·P[X > εσ²/Δ + Δ/2]`` with ``X ~ N_Z(0, σ²)``, checked for
every integer shift up to the sensitivity. Vector releases use the zCDP route
(ρ = Δ₂²/(2σ²), then δ from ρ by CKS Corollary 13), which is valid for any shift vector.
The curves are evaluated in floating point with a safety margin (``δ_computed·(1 + 1e-6) ≤ δ``);
for σ > 2000 the pmf tails are bounded by integrals rather than summed (≈ 0.25 % more σ); σ is
searched by bisection and the *larger* end is kept, so rounding only adds noise.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

from veil.errors import InvalidArgumentError

__all__ = ["cdp_delta", "discrete_gaussian_delta", "sigma2_for_approx_dp"]

_MARGIN = 1 + 1e-6
_CONFIRM_SHIFTS = 2000


def discrete_gaussian_delta(sigma2: float, epsilon: float, shift: int) -> float:
    """δ(ε) of the scalar discrete Gaussian N_Z(0, σ²) for an integer ``shift ≥ 1`` (CKS Thm 7)."""
    return float(_dg_deltas(sigma2, epsilon, np.array([shift], dtype=np.float64))[0])


_TABLE_SIGMA = 2000.0  # above this σ the tails are bounded by integrals instead of summed


def _dg_deltas(sigma2: float, epsilon: float, shifts: NDArray[np.float64]) -> NDArray[np.float64]:
    """CKS Theorem 7 for several integer shifts at once (an upper bound on each δ)."""
    if math.sqrt(sigma2) > _TABLE_SIGMA:
        return np.array([_dg_delta_bound(sigma2, epsilon, float(m)) for m in shifts])
    sigma = math.sqrt(sigma2)
    a = epsilon * sigma2 / shifts - shifts / 2
    b = a + shifts
    k_max = int(38 * sigma) + 2  # e^{-38²/2} underflows: farther terms are 0 in floats
    k = np.arange(-k_max, k_max + 1, dtype=np.float64)
    w = np.exp(-(k * k) / (2 * sigma2))
    tail = np.cumsum(w[::-1])[::-1]  # tail[i] = Σ_{j ≥ i} w_j
    total = tail[0]
    tail = np.append(tail, 0.0)

    def above(x: NDArray[np.float64]) -> NDArray[np.float64]:
        i = np.searchsorted(k, x, side="right")  # first index with k > x
        out: NDArray[np.float64] = tail[i] / total
        return out

    return np.maximum(0.0, above(a) - math.exp(epsilon) * above(b))


def _dg_delta_bound(sigma2: float, epsilon: float, shift: float) -> float:
    """Upper bound on CKS Theorem 7's δ for large σ, without summing the pmf.

    With ``f(x) = e^{-x²/2σ²}`` decreasing on ``[0, ∞)``, ``S(c) = Σ_{k ≥ c} f(k)`` for an
    integer ``c ≥ 0`` satisfies ``I(c) ≤ S(c) ≤ f(c) + I(c)`` with ``I(c) = ∫_c^∞ f``; and
    ``Z = Σ_k f(k) = σ√(2π)(1 + 2Σ_{n≥1} e^{-2π²σ²n²})`` (Poisson summation), within 1e-100 of
    ``σ√(2π)`` for σ ≥ 3. ``P[Y > a]`` is ``S(⌊a⌋+1)/Z`` (or ``1 − S(⌈−a⌉)/Z`` for a < 0).
    """
    sigma = math.sqrt(sigma2)
    z_lo, z_hi = sigma * math.sqrt(2 * math.pi), sigma * math.sqrt(2 * math.pi) * (1 + 1e-100)

    def integral(c: float) -> float:
        return sigma * math.sqrt(math.pi / 2) * math.erfc(c / (sigma * math.sqrt(2)))

    def f(c: float) -> float:
        return math.exp(-(c * c) / (2 * sigma2))

    def above(x: float, upper: bool) -> float:
        if x >= 0:
            c = math.floor(x) + 1
            return (f(c) + integral(c)) / z_lo if upper else integral(c) / z_hi
        c = math.ceil(-x)
        return 1 - (integral(c) / z_hi if upper else (f(c) + integral(c)) / z_lo)

    a = epsilon * sigma2 / shift - shift / 2
    return max(0.0, above(a, True) - math.exp(epsilon) * above(a + shift, False))


def cdp_delta(rho: float, epsilon: float) -> float:
    """δ for ρ-zCDP at ε (CKS 2020 Corollary 13; any α > 1 gives a valid bound)."""
    if rho <= 0:
        return 0.0
    a_min, a_max = 1.01, (epsilon + 1) / (2 * rho) + 2
    for _ in range(200):
        alpha = (a_min + a_max) / 2
        derivative = (2 * alpha - 1) * rho - epsilon + math.log1p(-1.0 / alpha)
        if derivative < 0:
            a_min = alpha
        else:
            a_max = alpha
    alpha = (a_min + a_max) / 2
    log_delta = (alpha - 1) * (alpha * rho - epsilon) + alpha * math.log1p(-1 / alpha)
    return min(1.0, math.exp(log_delta) / (alpha - 1.0))


def _continuous_delta(sigma: float, sens: float, eps: float) -> float:
    """δ(ε) of the continuous Gaussian mechanism (Balle & Wang 2018, Theorem 8)."""

    def phi(x: float) -> float:
        return 0.5 * math.erfc(-x / math.sqrt(2))

    u, v = sens / (2 * sigma), eps * sigma / sens
    return phi(u - v) - math.exp(eps) * phi(-u - v)


def _continuous_sigma(sens: float, eps: float, dlt: float) -> float:
    lo, hi = 1e-6 * sens, sens
    while _continuous_delta(hi, sens, eps) > dlt:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _continuous_delta(mid, sens, eps) <= dlt else (mid, hi)
    return hi


@lru_cache(maxsize=256)
def sigma2_for_approx_dp(
    sensitivity: Fraction, epsilon: Fraction, delta: Fraction, dimension: int
) -> Fraction:
    """A rational σ² (in the sensitivity's units) making N_Z(0, σ²) noise (ε, δ)-DP.

    ``sensitivity`` is the L2 bound on the integer shift between neighbouring inputs.
    """
    if epsilon > 100 or delta < Fraction(1, 10**100):
        raise InvalidArgumentError(
            f"the (ε, δ) Gaussian calibration supports ε ≤ 100 and δ ≥ 1e-100, got "
            f"ε={float(epsilon):g}, δ={float(delta):g}; pass rho=… instead"
        )
    eps, dlt, sens = float(epsilon), float(delta), float(sensitivity)
    shifts = max(1, math.floor(sensitivity))

    def ok(s2: float) -> bool:
        if dimension == 1:
            worst = float(np.max(_dg_deltas(s2, eps, near)))
        else:
            worst = cdp_delta(sens * sens / (2 * s2), eps)
        return worst * _MARGIN <= dlt

    near = np.arange(max(1, shifts - 2), shifts + 1, dtype=np.float64)
    # bracket around the continuous analytic-Gaussian σ (Balle & Wang 2018), then refine on
    # the discrete curve
    guess = _continuous_sigma(sens, eps, dlt)
    lo_s, hi_s = guess * 0.9, guess * 1.1
    while ok(lo_s * lo_s) and lo_s > 1e-12:
        lo_s, hi_s = lo_s / 2, lo_s
    while not ok(hi_s * hi_s):
        lo_s, hi_s = hi_s, hi_s * 2
        if hi_s > 1e30:
            raise InvalidArgumentError(
                f"no Gaussian noise below σ = 1e30 gives (ε={eps:g}, δ={dlt:g}); "
                "use a larger epsilon or delta"
            )
    for _ in range(24):
        mid = (lo_s + hi_s) / 2
        if ok(mid * mid):
            hi_s = mid
        else:
            lo_s = mid
    sigma2 = Fraction(hi_s) ** 2
    if dimension == 1 and 3 < shifts <= _CONFIRM_SHIFTS:
        # the worst shift is the largest in practice; confirm over all shifts at the final σ
        # (beyond _CONFIRM_SHIFTS we rely on Theorem 7 being stated for every |x − x'| ≤ Δ)
        s2 = float(sigma2)
        every = np.arange(1, shifts + 1, dtype=np.float64)
        while float(np.max(_dg_deltas(s2, eps, every))) * _MARGIN > dlt:
            sigma2 *= Fraction(101, 100)
            s2 = float(sigma2)
    return sigma2
