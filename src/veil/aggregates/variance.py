"""VARIANCE / VAR_SAMP(x): the sample variance (Q − S²/n)/(n − 1) of the clamped values, and
the machinery every spread kind shares (:class:`Spread`: STDDEV, VAR_POP, STDDEV_POP).

With n = max(n̂, n_min), S = step·Ŝ the noisy centred sum and Q = Σ(x − c)² recovered from the
noisy centred sum of squares Q̂, a spread kind with divisor d(n) (n − 1 here, n for the
population forms) releases V = clamp((Q − S²/n)/d, 0, (upper − lower)²/4 · n/d), or its root.

Error bar: the delta method on released values — the first-order error is the linear
combination a_Q·Z_Q + a_S·Z_S + a_N·Z_N with plug-in coefficients a_Q = unit/d,
a_S = −2S·step/(n·d), a_N = (width²/2 + S²/n² − V)/d (unit = width²/(2·limit), the value of one
sum-of-squares step), and ``t`` is its exact quantile (as for SUM), plus the one-signed
second-order term (step·t_S)²/(n·d) at the sum noise's quantile t_S. Approximate: it covers at
``level`` to first order in 1/n̂. The root's interval is the variance's mapped through sqrt.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import ClassVar

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
)
from veil.noise.aggregate_bars import stddev_halfwidths, variance_halfwidths


class Spread(AggregateKind):
    """A variance-like kind: ``ddof`` (d(n) = n − ddof) and ``root`` (release the sqrt)."""

    ddof: ClassVar[int] = 1
    root: ClassVar[bool] = False

    def reads(self, call: Call) -> tuple[Read, ...]:
        return (Read("squares", "sum_squares"), Read("sum", "sum"), Read("count", "count"))

    def split(self, call: Call, weight: float, moments: Moments | None) -> dict[Statistic, float]:
        assert moments is not None
        s2 = moments.spread
        share = weight / 4 if self.root else weight  # relvar(sqrt V) ≈ relvar(V)/4
        return {
            "sum_squares": share / (s2 * s2),
            "sum": share * 4 * moments.centred / (s2 * s2),
            "count": share * ((moments.mid - moments.centre) ** 2 - s2) ** 2 / (s2 * s2),
        }

    def _parts(
        self, groups: Sequence[Group]
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """(n, S, V) per group: plug-in count, centred sum and the clamped variance."""
        g = groups[0]  # one column: every group shares its noises and bounds
        return self._spread(
            g,
            np.array([x.value("count") for x in groups], dtype=np.float64),
            np.array([x.value("sum") for x in groups], dtype=np.float64),
            np.array([x.value("squares") for x in groups], dtype=np.float64),
        )

    def _spread(
        self,
        e: Expected,
        raw: NDArray[np.float64],
        sums: NDArray[np.float64],
        squares: NDArray[np.float64],
    ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
        """:meth:`_parts` from the noisy count, sum and sum of squares as doubles (elementwise:
        a group's values do not depend on the others')."""
        sm, qm = e.noise("sum"), e.noise("squares")
        n = np.maximum(raw, float(self.ddof + 1))
        d = n - self.ddof
        s = float(sm.step) * sums
        q = qm.square_unit * (squares + qm.limit * raw)
        v = np.clip((q - s * s / n) / d, 0.0, (e.upper - e.lower) ** 2 / 4 * n / d)
        return n, s, v

    def estimate(self, g: Group) -> float:
        _, _, v = self._parts([g])
        return math.sqrt(float(v[0])) if self.root else float(v[0])

    def estimates(
        self,
        model: ColumnModel,
        columns: Mapping[str, NDArray[np.int64]],
        noise: Mapping[str, NoiseModel],
    ) -> list[float] | None:
        """:meth:`estimate` for every group: :meth:`_spread` of the whole columns (the same
        elementwise operations; each noisy integer rounded to a double as one group's is)."""
        names = [model.reads(role) for role in ("count", "sum", "squares")]
        if any(name is None or noise[name].strata for name in names):
            return None  # (a stratified sum: each group's own bin, group by group)
        raw, sums, squares = (columns[name].astype(np.float64) for name in names if name)
        _, _, v = self._spread(Expected(model, noise), raw, sums, squares)
        values: list[float] = v.tolist()
        return [math.sqrt(x) for x in values] if self.root else values

    def halfwidth(self, g: Group, value: float, level: float) -> float:
        bar = self.halfwidths([g], [value], level)[0]
        assert bar is not None
        return bar

    def halfwidths(
        self, groups: Sequence[Group], values: Sequence[float], level: float
    ) -> list[float | None]:
        if not groups:
            return []
        g = groups[0]
        sm, qm, cm = g.noise("sum"), g.noise("squares"), g.noise("count")
        n, s, v = self._parts(groups)
        d = n - self.ddof
        step = float(sm.step)
        width = float(qm.step) * qm.limit
        hv = variance_halfwidths(
            qm,
            sm,
            cm,
            a_q=qm.square_unit / d,
            a_s=-2 * s / (n * d) * step,
            a_n=(width * width / 2 + s * s / (n * n) - v) / d,
            # second order: with the plug-in Ŝ the error also holds +(step·Z_S)²/(n·d) ≥ 0,
            # added at the sum noise's own quantile
            second=step * step / (n * d),
            level=level,
        )
        bars = stddev_halfwidths(v, hv) if self.root else hv
        return [float(b) for b in bars]

    def expected(self, e: Expected, level: float) -> str:
        return "≈ ± (noise of the sums of squares, sums and count) / n"


@register
class Variance(Spread):
    name = "variance"
    rank = 4
    sql = ("VARIANCE", "VAR_SAMP")
    sql_nodes = (exp.Variance,)
