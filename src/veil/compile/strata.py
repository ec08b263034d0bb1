"""Stratified noise: a sum grouped by ``BIN`` of its own column, calibrated bin by bin.

When an aggregation groups by ``BIN(x, e0, …, en)`` and sums (or averages) ``x`` itself, the
rows of bin i have values in ``[e_i, e_{i+1}]``, so after clamping to the bounds ``[L, H]``
in ``[clamp(e_i), clamp(e_{i+1})]`` (clamping is monotone). Each bin's sum is then taken about
its own centre and noised at a scale calibrated to its own width: the top bin of an income
histogram gets the noise of its width, the bottom bins far less. Privacy is unchanged: the
measurement's loss is the same ε (or ρ) share as before (proof below).

How it is computed. The engine's SQL is unchanged: it sums, per group, the per-row integers
v = clamp(round((clamp(x) − c)/step), −b, b) about the measurement's centre c (and counts the
rows). For bin i the compiler computes, from the plan alone, the integer range ``[a_i, z_i]``
that v lies in for every row the bin can hold — ``a_i = floor((clamp(e_i) − c)/step) − 1``,
``z_i = ceil((clamp(e_{i+1}) − c)/step) + 1``, intersected with ``[−b, b]`` (the ±1 absorbs
the engine's double rounding of x, of x − c and of the edge comparisons, each below 2^-20 of a
step since |x − c|/step ≤ 2^31) — a shift ``k_i`` (its integer midpoint) and the per-row
bound ``b_i = max(z_i − k_i, k_i − a_i, 1)``. The release subtracts ``k_i·n_i`` from the exact
integer sum of the bin (n_i its exact row count, computed over the same rows), which is
exactly Σ (v − k_i), a sum of integers in ``[−b_i, b_i]``, i.e. the sum about the centre
``c_i = c + k_i·step``; it adds noise calibrated to ``b_i`` and the estimate adds back
``c_i·n̂_i`` with the noisy count (as every centred sum does).

Proof note (sensitivity, parallel composition). Neighbours differ by one unit's rows; after
bounding the unit has c_g ≤ R rows in group g, at most G groups, Σ c_g ≤ T
(``veil.compile.statistics``). A group g lies in one bin i(g) (the BIN key is part of the
group key), so its shifted statistic moves by at most c_g·b_{i(g)}. With the family's scale
s_i = scale(b_i·κ, share) — κ = min(T, G·R) (L1, discrete Laplace) or κ² = the greedy L2²
bound (discrete Gaussian) of one row-unit (b = 1) — the privacy loss of the whole measurement
is Σ_g c_g·b_{i(g)}/s_{i(g)} = share·Σ_g c_g/κ ≤ share (Laplace), resp.
Σ_g (c_g·b_{i(g)})²/(2·s_{i(g)}) = share·Σ_g c_g²/κ² ≤ share (Gaussian): each group's noise
is proportional to its own bin's bound, so the loss is that of one bound b = 1 — exactly the
share the unstratified measurement spends, for any G, R and T (``max_groups`` > 1 lets a unit
reach several bins; the bound covers every allocation). Rows outside ``[e0, en]``, NaN or
NULL belong to no bin and are dropped by the BIN key (there is no null or out-of-range bin).

Error bars, per group: bin i's sum noise is ``step·Z_i + c_i·Z_N`` with Z_i at scale s_i;
every bar and expected error is computed from the bin's own noise model.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

from veil.compile.constants import nearest_double
from veil.compile.statistics import reach, sensitivity
from veil.errors import InternalError
from veil.noise.families import Mechanism, family
from veil.plan.nodes import Aggregate, Measurement, Stratum

__all__ = [
    "bins_of",
    "expected_strata",
    "strata",
    "stratified_key",
]


def stratified_key(agg: Aggregate, column: str) -> int | None:
    """The index of the key whose bins stratify the sum of ``column``: the first ``BIN`` key
    over ``column`` itself — unless an aggregate of ``column`` reads its sum of squares
    (VARIANCE, STDDEV take the sum about one centre for every group) — else None."""
    for a in agg.aggregates:
        if a.column == column and any(
            r.statistic == "sum_squares" for r in a.kind.reads(a.call(1))
        ):
            return None
    for i, key in enumerate(agg.keys):
        if key.column == column and key.edges is not None:
            return i
    return None


def _clamp(x: Fraction, lo: Fraction, hi: Fraction) -> Fraction:
    return min(max(x, lo), hi)


def bins_of(agg: Aggregate, column: str, key: int) -> list[tuple[Fraction, Fraction]]:
    """The interval each bin's clamped values lie in: ``[clamp(e_i), clamp(e_{i+1})]`` with the
    bounds as the engine clamps to them (the doubles nearest the declared ends)."""
    edges = agg.keys[key].edges
    b = agg.bounds_of(column)
    if edges is None or b is None:
        raise InternalError(f"no bins or bounds to stratify {column!r} by")
    lo, hi = Fraction(nearest_double(b.lower)), Fraction(nearest_double(b.upper))
    return [(_clamp(x, lo, hi), _clamp(y, lo, hi)) for x, y in itertools.pairwise(edges)]


def _integer_range(
    lower: Fraction, upper: Fraction, centre: Fraction, step: Fraction, limit: int
) -> tuple[int, int]:
    a = math.floor((lower - centre) / step) - 1
    z = math.ceil((upper - centre) / step) + 1
    a, z = max(a, -limit), min(z, limit)
    if a > z:  # no row can fall in this bin: any one-point range is a valid bound
        a = z = max(min(a, limit), -limit)
    return a, z


def strata(
    agg: Aggregate,
    column: str,
    key: int,
    *,
    mechanism: Mechanism,
    centre: Fraction,
    step: Fraction,
    limit: int,
    share: Fraction,
) -> tuple[Stratum, ...]:
    """The per-bin calibration of the sum of ``column`` (centre, step, limit: the engine's
    per-row integers; ``share``: the measurement's ε or ρ) — see the module docstring.

    Contract: for every row bin i can hold, the engine's per-row integer v satisfies
    |v − shift_i| ≤ limit_i, and scale_i = scale(sensitivity(limit_i), share), so the loss of
    the stratified measurement is exactly ``share`` (module proof note).
    """
    noise = family(mechanism)
    out = []
    for lower, upper in bins_of(agg, column, key):
        a, z = _integer_range(lower, upper, centre, step, limit)
        shift = (a + z) // 2
        bound = max(z - shift, shift - a, 1)
        sens = sensitivity(agg, "sum", mechanism, bound)
        out.append(
            Stratum(
                lower=lower,
                upper=upper,
                centre=centre + shift * step,
                shift=shift,
                limit=bound,
                sensitivity=sens,
                scale=noise.scale(sens, share),
            )
        )
    return tuple(out)


def expected_strata(agg: Aggregate, m: Measurement) -> tuple[Stratum, ...]:
    """The strata ``m`` must carry, recomputed from the plan and ``m``'s own grid, mechanism
    and global scale (its share is the global measurement's privacy map at that scale): empty
    for a measurement the plan does not stratify."""
    column = m.column or ""
    key = stratified_key(agg, column) if m.statistic == "sum" else None
    if key is None:
        return ()
    noise = family(m.mechanism)
    eps, rho = noise.loss(m.sensitivity, m.scale, reach(agg, "sum"))
    share = eps if m.mechanism == "discrete_laplace" and eps is not None else rho
    return strata(
        agg,
        column,
        key,
        mechanism=m.mechanism,
        centre=m.centre,
        step=m.step,
        limit=m.limit,
        share=share,
    )
