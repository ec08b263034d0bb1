"""COUNT(*) and COUNT(col): the noisy row count, max(0, n̂).

Error bar: the exact discrete quantile of the one noise, P(|noise| ≤ t) ≥ level.
COUNT(col) counts the rows where ``col`` is not NULL (the NULL rule leaves the others out).
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
class Count(AggregateKind):
    name = "count"
    rank = 0
    constant_bar = True
    sql = ("COUNT(*)", "COUNT(col)")
    output = "integer"
    bounded = False
    column = "optional"
    consistent = "count"

    def default_alias(self, column: str | None, q: Fraction | None) -> str:
        return "count" if column is None else f"count_{column}"

    def reads(self, call: Call) -> tuple[Read, ...]:
        return (Read("count", "count"),)

    def split(self, call: Call, weight: float, moments: Moments | None) -> dict[Statistic, float]:
        return {"count": weight}

    def estimate(self, g: Group) -> int:
        return max(0, g.value("count"))

    def estimates(
        self,
        model: ColumnModel,
        columns: Mapping[str, NDArray[np.int64]],
        noise: Mapping[str, NoiseModel],
    ) -> list[int] | None:
        return nonnegative(model, "count", columns)

    def halfwidth(self, g: Group, value: float, level: float) -> float:
        return g.noise("count").halfwidth(level)

    def expected(self, e: Expected, level: float) -> str:
        return f"± {e.noise('count').halfwidth(level):.6g}"
