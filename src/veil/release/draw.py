"""From exact statistics to a release, in two stages with a cache between them.

- :func:`measure` is the differentially private part: it adds noise to every group's exact
  statistics, runs partition selection and the quantile choices. Its output, :class:`Measured`
  — the released groups and their noisy integer statistics — is what the ledger charges for and
  caches, keyed by the *measurement's* fingerprint
  (``veil.plan.canonical.measurement_fingerprint``).
- :func:`finish` is post-processing of a :class:`Measured` and public parameters only: the
  estimators, consistent counts, key labels, HAVING / ORDER BY / LIMIT and the SELECT order. A
  query that differs from a cached one only there (or in its aliases, or ``consistent=``) is
  answered from the cache at no cost — post-processing of a released measurement is free
  (Dwork & Roth 2014, Prop. 2.1).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from veil.accounting.budget import Budget
from veil.aggregates import kind
from veil.aggregates.base import ColumnModel, Expected, NoiseModel, measurement_name, stratum_name
from veil.compile.statistics import thresholded
from veil.errors import InternalError
from veil.noise.families import family
from veil.plan.nodes import Aggregate, KeyValue, Measurement, Plan
from veil.random import RandomSource, read_ahead
from veil.release.consistency import consistent_counts
from veil.release.estimators import column_models, estimate, noise_models
from veil.release.exact import ExactStats
from veil.release.explain import describe_usage
from veil.release.keys import decode_key, released_key
from veil.release.measured import Column, Key, Measured, pylist
from veil.release.modes import choose_mode, choose_top
from veil.release.post import post_process_columns
from veil.release.quantile_groups import choose_quantiles
from veil.release.quantiles import Cells, choose_quantile
from veil.release.result import Columns, Lazy, Result, Usage

__all__ = [
    "Cells", "Early", "Measured", "draw_early", "early_draws", "finish", "measure", "recentre"
]  # fmt: skip

_NO_CELLS: Cells = ((), ())


def _public_keys(agg: Aggregate) -> list[Key]:
    """Every key of a fully public key space, as the index each key is identified by."""
    spaces = [range(len(k.labels())) for k in agg.keys]
    return [tuple(p) for p in itertools.product(*spaces)]


Early = Mapping[str, NDArray[np.int64]]
"""Additive noise drawn before the engine answered (:func:`draw_early`): per measurement's
name, one draw per group in :func:`measure`'s visiting order."""


def _noise(
    m: Measurement, size: int, source: RandomSource, early: Early | None = None
) -> list[int]:
    """``size`` draws of measurement ``m``'s additive noise (its family's sampler), or the
    ones drawn early for it."""
    if early is not None:
        return [int(z) for z in early[m.name]]
    return family(m.mechanism).sample(m.scale, size, source)


def early_draws(agg: Aggregate) -> list[tuple[Measurement, int]] | None:
    """The additive draws :func:`measure` makes for ``agg`` before any other, when neither
    their number nor their order depends on the data: every key public (each key of the
    product is visited, in product order; no selection) and no stratified sum (whose draws
    are made bin by bin). None otherwise."""
    if not agg.public_keys or any(m.strata for m in agg.measurements):
        return None
    size = math.prod(len(k.labels()) for k in agg.keys)
    return [(m, size) for m in agg.measurements if m.statistic not in ("quantile", "mode")]


def draw_early(agg: Aggregate, source: RandomSource) -> Early | None:
    """The additive noise :func:`measure` will add for ``agg``, drawn before the engine has
    answered — or None when the draws depend on the data (:func:`early_draws`).

    Contract: ``measure(agg, exact, counts, source, early=draw_early(agg, source))`` releases
    exactly what ``measure(agg, exact, counts, source)`` releases from the same ``source``:
    these are the very draws ``measure`` makes first, in its order, and it then draws the
    rest (the quantile and mode choices) from ``source`` as before. The noise does not depend
    on the data, so drawing it while the engine reads (``Session.run`` does, on another
    thread) changes no output, only when the work is done."""
    draws = early_draws(agg)
    if draws is None:
        return None
    return {m.name: family(m.mechanism).sample_array(m.scale, n, source) for m, n in draws}


def recentre(agg: Aggregate, noisy: dict[Key, dict[str, int]]) -> None:
    """Re-centre, in place, each group's exact sums that are stratified by their own bins
    (``veil.compile.strata``) on the group's bin: minus shift × the group's exact row count
    (the same rows), and record the group's bin index. Total: integer arithmetic on what the
    engine returned; a group's bin is its key's index (public)."""
    for m in agg.measurements:
        if not m.strata:
            continue
        key = m.stratum_key if m.stratum_key is not None else 0
        for k, stats in noisy.items():
            i = k[key]
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(m.strata):
                raise InternalError(f"group key {k!r} is not a bin of {m.name!r}")
            stats[m.name] -= m.strata[i].shift * int(stats.get(measurement_name("count"), 0))
            stats[stratum_name(m.name)] = i


