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
:func:`veil.noise.errorbars.avg_halfwidths`'s, with its exact coverage (see
:mod:`veil.aggregates.avg`; the whole range when V̂_W is below 4 × its own bar).

Otherwise (a sum centred away from 0 shares the count's noise), a union bound: with a and b the
two sums' half-widths at (1 + level)/2 (exact discrete quantiles,
:func:`veil.noise.errorbars.combination_halfwidth`), the event {|P̂ − P| ≤ a and |Ŵ − W| ≤ b}
has probability ≥ level whatever the dependence; on it, if Ŵ > b, then W > 0 and m = P/W lies
between the least and largest of (P̂ ± a)/(Ŵ ± b) (P/W is monotone in P and in W on W > 0)
and in [lower, upper] (weights ≥ 0, values clamped); the bar is the largest distance from the
released value to that interval's ends, and the whole range if Ŵ ≤ b. Wider than a joint
quantile, never narrower. Like every veil bar it is for the noise, not for the clamping of
values or weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

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
from veil.noise.errorbars import Term, avg_halfwidths, combination_halfwidth


def _terms(e: Expected, role: Role) -> list[Term]:
    """The noise of the sum in ``role`` (step·Z_S, plus centre·Z_N when centred)."""
    sm = e.noise(role)
    terms = [sm.term(float(sm.step))]
    if e.has("count") and sm.centre != 0:
        terms.append(e.noise("count").term(float(sm.centre)))
    return terms


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

    def _halfwidths(self, e: Expected, level: float) -> tuple[float, float]:
        inner = (1 + level) / 2  # each sum at (1 + level)/2: both hold with P ≥ level
        return (
            combination_halfwidth(_terms(e, "sum"), inner),
            combination_halfwidth(_terms(e, "total"), inner),
        )

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
            return [self._union(x, v, level) for x, v in zip(groups, values, strict=True)]
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

    def _union(self, g: Group, value: float, level: float) -> float:
        """The union-bound bar of the module docstring (sums centred away from 0)."""
        a, b = self._halfwidths(g, level)
        p, w = _total(g, "sum"), _total(g, "total")
        full = g.upper - g.lower
        if not w > b:
            return full
        ratios = [(p + s * a) / (w + t * b) for s in (-1, 1) for t in (-1, 1)]
        lo = clamp(min(ratios), g.lower, g.upper)
        hi = clamp(max(ratios), g.lower, g.upper)
        return min(max(value - lo, hi - value, 0.0), full)

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
        a, b = self._halfwidths(e, level)
        return (
            f"± about ({a:.6g} + |mean|·{b:.6g})/(W − {b:.6g}) for a group of total weight W "
            f"(at most ± ({a:.6g} + {far:.6g}·{b:.6g})/(W − {b:.6g})); ± {full:.6g}"
            f" (the whole range) for a group whose noisy total weight is below {b:.6g}"
        )
