"""COUNT(DISTINCT <privacy unit>): the noisy number of units in a group, max(0, û).

With one row per (unit, group) (``max_rows_per_group = 1``) the row count *is* the unit count,
so the two share one measurement. Error bar: the exact discrete quantile of the one noise.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from veil.aggregates import register
from veil.aggregates.base import (
    AggregateKind,
    Call,
    ColumnModel,
    Expected,
    Group,
    Moments,
    NoiseModel,
    Read,
    Statistic,
    nonnegative,
)


@register
class CountDistinct(AggregateKind):
    name = "count_distinct"
    rank = 1
    constant_bar = True
    sql = ("COUNT(DISTINCT <privacy unit>)",)
    output = "integer"
    bounded = False
    column = "unit"
    consistent = "units"

    def default_alias(self, column: str | None, q: Fraction | None) -> str:
        return "count_distinct" if column is None else f"count_distinct_{column}"

    def reads(self, call: Call) -> tuple[Read, ...]:
        statistic: Statistic = "count" if call.rows_per_group == 1 else "count_units"
        return (Read("units", statistic),)

    def split(self, call: Call, weight: float, moments: Moments | None) -> dict[Statistic, float]:
        return {self.reads(call)[0].statistic: weight}

    def estimate(self, g: Group) -> int:
        return max(0, g.value("units"))

    def estimates(
        self,
        model: ColumnModel,
        columns: Mapping[str, NDArray[np.int64]],
        noise: Mapping[str, NoiseModel],
    ) -> list[int] | None:
        """:meth:`estimate` for every group (Python ints, as one group's)."""
        return nonnegative(model, "units", columns)

    def halfwidth(self, g: Group, value: float, level: float) -> float:
        return g.noise("units").halfwidth(level)

    def expected(self, e: Expected, level: float) -> str:
        return f"± {e.noise('units').halfwidth(level):.6g}"
