"""Released values and their error bars, computed from noisy measurements only.

Everything here is post-processing (Dwork & Roth 2014, Prop. 2.1): it reads the noisy integer
statistics of a group and public parameters (bounds, noise scales), never private data.

Estimators (n̂ noisy count, Ŝ noisy centred sum, Q̂ noisy centred sum of squares, c centre):

- COUNT = max(0, n̂); COUNT(DISTINCT unit) = max(0, û);
- SUM = step·Ŝ + c·n̂, clamped to [min(0, lower)·n⁺, max(0, upper)·n⁺];
- AVG = clamp(c + step·Ŝ / max(n̂, 1), lower, upper) (centred noisy sum over noisy count);
- VARIANCE = clamp((Q − S²/n)/(n − 1), 0, (upper − lower)²/4 · n/(n − 1)) with n = max(n̂, 2),
  S = step·Ŝ, Q = Σ(x − c)² recovered from Q̂; STDDEV = sqrt(VARIANCE);
- quantiles: the candidate the exponential mechanism chose.

Error bars are half-widths ``t`` at a confidence level, for the noise only (not the bias of
clamping values to the bounds or of contribution bounding), computed from released values and
public parameters only (post-processing):

- COUNT, COUNT(DISTINCT): the exact discrete quantile of the one noise: P(|noise| ≤ t) ≥ level.
- SUM: its noise is step·Z_S + c·Z_N (independent discrete noises); ``t`` is the quantile of
  that combination (:func:`veil.noise.errorbars.combination_halfwidth`: P ≥ level, within
  0.1 % of an sd of the exact quantile). Exact coverage of the noise; the final clamp to
  [min(0, lower)·n̂⁺, max(0, upper)·n̂⁺] is post-processing the bar does not model.
- AVG: before clamping, released − true = (step·Z_S − m·Z_N)/n̂ *exactly*, with n̂ the released
  noisy count and m = true mean − c. With t(m) the quantile of |step·Z_S − m·Z_N| (which grows
  with |m|: Anderson 1955, the sum's noise being symmetric unimodal), the bar is t(|m̂| + u)/n̂
  for a u ≥ t(|m̂| + u)/n̂ (m̂ the unclamped released mean − c, found by iteration). On the
  event |step·Z_S − m·Z_N| ≤ t(m) (probability ≥ level) the error is at most t(m)/n̂, so
  |m̂ − m| ≤ t(m)/n̂ and |m| ≤ |m̂| + u (t's slope in |m| is about the count's error bar,
  ≪ n̂), hence the error is ≤ t(|m̂| + u)/n̂: coverage ≥ level with no approximation. Clamping
  to [lower, upper] only moves the value toward the truth. When n̂ < 4 × the count's own
  bar the bar is the whole range upper − lower.
- VARIANCE: the delta method on released values — the first-order error is the linear
  combination a_Q·Z_Q + a_S·Z_S + a_N·Z_N with plug-in coefficients, and ``t`` is its exact
  quantile (as for SUM), plus the one-signed second-order term (step·t_S)²/(n̂(n̂ − 1)) at the
  sum noise's quantile t_S. Approximate: it covers at ``level`` to first order in 1/n̂.
  STDDEV: the variance's interval mapped through sqrt.
- quantiles have none (``None``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from veil.compile.sensitivity import rows_per_group
from veil.errors import InternalError
from veil.noise.errorbars import Term, combination_halfwidth
from veil.plan.nodes import Aggregate, AggregateCall, Measurement

__all__ = ["ColumnModel", "NoiseModel", "column_models", "estimate", "halfwidth", "noise_models"]

Stats = Mapping[str, int]


@dataclass(frozen=True)
class NoiseModel:
    """What error bars need to know about one measurement (JSON-serialisable)."""

    name: str
    statistic: str
    mechanism: str
    scale: Fraction
    centre: Fraction
    step: Fraction
    limit: int

    def halfwidth(self, level: float) -> float:
        """Half-width of the noise at ``level`` in the statistic's integer units."""
        return combination_halfwidth([self.term(1.0)], level)

    def term(self, coefficient: float) -> Term:
        """This noise times ``coefficient``, as a term of a linear combination."""
        if self.mechanism not in ("discrete_laplace", "discrete_gaussian"):
            raise InternalError(f"no error bar for mechanism {self.mechanism!r}")
        return (coefficient, self.mechanism, self.scale)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "statistic": self.statistic,
            "mechanism": self.mechanism,
            "scale": str(self.scale),
            "centre": str(self.centre),
            "step": str(self.step),
            "limit": self.limit,
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> NoiseModel:
        return NoiseModel(
            name=str(d["name"]),
            statistic=str(d["statistic"]),
            mechanism=str(d["mechanism"]),
            scale=Fraction(d["scale"]),
            centre=Fraction(d["centre"]),
            step=Fraction(d["step"]),
            limit=int(d["limit"]),
        )


