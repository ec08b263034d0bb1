"""SUM(x) = step·Ŝ + c·n̂: the noisy *centred* sum Ŝ of clamp(x) − c plus the centre times
the noisy count (with c = 0 the count is not needed), clamped to
[min(0, lower)·n̂⁺, max(0, upper)·n̂⁺].

Error bar: the noise is step·Z_S + c·Z_N (independent discrete noises); ``t`` is the quantile
of that combination (:func:`veil.noise.errorbars.combination_halfwidth`: P ≥ level). Exact
coverage of the noise; the final clamp is post-processing the bar does not model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray
from sqlglot import exp

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
    clamp,
    scaled,
)
from veil.noise.errorbars import Term, combination_halfwidth


@register
class Sum(AggregateKind):
    name = "sum"
    rank = 2
    constant_bar = True
    sql = ("SUM",)
    sql_nodes: ClassVar[tuple[type[Any], ...]] = (exp.Sum,)

    def reads(self, call: Call) -> tuple[Read, ...]:
        return (Read("sum", "sum"), Read("count", "count", optional=True))

    def split(self, call: Call, weight: float, moments: Moments | None) -> dict[Statistic, float]:
        assert moments is not None
        return {
            "sum": weight / moments.second,
            "count": weight * moments.centre**2 / moments.second,
        }

    def estimate(self, g: Group) -> float:
        sm = g.noise("sum")
        total = float(sm.step * g.value("sum"))
        c = float(sm.centre)
        lo, hi = g.lower, g.upper
        if not g.has("count"):
            return total if lo < 0 < hi else (max(total, 0.0) if lo >= 0 else min(total, 0.0))
        n = float(g.value("count"))
        n_pos = max(n, 0.0)
        return clamp(total + c * n, min(0.0, lo) * n_pos, max(0.0, hi) * n_pos)

    def estimates(
        self,
        model: ColumnModel,
        columns: Mapping[str, NDArray[np.int64]],
        noise: Mapping[str, NoiseModel],
    ) -> list[float] | None:
        """:meth:`estimate` for every group (the same float operations, elementwise)."""
        name = model.reads("sum")
        if name is None or noise[name].strata:
            return None  # a stratified sum: each group's own bin (group by group)
        sm = noise[name]
        total = scaled(sm.step, columns[name])
        if total is None:
            return None
        lo, hi = float(model.lower or 0), float(model.upper or 0)
        count = model.reads("count")
        if count is None:
            out = (
                total
                if lo < 0 < hi
                else (np.maximum(total, 0.0) if lo >= 0 else np.minimum(total, 0.0))
            )
        else:
            n = columns[count].astype(np.float64)
            n_pos = np.maximum(n, 0.0)
            x = total + float(sm.centre) * n
            out = np.minimum(np.maximum(x, min(0.0, lo) * n_pos), max(0.0, hi) * n_pos)
        values: list[float] = out.tolist()
        return values

    def _terms(self, e: Expected) -> list[Term]:
        sm = e.noise("sum")
        terms = [sm.term(float(sm.step))]
        if e.has("count"):
            terms.append(e.noise("count").term(float(sm.centre)))
        return terms

    def halfwidth(self, g: Group, value: float, level: float) -> float:
        return combination_halfwidth(self._terms(g), level)

    def expected(self, e: Expected, level: float) -> str:
        return f"± {combination_halfwidth(self._terms(e), level):.6g}"
