"""AVG(x) = clamp(c + step·Ŝ / max(n̂, 1), lower, upper): the centred noisy sum over the noisy
count.

Error bar (:func:`veil.noise.aggregate_bars.avg_halfwidths`, every group at once): before clamping,
released − true = (step·Z_S − m·Z_N)/n̂ *exactly*, with n̂ the released noisy count and m =
true mean − c. With T_j a bound on |step·Z_S − μ·Z_N| at ``level`` valid for every |μ| up to
the top of the j-th thousandth of the bounds' reach (made nondecreasing in j), the bar is the
largest x with x ≤ T(|m̂| + x)/n̂ (m̂ the unclamped released mean − c): on the event that the
noise is within the bound of the true |m|'s cell (probability ≥ level), the error x satisfies
that inequality, so it is at most the bar — no approximation. Clamping to [lower, upper] only
moves the value toward the truth. When n̂ < 4 × the count's own bar the bar is the whole range
upper − lower.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
from veil.noise.aggregate_bars import avg_halfwidths
from veil.noise.errorbars import combination_halfwidth


@register
class Avg(AggregateKind):
    name = "avg"
    rank = 3
    sql = ("AVG",)
    sql_nodes = (exp.Avg,)

    def reads(self, call: Call) -> tuple[Read, ...]:
        return (Read("sum", "sum"), Read("count", "count"))

    def split(self, call: Call, weight: float, moments: Moments | None) -> dict[Statistic, float]:
        assert moments is not None
        return {"sum": weight / moments.second, "count": weight * moments.centred / moments.second}

    def estimate(self, g: Group) -> float:
        sm = g.noise("sum")
        s = float(sm.step * g.value("sum"))
        n = float(g.value("count"))
        return clamp(float(sm.centre) + s / max(n, 1.0), g.lower, g.upper)

    def estimates(
        self,
        model: ColumnModel,
        columns: Mapping[str, NDArray[np.int64]],
        noise: Mapping[str, NoiseModel],
    ) -> list[float] | None:
        """:meth:`estimate` for every group (the same float operations, elementwise)."""
        name, count = model.reads("sum"), model.reads("count")
        if name is None or count is None or noise[name].strata:
            return None
        sm = noise[name]
        s = scaled(sm.step, columns[name])
        if s is None:
            return None
        n = columns[count].astype(np.float64)
        x = float(sm.centre) + s / np.maximum(n, 1.0)
        lo, hi = float(model.lower or 0), float(model.upper or 0)
        values: list[float] = np.minimum(np.maximum(x, lo), hi).tolist()
        return values

    def halfwidth(self, g: Group, value: float, level: float) -> float:
        """The bar of the module docstring (a batch of one)."""
        bar = self.halfwidths([g], [value], level)[0]
        assert bar is not None
        return bar

    def halfwidths(
        self, groups: Sequence[Group], values: Sequence[float], level: float
    ) -> list[float | None]:
        if not groups:
            return []
        if groups[0].stratum is not None:  # a stratified sum: each bin its noise and bounds
            out: list[float | None] = [None] * len(groups)
            by_bin: dict[int | None, list[int]] = {}
            for i, x in enumerate(groups):
                by_bin.setdefault(x.stratum, []).append(i)
            for members in by_bin.values():
                part = self._unstratified_halfwidths(
                    [groups[i] for i in members], [values[i] for i in members], level
                )
                for i, bar in zip(members, part, strict=True):
                    out[i] = bar
            return out
        return self._unstratified_halfwidths(groups, values, level)

    def _unstratified_halfwidths(
        self, groups: Sequence[Group], values: Sequence[float], level: float
    ) -> list[float | None]:
        g = groups[0]  # one column (or one bin): every group shares its noises and bounds
        sm, cm = g.noise("sum"), g.noise("count")
        bars = avg_halfwidths(
            sm,
            cm,
            step=float(sm.step),
            centre=float(sm.centre),
            lower=g.lower,
            upper=g.upper,
            counts=[x.value("count") for x in groups],
            sums=[x.value("sum") for x in groups],
            level=level,
        )
        return [float(b) for b in bars]

    def expected(self, e: Expected, level: float) -> str:
        sm, cm = e.noise("sum"), e.noise("count")
        step, centre = float(sm.step), float(sm.centre)
        far = max(abs(e.lower - centre), abs(e.upper - centre))
        near = combination_halfwidth([sm.term(step), cm.term(0.0)], level)
        worst = combination_halfwidth([sm.term(step), cm.term(far)], level)
        # the release's own fallback (halfwidth above): below this noisy count the ratio is
        # too uncertain and the bar is the whole range
        small = max(1.0, 4 * cm.halfwidth(level))
        full = e.upper - e.lower
        return (
            f"± {near:.6g}/n (mean at {centre:.6g}) to ± {worst:.6g}/n (mean at a bound)"
            f"; ± {full:.6g} (the whole range) for a group whose noisy count is below "
            f"{small:.6g}"
        )
