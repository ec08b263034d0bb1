"""SUM(x) = step·Ŝ + c·n̂: the noisy *centred* sum Ŝ of clamp(x) − c plus the centre times
the noisy count (with c = 0 the count is not needed), clamped to
[min(0, lower)·n̂⁺, max(0, upper)·n̂⁺].

Error bar: the noise is step·Z_S + c·Z_N (independent discrete noises); ``t`` is the quantile
of that combination (:func:`veil.noise.errorbars.combination_halfwidth`: P ≥ level). Exact
coverage of the noise; the final clamp is post-processing the bar does not model.
"""

from __future__ import annotations

from typing import Any, ClassVar

from sqlglot import exp

from veil.aggregates import register
from veil.aggregates.base import (
    AggregateKind,
    Call,
    Expected,
    Group,
    Moments,
    Read,
    Statistic,
    clamp,
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
