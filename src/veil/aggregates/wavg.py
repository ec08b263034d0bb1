"""Weighted AVG(x) = P̂/Ŵ clamped to [lower, upper]: the noisy sum P̂ of the products
clamp(w)·clamp(x) over the noisy sum Ŵ of the clamped weights (``weights=``,
``veil.compile.weights``) — post-processing of two noisy sums, each calibrated to its own
bounds (:mod:`veil.aggregates.wsum`, :mod:`veil.aggregates.wcount`). Where Ŵ ≤ 0 the value is
the bounds' midpoint.

Error bar. When both sums are taken about 0 (the usual case: weights bounds from 0, values of
one sign), P̂ = s_P·V̂_P and Ŵ = s_W·V̂_W (grid steps s, noisy grid sums V̂), with independent
noises Z_P, Z_W, and the unclamped error is *exactly* (s_P·Z_P − m·s_W·Z_W)/Ŵ =
((s_P/s_W)·Z_P − m·Z_W)/V̂_W, m the true weighted mean, |m| ≤ max(|lower|, |upper|): AVG's
error with step s_P/s_W, centre 0, and the weights' grid sum V̂_W as the count — so the bar is
:func:`veil.noise.aggregate_bars.avg_halfwidths`'s, with its exact coverage (see
:mod:`veil.aggregates.avg`; the whole range when V̂_W is below 4 × its own bar).

Otherwise (a sum centred away from 0 reads the count too: P̂ = s_P·V̂_P + c_P·n̂, Ŵ =
s_W·V̂_W + c_W·n̂), the error is still exact: P̂ − m·Ŵ = s_P·Z_P − m·s_W·Z_W + (c_P − m·c_W)·Z_N
(P = m·W), so m̂ − m = (s_P·Z_P − m·s_W·Z_W + (c_P − m·c_W)·Z_N)/Ŵ with m̂ = P̂/Ŵ, three
independent noises. Cut [lower, upper] (where m lies: weights ≥ 0, values clamped) into 1000
cells; T_j bounds that combination at ``level`` for every m in cell j, computed at the cell's
largest |m|·s_W and |c_P − m·c_W| (the coverage of the combination is nonincreasing in each
coefficient, the property AVG's bar uses). On the event {|combination at the true m| ≤
T_cell(m)} (P ≥ level), m lies in S = ∪_j (cell j ∩ [m̂ − T_j/Ŵ, m̂ + T_j/Ŵ]) when Ŵ > 0, so the
bar — the largest distance from the released value to a point of S — covers the noise with
probability ≥ level; with Ŵ ≤ 0 it is the whole range. Like every veil bar it is for the
noise, not for the clamping of values or weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from veil.aggregates import register
from veil.aggregates.base import (
    AggregateKind,
    Call,
    Expected,
    Group,
    Moments,
    Read,
    Role,
    Statistic,
    clamp,
)
from veil.noise.aggregate_bars import avg_halfwidths
from veil.noise.errorbars import combination_halfwidth, combination_halfwidths

_CELLS = 1000  # the centred bar's cells of the bounds (a thousandth each)


def _total(g: Group, role: Role) -> float:
    """The noisy sum in ``role``: step·Ŝ + centre·n̂ (the centre is 0 when no count is read)."""
    sm = g.noise(role)
    value = float(sm.step * g.value(role))
    if sm.centre != 0:
        value += float(sm.centre) * float(g.value("count"))
    return value


def _bound(moments: Moments | None, weight: float) -> dict[Statistic, float]:
    """A sum's relative-variance coefficients (as :mod:`veil.aggregates.sum`)."""
    assert moments is not None
    return {
        "sum": weight / moments.second,
        "count": weight * moments.centre**2 / moments.second,
    }


