"""Released values and their error bars, computed from noisy measurements only.

Everything here is post-processing (Dwork & Roth 2014, Prop. 2.1): it reads the noisy integer
statistics of a group and public parameters (bounds, noise scales), never private data. What
each aggregate releases, and its error bar, is its kind's (one file per kind in
``veil.aggregates``, whose docstrings give each estimator and the coverage of its bar); this
module maps a compiled aggregation's calls onto the measurements they read and asks the kinds.

Error bars are half-widths ``t`` at a confidence level, for the noise only (not the bias of
clamping values to the bounds or of contribution bounding).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from fractions import Fraction

from veil.aggregates import kind
from veil.aggregates.base import ColumnModel, Group, NoiseModel, Read, measurement_name
from veil.compile.statistics import rows_per_group
from veil.errors import InternalError
from veil.plan.nodes import Aggregate, AggregateCall

__all__ = [
    "ColumnModel",
    "NoiseModel",
    "check_models",
    "column_models",
    "estimate",
    "halfwidth",
    "noise_models",
]

Stats = Mapping[str, int]


def noise_models(agg: Aggregate) -> dict[str, NoiseModel]:
    return {
        m.name: NoiseModel(
            m.name,
            m.statistic,
            m.mechanism,
            m.scale,
            m.centre,
            m.step,
            m.limit,
            # a stratified sum: each bin's own noise about its own centre, and its bounds
            strata=tuple(
                NoiseModel(
                    m.name,
                    m.statistic,
                    m.mechanism,
                    s.scale,
                    s.centre,
                    m.step,
                    s.limit,
                    lower=s.lower,
                    upper=s.upper,
                )
                for s in m.strata
            ),
        )
        for m in agg.measurements
    }


_MODELS: dict[int, tuple[Aggregate, tuple[ColumnModel, ...]]] = {}
_MODELS_HELD = 16
_MODELS_LOCK = threading.Lock()


def column_models(agg: Aggregate) -> tuple[ColumnModel, ...]:
    """One model per aggregate of ``agg`` (compiled), naming the measurements it reads.

    Remembered for the last few aggregations by identity (a query's compiling, release and
    usage read the same aggregation's models; an aggregation is immutable, and is held with
    its models so that its id names no other)."""
    held = _MODELS.get(id(agg))
    if held is not None and held[0] is agg:
        return held[1]
    names = {m.name for m in agg.measurements}
    models = tuple(_model(agg, a, names) for a in agg.aggregates)
    with _MODELS_LOCK:
        _MODELS[id(agg)] = (agg, models)
        while len(_MODELS) > _MODELS_HELD:
            _MODELS.pop(next(iter(_MODELS)))
    return models


def _name(read: Read, a: AggregateCall) -> str:
    # a weighted call's sums are of its products (its weights for a weighted count), and its
    # total (role "total") that of its weights
    column = a.weights if read.role == "total" else a.value_column
    if read.statistic in ("count", "count_units"):
        column = None
    q = a.q if read.statistic == "quantile" else None
    if a.top is not None:
        q = Fraction(a.top[1])
    return measurement_name(read.statistic, column, q)


def _model(agg: Aggregate, a: AggregateCall, measured: set[str]) -> ColumnModel:
    k = a.kind
    roles: dict[str, str | None] = {}
    for read in k.reads(a.call(rows_per_group(agg))):
        name = _name(read, a)
        # a read the compiler proved unneeded (the count of a sum centred at 0) is absent
        roles[read.role] = name if name in measured else None
    lower = upper = None
    if a.needs_bounds:
        # a weighted mean lies in its column's bounds; a weighted sum or count in its sums'
        bounded = a.column if k.weighted == "mean" else a.value_column
        b = agg.bounds_of(bounded or "")
        if b is None:
            raise InternalError(f"no bounds for {bounded!r} after compiling")
        lower, upper = b.lower, b.upper
    return ColumnModel(
        a.alias,
        a.function,
        lower,
        upper,
        count=roles.get("count"),
        units=roles.get("units"),
        sum=roles.get("sum"),
        squares=roles.get("squares"),
        quantile=roles.get("quantile"),
        mode=roles.get("mode"),
        labels=a.domain,
        rank=None if a.top is None else a.top[0],
        picks=None if a.top is None else a.top[1],
        total=roles.get("total"),
    )


def check_models(agg: Aggregate, models: tuple[ColumnModel, ...]) -> None:
    """``InternalError`` unless every role a kind needs was measured (checked at compile time,
    before anything is charged)."""
    for a, model in zip(agg.aggregates, models, strict=True):
        for read in a.kind.reads(a.call(rows_per_group(agg))):
            if model.reads(read.role) is None and not read.optional:
                raise InternalError(f"{a.alias!r} reads {read.statistic}, which is not measured")


def estimate(col: ColumnModel, stats: Stats, models: Mapping[str, NoiseModel]) -> int | float:
    """The released value of ``col`` for one group (its kind's estimate)."""
    return kind(col.function).estimate(Group(col, stats, models))


def halfwidth(
    col: ColumnModel,
    stats: Stats,
    value: float,
    models: Mapping[str, NoiseModel],
    level: float,
) -> float | None:
    """The error-bar half-width of ``col``'s released ``value`` at ``level`` (None: none)."""
    return kind(col.function).halfwidth(Group(col, stats, models), value, level)
