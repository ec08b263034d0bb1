"""Weighted SUM(x) = Σ clamp(w)·clamp(x): the noisy sum of the per-row products of the
clamped value and its clamped survey weight (``weights=``, ``veil.compile.weights``).

It is SUM of the product column (same statistic and error bar as :mod:`veil.aggregates.sum`):
each product lies in [p_min, p_max], the least and largest of the four products of the
bounds' ends, so one row moves the fixed-point sum by at most ``limit`` grid steps of that
range and a unit by R·limit — the sensitivity of an ordinary sum with bounds [p_min, p_max].
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, ClassVar

from veil.aggregates import register
from veil.aggregates.sum import Sum


@register
class WeightedSum(Sum):
    name = "wsum"
    rank = 51
    sql = ("SUM(col) with weights=",)
    sql_nodes: ClassVar[tuple[type[Any], ...]] = ()
    weighted = "sum"

    def default_alias(self, column: str | None, q: Fraction | None) -> str:
        return f"sum_{column}"