@dataclass(frozen=True)
class ColumnModel:
    """How one released aggregate column is computed from its row's measurements."""

    alias: str
    function: str
    lower: Fraction | None = None
    upper: Fraction | None = None
    count: str | None = None
    units: str | None = None
    sum: str | None = None
    squares: str | None = None
    quantile: str | None = None

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["lower"] = None if self.lower is None else str(self.lower)
        d["upper"] = None if self.upper is None else str(self.upper)
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> ColumnModel:
        return ColumnModel(
            alias=str(d["alias"]),
            function=str(d["function"]),
            lower=None if d.get("lower") is None else Fraction(d["lower"]),
            upper=None if d.get("upper") is None else Fraction(d["upper"]),
            count=d.get("count"),
            units=d.get("units"),
            sum=d.get("sum"),
            squares=d.get("squares"),
            quantile=d.get("quantile"),
        )


def noise_models(agg: Aggregate) -> dict[str, NoiseModel]:
    return {
        m.name: NoiseModel(m.name, m.statistic, m.mechanism, m.scale, m.centre, m.step, m.limit)
        for m in agg.measurements
    }


def _find(ms: tuple[Measurement, ...], statistic: str, column: str | None) -> str | None:
    for m in ms:
        if m.statistic == statistic and (column is None or m.column == column):
            return m.name
    return None


def column_models(agg: Aggregate) -> tuple[ColumnModel, ...]:
    """One model per aggregate of ``agg`` (compiled), naming the measurements it reads."""
    ms = agg.measurements
    out: list[ColumnModel] = []
    for a in agg.aggregates:
        out.append(_model(agg, a, ms))
    return tuple(out)


def _model(agg: Aggregate, a: AggregateCall, ms: tuple[Measurement, ...]) -> ColumnModel:
    if a.function == "count":
        return ColumnModel(a.alias, "count", count=_find(ms, "count", None))
    if a.function == "count_distinct":
        units = _find(ms, "count_units", None)
        if units is None and rows_per_group(agg) == 1:
            units = _find(ms, "count", None)  # one row per (unit, group): rows are units
        return ColumnModel(a.alias, "count_distinct", units=units)
    b = agg.bounds_of(a.column or "")
    if b is None:
        raise InternalError(f"no bounds for {a.column!r} after compiling")
    if a.function in ("quantile", "min", "max"):
        name = f"quantile({a.column}, {a.q})"
        return ColumnModel(a.alias, "quantile", b.lower, b.upper, quantile=name)
    return ColumnModel(
        a.alias,
        a.function,
        b.lower,
        b.upper,
        count=_find(ms, "count", None),
        sum=_find(ms, "sum", a.column),
        squares=_find(ms, "sum_squares", a.column)
        if a.function in ("variance", "stddev")
        else None,
    )