def _stratified(
    m: Measurement, keys: list[Key], noisy: dict[Key, dict[str, int]], source: RandomSource
) -> None:
    """Noise for a stratified sum: each group's at its own bin's scale (the groups of a bin
    in key order, the bins in order)."""
    by_bin: dict[int, list[Key]] = {}
    for k in keys:
        by_bin.setdefault(noisy[k][stratum_name(m.name)], []).append(k)
    for i, members in sorted(by_bin.items()):
        draws = family(m.mechanism).sample(m.strata[i].scale, len(members), source)
        for k, z in zip(members, draws, strict=True):
            noisy[k][m.name] += z


def measure(
    agg: Aggregate,
    exact: Mapping[Key, Mapping[str, int]],
    counts: Mapping[str, Mapping[Key, Cells]],
    source: RandomSource,
    *,
    private: bool = True,
    early: Early | None = None,
) -> Measured:
    """Noise, partition selection and quantile choices over the exact statistics.

    Contract: every public key is released (empty groups with zero statistics); unknown keys
    are visited in an order that depends on the keys alone and released iff their noisy count
    reaches the selection threshold; each measurement's noise is drawn once per visited group
    from ``source`` with the compiled scale, and each quantile is chosen by the exponential
    mechanism over the group's exact bucket counts.

    The same draws, in the same order, from the same ``source``, whether ``exact`` is a
    mapping or the engine's columns (:class:`veil.release.exact.ExactStats`, read in bulk:
    noise added to whole arrays, the threshold compared on integers, and only the released
    groups' keys and statistics converted to Python).

    ``early``: the additive noise :func:`draw_early` drew for ``agg`` from ``source`` (then
    not drawn again); the same release as without it.
    """
    if early is not None:
        draws = early_draws(agg)
        if draws is None or any(m.name not in early or len(early[m.name]) != n for m, n in draws):
            raise InternalError("the noise drawn early is not the draws this measurement makes")
    if isinstance(exact, ExactStats) and not any(m.strata for m in agg.measurements):
        bulk = _bulk(agg, exact, source, early)
        if bulk is not None:
            size, key_columns, by_name = bulk
            if any(m.statistic in ("quantile", "mode") for m in agg.measurements):
                released: list[Key] = (
                    list(zip(*(pylist(c) for c in key_columns), strict=True))
                    if key_columns
                    else [()] * size
                )
                by_name.update(_choices(agg, released, counts, source))
            return Measured.of_columns(size, key_columns, by_name, private)
    keys = _public_keys(agg) if agg.public_keys else sorted(exact, key=repr)
    names = [m.name for m in agg.measurements if m.statistic not in ("quantile", "mode")]
    zero = dict.fromkeys(names, 0)
    noisy: dict[Key, dict[str, int]] = {k: dict(exact.get(k, zero)) for k in keys}
    recentre(agg, noisy)
    for m in agg.measurements:
        if m.statistic in ("quantile", "mode"):
            continue
        if m.strata:
            _stratified(m, keys, noisy, source)
            continue
        for k, z in zip(keys, _noise(m, len(keys), source, early), strict=True):
            noisy[k][m.name] += z
    if agg.selection is not None:
        chosen = thresholded(agg.measurements)
        if chosen is None:
            raise InternalError("partition selection without a noisy count")
        keys = [k for k in keys if noisy[k][chosen.name] >= agg.selection.threshold]
    rows = [noisy[k] for k in keys]
    for name, picks in _choices(agg, keys, counts, source).items():
        for stats, pick in zip(rows, picks, strict=True):
            stats[name] = pick
    return Measured(tuple(zip(keys, rows, strict=True)), private)


def _choices(
    agg: Aggregate,
    keys: list[Key],
    counts: Mapping[str, Mapping[Key, Cells]],
    source: RandomSource,
) -> dict[str, list[int]]:
    """The quantile and mode choices of the released groups ``keys``, one list per choice
    measurement (in measurement order, each group in release order: the draws' order)."""
    out: dict[str, list[int]] = {}
    source = read_ahead(source)  # the system source: a few system calls for every group's draws
    for m in agg.measurements:
        if m.statistic not in ("quantile", "mode"):
            continue
        choose = choose_mode if m.statistic == "mode" else choose_quantile
        if m.picks > 1:
            choose = choose_top
        per_key = counts.get(m.name, {})
        if choose is choose_quantile:  # the groups' windows and classes found together
            cells = [per_key.get(k, _NO_CELLS) for k in keys]
            out[m.name] = choose_quantiles(m, cells, source=source)
        else:
            out[m.name] = [choose(m, *per_key.get(k, _NO_CELLS), source=source) for k in keys]
    return out


