"""Weighted COUNT(*) = Σ clamp(w): the noisy sum of the clamped survey weights of a group's
rows (``weights=``, ``veil.compile.weights``), at least 0.

It is SUM of the weights column (same statistic, sensitivity and error bar as
:mod:`veil.aggregates.sum`): with weights bounds [w_min, w_max], 0 ≤ w_min, one row moves it by
at most w_max (in grid units ``limit``), a unit by R·w_max. The estimate is clamped to
[0, w_max·n̂⁺] when the count is measured, to [0, ∞) otherwise (post-processing).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, ClassVar

from veil.aggregates import register
from veil.aggregates.sum import Sum


@register
class WeightedCount(Sum):
    name = "wcount"
    rank = 50
    sql = ("COUNT(*) with weights=",)
    sql_nodes: ClassVar[tuple[type[Any], ...]] = ()
    column = "optional"
    weighted = "count"

    def default_alias(self, column: str | None, q: Fraction | None) -> str:
        return "count"