def _clamp(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def _variance_parts(
    col: ColumnModel, stats: Stats, models: Mapping[str, NoiseModel]
) -> tuple[float, float, float, float]:
    """(n, S, Q, v): plug-in count, centred sum, centred sum of squares, clamped variance."""
    if col.sum is None or col.squares is None or col.count is None:
        raise InternalError(f"variance {col.alias!r} lacks a measurement")
    sm, qm = models[col.sum], models[col.squares]
    n = max(float(stats[col.count]), 2.0)
    s = float(sm.step) * stats[col.sum]
    width = float(qm.step) * qm.limit
    q = width * width / (2 * qm.limit) * (stats[col.squares] + qm.limit * float(stats[col.count]))
    v = (q - s * s / n) / (n - 1)
    lo, hi = float(col.lower or 0), float(col.upper or 0)
    v = _clamp(v, 0.0, (hi - lo) ** 2 / 4 * n / (n - 1))
    return n, s, q, v


def estimate(col: ColumnModel, stats: Stats, models: Mapping[str, NoiseModel]) -> int | float:
    """The released value of ``col`` for one group (see the module docstring)."""
    f = col.function
    if f == "count":
        return max(0, int(stats[col.count or ""]))
    if f == "count_distinct":
        return max(0, int(stats[col.units or ""]))
    lo, hi = float(col.lower or 0), float(col.upper or 0)
    if f == "quantile":
        qm = models[col.quantile or ""]
        return float(qm.centre + qm.step * stats[col.quantile or ""])
    if col.sum is None:
        raise InternalError(f"{col.alias!r} has no sum measurement")
    sm = models[col.sum]
    s = float(sm.step * stats[col.sum])
    c = float(sm.centre)
    n = float(stats[col.count]) if col.count is not None else 0.0
    if f == "sum":
        total = s + c * n
        n_pos = max(n, 0.0)
        if col.count is None:
            return total if lo < 0 < hi else (max(total, 0.0) if lo >= 0 else min(total, 0.0))
        return _clamp(total, min(0.0, lo) * n_pos, max(0.0, hi) * n_pos)
    if f == "avg":
        return _clamp(c + s / max(n, 1.0), lo, hi)
    _, _, _, v = _variance_parts(col, stats, models)
    if f == "variance":
        return v
    if f == "stddev":
        return math.sqrt(v)
    raise InternalError(f"no estimator for {f!r}")


def halfwidth(
    col: ColumnModel,
    stats: Stats,
    value: float,
    models: Mapping[str, NoiseModel],
    level: float,
) -> float | None:
    """The error-bar half-width of ``col``'s released ``value`` at ``level`` (None: none)."""
    f = col.function
    if f == "quantile":
        return None
    if f in ("count", "count_distinct"):
        name = (col.count if f == "count" else col.units) or ""
        return models[name].halfwidth(level)
    if col.sum is None:
        return None
    sm = models[col.sum]
    c = float(sm.centre)
    step = float(sm.step)
    cm = models[col.count] if col.count is not None else None
    if f == "sum":
        terms = [sm.term(step)] if cm is None else [sm.term(step), cm.term(c)]
        return combination_halfwidth(terms, level)
    if cm is None or col.count is None:
        raise InternalError(f"{col.alias!r} has no count measurement")
    if f == "avg":
        return _avg_halfwidth(col, sm, cm, float(stats[col.count]), stats[col.sum], level)
    n, s, _q, v = _variance_parts(col, stats, models)
    qm = models[col.squares or ""]
    width = float(qm.step) * qm.limit
    a_q = width * width / (2 * qm.limit) / (n - 1)
    a_s = -2 * s / (n * (n - 1)) * step
    a_n = (width * width / 2 + s * s / (n * n) - v) / (n - 1)
    hv = combination_halfwidth([qm.term(a_q), sm.term(a_s), cm.term(a_n)], level)
    # second order: with the plug-in Ŝ the error also holds +(step·Z_S)²/(n(n − 1)) ≥ 0;
    # add it at the sum noise's own quantile
    hv += (step * sm.halfwidth(level)) ** 2 / (n * (n - 1))
    if f == "variance":
        return hv
    sd = math.sqrt(v)
    return max(sd - math.sqrt(max(v - hv, 0.0)), math.sqrt(v + hv) - sd)


def _avg_halfwidth(
    col: ColumnModel, sm: NoiseModel, cm: NoiseModel, n: float, s_units: int, level: float
) -> float:
    """The AVG bar of the module docstring: t(|m̂| + u)/n̂ with u ≥ t(|m̂| + u)/n̂."""
    lo, hi = float(col.lower or 0), float(col.upper or 0)
    full = hi - lo
    if n < 1 or n < 4 * cm.halfwidth(level):
        return full
    m_hat = abs(float(sm.step) * s_units / n)
    grain = max(abs(lo - float(sm.centre)), abs(hi - float(sm.centre))) / 1000 or 1.0

    def t(m: float) -> float:
        # |m| rounded up to a multiple of a thousandth of the bounds' reach: t only grows with
        # |m|, so this stays a valid bar (and repeats hit the cache of the combination)
        up = math.ceil(m / grain) * grain
        return combination_halfwidth([sm.term(float(sm.step)), cm.term(up)], level) / n

    u = t(m_hat)
    for _ in range(20):
        bar = t(m_hat + u)
        if bar <= u:
            return min(bar, full)
        u = bar * 1.001
    return full