_INT64_LIMIT = 1 << 63


def _add(values: NDArray[Any], noise: NDArray[np.int64]) -> NDArray[Any]:
    """values + noise, exactly: in int64 when no sum can leave its range, else as Python
    ints (an object array)."""
    if values.dtype == np.int64 and noise.size:
        top = max(abs(int(values.min())), abs(int(values.max())))
        if top + max(abs(int(noise.min())), abs(int(noise.max()))) < _INT64_LIMIT:
            out: NDArray[Any] = values + noise
            return out
    wide: NDArray[Any] = values.astype(object) + noise.astype(object)
    return wide


def _bulk(
    agg: Aggregate, exact: ExactStats, source: RandomSource, early: Early | None = None
) -> tuple[int, list[Column], dict[str, Column]] | None:
    """:func:`measure`'s noise and selection over the engine's columns, visiting the groups
    in the same order as the mapping path (product order of public keys, else ``repr`` order
    of the keys) and drawing the same noise; None when ``exact`` has no bulk order (the
    mapping path then runs). Returns the number of released groups, their key columns (a
    public key's indices as an int64 array) and their noisy statistics' columns (int64
    arrays, or object arrays of Python ints). Contract as :func:`measure`'s: every threshold
    comparison is between exact integers."""
    measured = [m.name for m in agg.measurements if m.statistic not in ("quantile", "mode")]
    names = [*exact.stats, *(n for n in measured if n not in exact.stats)]
    if agg.public_keys:
        if exact.positions is None:
            return None
        size = math.prod(len(k.labels()) for k in agg.keys)
        columns: dict[str, NDArray[Any]] = {}
        for name in names:
            values = exact.stats.get(name)
            column = np.zeros(size, dtype=np.int64 if values is None else values.dtype)
            if values is not None:
                column[exact.positions] = values
            columns[name] = column
    else:
        if exact.order is None:
            return None
        order = exact.order
        size = order.size
        zero = np.zeros(size, dtype=np.int64)
        columns = {n: exact.stats[n][order] if n in exact.stats else zero for n in names}
    # columns: one exact (then noisy) integer per visited group, in visiting order
    for m in agg.measurements:
        if m.statistic in ("quantile", "mode"):
            continue
        noise = (
            early[m.name]
            if early is not None
            else family(m.mechanism).sample_array(m.scale, size, source)
        )
        columns[m.name] = _add(columns[m.name], noise)
    if agg.selection is not None:
        chosen = thresholded(agg.measurements)
        if chosen is None:
            raise InternalError("partition selection without a noisy count")
        counted = columns[chosen.name]
        threshold = int(agg.selection.threshold)
        if counted.dtype == np.int64 and not -_INT64_LIMIT <= threshold < _INT64_LIMIT:
            counted = counted.astype(object)  # an exact comparison with a huge threshold
        kept = np.flatnonzero(counted >= threshold)
    else:
        kept = np.arange(size, dtype=np.int64)
    every = kept.size == size
    key_columns: list[Column]
    if agg.public_keys:  # the product order: the last key varies fastest (C order)
        shape = tuple(len(k.labels()) for k in agg.keys)
        key_columns = list(np.unravel_index(kept, shape)) if shape else []
    else:
        released = exact.keys_at(order[kept])
        key_columns = [[k[j] for k in released] for j in range(len(agg.keys))]
    # columns: one noisy integer per released group, in release order
    stats: dict[str, Column] = {n: columns[n] if every else columns[n][kept] for n in names}
    return int(kept.size), key_columns, stats


def finish(
    plan: Plan,
    agg: Aggregate,
    measured: Measured,
    fingerprint: str,
    *,
    consistent: bool = False,
    cached: bool = False,
) -> Result:
    """The Result of ``plan`` from its aggregation's measurement (post-processing only).

    ``consistent``: released counts are projected to non-negative integers that add up to the
    noisy grand total (``veil.release.consistency``) instead of being clamped one by one.
    ``cached``: the measurement came from the ledger's cache, so the result cost nothing.
    """
    models = column_models(agg)
    noise_by_name = noise_models(agg)
    table = _value_columns(models, measured, noise_by_name)
    if consistent:
        for j, c in enumerate(models):
            role = kind(c.function).consistent
            name = c.reads(role) if role is not None else None
            if name is not None:
                table[j] = list(consistent_counts([s[name] for _, s in measured.groups]))
    # columns: the aggregation's released values, one list per output column, in group order
    names = [f.name for f in agg.schema()]
    columns, kept, values = post_process_columns(
        plan, names, [*_key_columns(agg, measured), *table], measured.size
    )
    types = {f.name: f.type for f in plan.schema()}
    return Result(
        columns=tuple(columns),
        types=tuple(types[c] for c in columns),
        values=Columns(values, len(kept)),
        cost=Budget.zero(agg.budget.kind if agg.budget else "pure")
        if cached
        else agg.budget or Budget(epsilon=0),
        usage=_Usage(agg),
        fingerprint=fingerprint,
        cached=cached,
        stats=_Picked(measured, kept),
        models={c.alias: c for c in models},
        noise={n.name: n for n in noise_by_name.values() if family(n.mechanism).additive},
        private=measured.private,
        charged=agg.budget,
        notes=_selection_notes(models, noise_by_name),
    )


