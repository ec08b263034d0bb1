"""Sensitivities from bounds and contribution limits only — never from data.

Proof note. Neighbouring datasets differ by all rows of one privacy unit (DESIGN §1). After
bounding, the unit has rows in at most G = :func:`effective_groups` groups and at most R =
``max_rows_per_group`` rows in each. Every per-row integer the engine sums lies in
[−limit, limit] (clamped in SQL *after* rounding, so no float value can escape), hence per group
the unit changes

- ``count`` by at most R, ``count_units`` by at most 1,
- ``sum`` / ``sum_squares`` by at most R·limit,

and it touches at most G groups. So the L1 sensitivity of the vector of per-group statistics is
G·(per-group bound) and the squared L2 sensitivity is G·(per-group bound)². For a quantile the
score −|rank(c) − q·n| of every candidate c moves by at most R·max(q, 1 − q) in each group
(each row moves the rank by at most 1 and q·n by q).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from veil.errors import InternalError
from veil.noise.families import family
from veil.plan.nodes import Aggregate, Measurement, Mechanism, Statistic

__all__ = [
    "effective_groups",
    "per_group_bound",
    "rows_per_group",
    "sensitivity",
    "thresholded",
]


def rows_per_group(agg: Aggregate) -> int:
    """R: rows a unit may have in one group (1 when each row is its own unit)."""
    return 1 if agg.privacy_unit is None else agg.contribution.max_rows_per_group


def effective_groups(agg: Aggregate) -> int:
    """G: groups one unit can touch — 1 without GROUP BY or without a privacy unit, never more
    than the number of public keys, else ``max_groups``."""
    if not agg.keys or agg.privacy_unit is None:
        return 1
    g = agg.contribution.max_groups
    if agg.public_keys:
        possible = 1
        for k in agg.keys:
            possible *= len(k.labels())
            if possible >= g:
                return g
        return min(g, possible)
    return g


def per_group_bound(
    agg: Aggregate, statistic: Statistic, limit: int, quantile: Fraction | None = None
) -> Fraction:
    """How much one unit can change the statistic of one group (integer units)."""
    r = rows_per_group(agg)
    if statistic == "count":
        return Fraction(r)
    if statistic == "count_units":
        return Fraction(1)
    if statistic in ("sum", "sum_squares"):
        return Fraction(r * limit)
    if statistic == "quantile":
        if quantile is None:
            raise InternalError("a quantile measurement without q")
        return r * max(quantile, 1 - quantile)
    raise InternalError(f"unknown statistic {statistic!r}")


def sensitivity(
    agg: Aggregate,
    statistic: Statistic,
    mechanism: Mechanism,
    limit: int,
    quantile: Fraction | None = None,
) -> Fraction:
    """The sensitivity a measurement is calibrated to (see the module proof note).

    L1 = G·b for ``discrete_laplace``; L2² = G·b² for ``discrete_gaussian``; the per-group score
    bound b for ``exponential`` (composition over the G groups is accounted in the budget).
    """
    return family(mechanism).sensitivity(
        per_group_bound(agg, statistic, limit, quantile), effective_groups(agg)
    )


def thresholded(measurements: Sequence[Measurement]) -> Measurement | None:
    """The noisy count partition selection thresholds: the row count if there is one, else the
    unit count (whose per-group bound is 1)."""
    for statistic in ("count", "count_units"):
        for m in measurements:
            if m.statistic == statistic:
                return m
    return None


def check_measurement(agg: Aggregate, m: Measurement) -> Fraction:
    """The sensitivity ``m`` must carry, recomputed from the plan (used by the invariant)."""
    return sensitivity(agg, m.statistic, m.mechanism, m.limit, m.quantile)