@register
class WeightedAvg(AggregateKind):
    name = "wavg"
    rank = 52
    sql = ("AVG(col) with weights=",)
    weighted = "mean"

    def default_alias(self, column: str | None, q: Fraction | None) -> str:
        return f"avg_{column}"

    def reads(self, call: Call) -> tuple[Read, ...]:
        return (Read("sum", "sum"), Read("total", "sum"), Read("count", "count", optional=True))

    def split(self, call: Call, weight: float, moments: Moments | None) -> dict[Statistic, float]:
        # delta method: Var(P̂/Ŵ)/m² ≈ Var(P̂)/P² + Var(Ŵ)/W² — the two sums' own terms
        return _bound(moments, weight)

    def split_weights(
        self, call: Call, weight: float, moments: Moments | None
    ) -> dict[Statistic, float]:
        return _bound(moments, weight)

    def estimate(self, g: Group) -> float:
        p, w = _total(g, "sum"), _total(g, "total")
        if not w > 0:
            return (g.lower + g.upper) / 2
        return clamp(p / w, g.lower, g.upper)

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
        g = groups[0]  # one column: every group shares its noises and bounds
        sm, wm = g.noise("sum"), g.noise("total")
        if sm.centre != 0 or wm.centre != 0:
            return self._centred(groups, values, level)
        bars = avg_halfwidths(
            sm,
            wm,
            step=float(sm.step / wm.step),
            centre=0.0,
            lower=g.lower,
            upper=g.upper,
            counts=[x.value("total") for x in groups],
            sums=[x.value("sum") for x in groups],
            level=level,
        )
        return [float(b) for b in bars]

    def _cells(self, e: Expected, level: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The cells of [lower, upper] (their ends) and T_j of the module docstring."""
        sm, wm = e.noise("sum"), e.noise("total")
        edges = np.linspace(e.lower, e.upper, _CELLS + 1)
        edges[-1] = e.upper
        lo, hi = edges[:-1], edges[1:]
        terms: list[tuple[object, str, Fraction]] = [
            (float(sm.step), sm.mechanism, sm.scale),
            (np.maximum(np.abs(lo), np.abs(hi)) * float(wm.step), wm.mechanism, wm.scale),
        ]
        if e.has("count"):
            cp, cw = float(sm.centre), float(wm.centre)
            n = np.maximum(np.abs(cp - lo * cw), np.abs(cp - hi * cw))
            cm = e.noise("count")
            terms.append((n, cm.mechanism, cm.scale))
        return lo, hi, combination_halfwidths(terms, level)  # type: ignore[arg-type]

    def _centred(
        self, groups: Sequence[Group], values: Sequence[float], level: float
    ) -> list[float | None]:
        """The bar of the module docstring for sums centred away from 0, every group at once."""
        g = groups[0]
        lo, hi, t = self._cells(g, level)
        full = g.upper - g.lower
        out: list[float | None] = []
        for x, v in zip(groups, values, strict=True):
            p, w = _total(x, "sum"), _total(x, "total")
            if not w > 0:
                out.append(full)
                continue
            m_hat, r = p / w, t / w
            left, right = np.maximum(lo, m_hat - r), np.minimum(hi, m_hat + r)
            ok = left <= right
            if not ok.any():  # the noise beyond its bound: no point of S, the whole range
                out.append(full)
                continue
            bar = max(v - float(left[ok].min()), float(right[ok].max()) - v, 0.0)
            out.append(min(bar, full))
        return out

    def expected(self, e: Expected, level: float) -> str:
        sm, wm = e.noise("sum"), e.noise("total")
        far = max(abs(e.lower), abs(e.upper))
        full = e.upper - e.lower
        if sm.centre == 0 and wm.centre == 0:
            # the bar of a group of total weight W is about T(|mean|)/W (avg_halfwidths)
            step = float(wm.step)
            near = combination_halfwidth([sm.term(float(sm.step)), wm.term(0.0)], level)
            worst = combination_halfwidth([sm.term(float(sm.step)), wm.term(far * step)], level)
            small = max(step, 4 * wm.halfwidth(level) * step)
            return (
                f"± {near:.6g}/W (mean at 0) to ± {worst:.6g}/W (|mean| = {far:.6g}) for a "
                f"group of total weight W; ± {full:.6g} (the whole range) for a group whose "
                f"noisy total weight is below {small:.6g}"
            )
        _, _, t = self._cells(e, level)
        return (
            f"± {float(t.min()):.6g}/W to ± {float(t.max()):.6g}/W (by where the mean lies) for "
            f"a group of total weight W; ± {full:.6g} (the whole range) for a group whose "
            "noisy total weight is 0 or below"
        )