class _Usage(Lazy[Usage]):
    """What each part of the charged budget pays for (:func:`describe_usage`: one part per
    measurement, and partition selection's), written when first read — public parameters
    only, so a query whose usage nobody reads does not write it."""

    def __init__(self, agg: Aggregate) -> None:
        super().__init__(len(agg.measurements) + (agg.selection is not None))
        self._agg = agg

    def _build(self) -> tuple[Usage, ...]:
        return describe_usage(self._agg)


class _Picked(Lazy[Mapping[str, int]]):
    """The statistics of a measurement's groups at ``kept`` (a released row's statistics),
    as per-group mappings built when first read (the error bars read them)."""

    def __init__(self, measured: Measured, kept: Sequence[int]) -> None:
        super().__init__(len(kept))
        self._measured = measured
        self._kept = kept

    def _build(self) -> tuple[Mapping[str, int], ...]:
        groups = self._measured.groups
        return tuple(groups[i][1] for i in self._kept)


def _value_columns(
    models: tuple[ColumnModel, ...],
    measured: Measured,
    noise: Mapping[str, NoiseModel],
) -> list[list[Any]]:
    """Each column's released values, in group order: by its kind's bulk estimate where it
    has one (equal to the per-group estimate, ``AggregateKind.estimates``), else group by
    group. Post-processing of the noisy integers only."""
    arrays: dict[str, NDArray[np.int64]] = {}
    if measured.size:
        try:
            for name, column in measured.stats.items():
                if isinstance(column, np.ndarray) and column.dtype == np.int64:
                    arrays[name] = column
                else:  # a list (from the cache), or Python ints beyond 64 bits
                    arrays[name] = np.array(column, dtype=np.int64)
        except (OverflowError, TypeError, ValueError):
            arrays = {}  # a statistic beyond 64 bits (or a group without it): group by group
    out: list[list[Any]] = []
    for c in models:
        bulk = kind(c.function).estimates(c, arrays, noise) if arrays else None
        if bulk is None:
            bulk = [estimate(c, stats, noise) for _, stats in measured.groups]
        out.append(bulk)
    return out


def _key_columns(agg: Aggregate, measured: Measured) -> list[list[KeyValue]]:
    """Each group key's released values, in group order (:func:`released_key`, a column at
    a time: a public key's index looked up in its labels, every other key decoded)."""
    out: list[list[KeyValue]] = []
    for j, k in enumerate(agg.keys):
        column = measured.keys[j]
        if not k.is_public:
            kind_of = agg.child.field(k.column).type
            out.append([decode_key(kind_of, v) for v in pylist(column)])
            continue
        labels = k.labels()
        if isinstance(column, np.ndarray) and column.dtype == np.int64:
            if column.size and not 0 <= int(column.min()) <= int(column.max()) < len(labels):
                raise InternalError("the index of a public key is outside its labels")
            if len(agg.keys) == 1 and _every(column, len(labels)):
                out.append(list(labels))
            else:
                out.append([labels[v] for v in column.tolist()])
            continue
        values = pylist(column)
        indices = [v for v in values if type(v) is int]
        if len(indices) == len(values):
            if indices and not 0 <= min(indices) <= max(indices) < len(labels):
                raise InternalError("the index of a public key is outside its labels")
            out.append([labels[v] for v in indices])
        else:  # a NULL bin, or an index of the wrong type (refused there)
            out.append([released_key(agg, key)[j] for key, _ in measured.groups])
    return out


def _every(indices: NDArray[np.int64], size: int) -> bool:
    """Whether ``indices`` are 0, 1, …, size − 1 (every key of a public key, in order)."""
    return indices.size == size and (size == 0 or bool((indices == np.arange(size)).all()))


def _selection_notes(
    models: tuple[ColumnModel, ...], noise: Mapping[str, NoiseModel]
) -> tuple[str, ...]:
    """What a released MODE says about itself — its public margin at 95 % — and a MIN or MAX
    the rank it estimates (the same words as ``explain``; no released value is read)."""
    return tuple(
        f"{c.alias}: {kind(c.function).expected(Expected(c, noise), 0.95)}"
        for c in models
        if c.function in ("mode", "top_k", "min", "max")
    )
