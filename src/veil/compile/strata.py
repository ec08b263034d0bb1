"""Stratified noise: a sum grouped by ``BIN`` of its own column, calibrated bin by bin.

When an aggregation groups by ``BIN(x, e0, …, en)`` and sums (or averages) ``x`` itself, the
rows of bin i have values in ``[e_i, e_{i+1}]``, so after clamping to the bounds ``[L, H]``
in ``[clamp(e_i), clamp(e_{i+1})]`` (clamping is monotone). Each bin's sum is then taken about
its own centre and noised at a scale calibrated to its own width: the top bin of an income
histogram gets the noise of its width, the bottom bins far less. Privacy is unchanged: the
measurement's loss is the same ε (or ρ) share as before (proof below).

Per-group bounds. ``bounds={"income": {"north": (0, 20000), …}}`` names the groups of one
public key (a listed domain, or the bins of a ``BIN`` of any column) — every group of it,
:func:`check_group_bounds` refuses anything else before the reservation. The lowering clamps
each row to its group's bounds, choosing them by the key *as it travels to Python* (the bin
or domain index the engine computes, or a native value compared with the listed literal by
the same SQL equality as the key's ``IN`` filter), so every row of group g has its clamped
value in ``[lower_g, upper_g]``; the column's bounds are the hull. From there on a group's
interval plays the part of a bin's ``[clamp(e_i), clamp(e_{i+1})]`` below.

How it is computed. The engine's statistics are the usual ones: it sums, per group, the
per-row integers
v = clamp(round((clamp(x) − c)/step), −b, b) about the measurement's centre c (and counts the
rows). For bin i the compiler computes, from the plan alone, the integer range ``[a_i, z_i]``
that v lies in for every row the bin can hold — ``a_i = floor((clamp(e_i) − c)/step) − 1``,
``z_i = ceil((clamp(e_{i+1}) − c)/step) + 1``, intersected with ``[−b, b]`` (the ±1 absorbs
the engine's double rounding of x and of x − c, each below 2^-20 of a step since
|x − c|/step ≤ 2^31; the edges and bounds are the very doubles the engine compares with,
``veil.plan.numbers``) — a shift ``k_i`` (its integer midpoint) and the per-row bound
``b_i = max(z_i − k_i, k_i − a_i, 1)``. The SQL then clamps each row's integer to
``[k_i − b_i, k_i + b_i]`` by the stratum the row is released in
(``veil.compile.statistics``), so the bound holds whatever a comparison or rounding did.
The release subtracts ``k_i·n_i`` from the exact integer sum of the bin (n_i its exact row
count, computed over the same rows), which is exactly Σ (v − k_i), a sum of integers in
``[−b_i, b_i]``, i.e. the sum about the centre ``c_i = c + k_i·step``; it adds noise
calibrated to ``b_i`` and the estimate adds back ``c_i·n̂_i`` with the noisy count (as every
centred sum does).

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
from collections.abc import Iterable
from fractions import Fraction

from veil.compile.constants import nearest_double
from veil.compile.statistics import reach, sensitivity
from veil.errors import BoundsError, InternalError
from veil.noise.families import Mechanism, family
from veil.plan.nodes import Aggregate, KeyValue, Measurement, Stratum

__all__ = [
    "bins_of",
    "check_group_bounds",
    "expected_strata",
    "group_bounds_key",
    "strata",
    "stratified_key",
]


def _typed(labels: Iterable[KeyValue]) -> set[tuple[str, KeyValue]]:
    return {(type(k).__name__, k) for k in labels}  # True, 1 and 1.0 are different keys


def group_bounds_key(agg: Aggregate, column: str) -> int | None:
    """The index of the public key whose groups ``column``'s per-group bounds name (None:
    the column has none). :func:`check_group_bounds` has refused every other case."""
    b = agg.bounds_of(column)
    if b is None or not b.groups:
        return None
    named = _typed(k for k, _, _ in b.groups)
    for i, key in enumerate(agg.keys):
        if key.is_public and _typed(key.labels()) == named:
            return i
    raise InternalError(f"the per-group bounds of {column!r} name no public key's groups")


def check_group_bounds(agg: Aggregate) -> None:
    """Per-group bounds must name exactly the groups of one public GROUP BY key (a listed
    domain, or the bins of ``BIN``): ``BoundsError`` naming the keys otherwise. Decided from
    the plan alone, before anything is reserved — a key whose groups are not public would
    let the bounds say which groups exist, and a group left out would have no bounds."""
    for b in agg.bounds:
        if not b.groups:
            continue
        named = _typed(k for k, _, _ in b.groups)
        public = [k for k in agg.keys if k.is_public]
        matches = [k for k in public if _typed(k.labels()) == named]
        labels = sorted(repr(k) for k, _, _ in b.groups)
        if len(matches) == 1:
            continue
        if len(matches) > 1:
            raise BoundsError(
                f"the per-group bounds of {b.column!r} name the groups of several keys "
                f"({', '.join(repr(k.alias) for k in matches)}); give the keys different groups"
            )
        keys = "; ".join(
            f"{k.alias!r}: {', '.join(repr(x) for x in k.labels()[:8])}"
            f"{', …' if len(k.labels()) > 8 else ''}"
            for k in public
        )
        hidden = [k.alias for k in agg.keys if not k.is_public]
        why = (
            f" ({', '.join(map(repr, hidden))} has no public list of groups: declare its "
            "domain, e.g. WHERE col IN ('a', 'b'), to bound its groups)"
            if hidden
            else ""
        )
        raise BoundsError(
            f"the per-group bounds of {b.column!r} name the groups {', '.join(labels)}, which "
            f"are not exactly the groups of one public GROUP BY key"
            f"{' (' + keys + ')' if keys else ''}{why}; name every group of one key"
        )


def stratified_key(agg: Aggregate, column: str) -> int | None:
    """The index of the key whose groups stratify the sum of ``column``: the key its
    per-group bounds name, else the first ``BIN`` key over ``column`` itself — unless an
    aggregate of ``column`` reads its sum of squares (VARIANCE, STDDEV take the sum about one
    centre for every group) — else None."""
    for a in agg.aggregates:
        if a.column == column and any(
            r.statistic == "sum_squares" for r in a.kind.reads(a.call(1))
        ):
            return None
    named = group_bounds_key(agg, column)
    if named is not None:
        return named
    for i, key in enumerate(agg.keys):
        if key.column == column and key.edges is not None:
            return i
    return None


def _clamp(x: Fraction, lo: Fraction, hi: Fraction) -> Fraction:
    return min(max(x, lo), hi)


def bins_of(agg: Aggregate, column: str, key: int) -> list[tuple[Fraction, Fraction]]:
    """The interval each bin's clamped values lie in: ``[clamp(e_i), clamp(e_{i+1})]`` with the
    bounds as the engine clamps to them (the doubles nearest the declared ends)."""
    b = agg.bounds_of(column)
    if b is not None and b.groups and group_bounds_key(agg, column) == key:
        # per-group bounds: each group's rows are clamped to its own (the lowering)
        given = {(type(k).__name__, k): (lo, hi) for k, lo, hi in b.groups}
        out = []
        for label in agg.keys[key].labels():
            lo, hi = given[(type(label).__name__, label)]
            out.append((Fraction(nearest_double(lo)), Fraction(nearest_double(hi))))
        return out
    edges = agg.keys[key].edges
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
