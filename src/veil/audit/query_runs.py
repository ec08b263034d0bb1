"""One query on one dataset through veil's real path, then many releases from its statistics.

NOT differentially private: a data-owner tool (see :mod:`veil.audit.query`).

:func:`run` opens a :class:`veil.Session` on the dataset (DuckDB, an in-memory
:class:`~veil.accounting.scratch.ScratchLedger` granted exactly the query's cost: no real
ledger is read or written) and asks it the query as an analyst would — parse, compile, the
free checks, reserve, lower, engine, exact statistics, noise, post-processing, commit. The
session's two seams (``Session._salt`` and ``Session._measure``) give every dataset of one audit
the same bounding salt (neighbours are compared under the same secret order, as the guarantee
is stated) and hand back the exact statistics the noise was added to. The outcome —
released, refused before the charge, failed after it — and its message are recorded.

:func:`releases` then draws fresh releases from those exact statistics through veil's own
release stage: :func:`veil.release.draw.measure` (noise, partition selection, quantile choice)
with the operating system's CSPRNG, then :func:`veil.release.draw.finish` (estimators,
HAVING / ORDER BY / LIMIT, the Result and its error bars) — the same two calls the session
makes, so each release is distributed exactly as a fresh run of the query would be.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from veil.accounting.budget import Budget
from veil.accounting.scratch import ScratchLedger
from veil.aggregates.base import stratum_name
from veil.compile.statistics import thresholded
from veil.errors import InternalError, InvalidArgumentError, QueryFailedError, VeilError
from veil.plan.canonical import measurement_fingerprint
from veil.plan.nodes import Aggregate, KeyValue, Measurement, Plan
from veil.random import RandomSource, system_source
from veil.release.draw import Cells, Early, Measured, finish, measure, recentre
from veil.release.quantiles import score_change
from veil.release.result import Result
from veil.session import Session

__all__ = [
    "Cell",
    "Outcome",
    "Run",
    "cells_of",
    "changes",
    "finite",
    "noiseless",
    "releases",
    "run",
]

Key = tuple[KeyValue, ...]
Exact = Mapping[Key, Mapping[str, int]]
Counts = Mapping[str, Mapping[Key, Cells]]
_NO_CELLS: Cells = ((), ())
Cell = tuple[tuple[Any, ...], str]
"""A released cell: (the group's key values as released, the column)."""
Status = Literal["released", "refused", "failed"]


@dataclass(frozen=True)
class Outcome:
    """What the analyst would see: ``status`` and the error's class and message (if any)."""

    status: Status
    error: str = ""
    message: str = ""

    def describe(self) -> str:
        return self.status if not self.error else f"{self.status}: {self.error}: {self.message}"


@dataclass(frozen=True)
class Run:
    """One run of the query on one dataset: its outcome and, when released, the compiled
    plan, the aggregation and the exact statistics (``exact``, ``counts``) of that run."""

    outcome: Outcome
    compiled: Plan | None = None
    agg: Aggregate | None = None
    exact: Exact = field(default_factory=dict)
    counts: Counts = field(default_factory=dict)
    result: Result | None = None
    advice: tuple[str, ...] = ()  # the warnings veil gave (from the query alone)


class _AuditSession(Session):
    """A session whose bounding salt is the audit's, and which keeps what it measured."""

    audit_salt: int = 0
    seen: dict[str, Any]

    def _salt(self, source: RandomSource) -> int:
        return self.audit_salt

    def _measure(
        self,
        compiled: Plan,
        agg: Aggregate,
        exact: Exact,
        counts: Counts,
        source: RandomSource,
        chosen: RandomSource | None,
        early: Early | None = None,
    ) -> Measured:
        self.seen = {"compiled": compiled, "agg": agg, "exact": exact, "counts": counts}
        return super()._measure(compiled, agg, exact, counts, source, chosen, early)


def run(
    tables: Mapping[str, Any],
    sql: str,
    *,
    salt: int,
    epsilon: Fraction,
    delta: Fraction | None,
    options: Mapping[str, Any],
    schema: Mapping[str, Mapping[str, str]] | None = None,
) -> Run:
    """Ask ``sql`` of ``tables`` as an analyst would (see the module docstring).

    ``options`` are the session's (``privacy_unit``, ``bounds``, ``max_groups``,
    ``max_rows_per_group``, ``quantile_buckets``) and ``salt`` the audit's bounding salt.
    """
    budget = Budget(epsilon=epsilon, delta=delta)
    try:
        session = _AuditSession.local(
            dict(tables), schema=schema, ledger=ScratchLedger(), budget=budget, **options
        )
    except VeilError as exc:
        return Run(Outcome("refused", type(exc).__name__, str(exc)))
    if not isinstance(session, _AuditSession):
        raise InternalError("Session.local did not build the audit's session class")
    session.audit_salt = salt
    try:
        with warnings.catch_warnings(record=True) as caught:  # the query's advice: a note
            warnings.simplefilter("always")
            result = session.sql(sql, epsilon=epsilon, delta=delta)
    except QueryFailedError as exc:
        return Run(Outcome("failed", type(exc).__name__, str(exc)))
    except VeilError as exc:
        return Run(Outcome("refused", type(exc).__name__, str(exc)))
    finally:
        session.close()
    seen = session.seen
    return Run(
        Outcome("released"),
        seen["compiled"],
        seen["agg"],
        seen["exact"],
        seen["counts"],
        result,
        tuple(dict.fromkeys(str(w.message) for w in caught)),
    )


def releases(
    found: Run,
    count: int,
    *,
    step: Callable[[], None] | None = None,
    source: RandomSource | None = None,
) -> Iterator[Result]:
    """``count`` fresh releases from ``found``'s exact statistics (module docstring); each
    draws its noise from the operating system's CSPRNG (``source``: a seeded one, for
    repeatable tests). ``step`` is called after each."""
    if found.agg is None or found.compiled is None:
        raise InvalidArgumentError("only a released run has statistics to draw releases from")
    agg, compiled = found.agg, found.compiled
    fingerprint = measurement_fingerprint(agg)
    for _ in range(count):
        measured = measure(agg, found.exact, found.counts, source or system_source())
        yield finish(compiled, agg, measured, fingerprint)
        if step is not None:
            step()


def noiseless(found: Run) -> Result:
    """The query's answer from the exact statistics without noise, every group present (the
    exact *bounded* value the error bars are about; quantile columns are meaningless)."""
    if found.agg is None or found.compiled is None:
        raise InvalidArgumentError("only a released run has exact statistics")
    agg = found.agg
    names = [m.name for m in agg.measurements]
    stats = {k: {n: int(found.exact[k].get(n, 0)) for n in names} for k in found.exact}
    recentre(agg, stats)  # a stratified sum is released about its bin's centre
    groups = tuple((k, stats[k]) for k in sorted(found.exact, key=repr))
    return finish(found.compiled, agg, Measured(groups), measurement_fingerprint(agg))


def cells_of(result: Result, agg: Aggregate) -> dict[Cell, Any]:
    """Every released cell of ``result``: (group key values, column) → value; the group keys
    are the released key columns (``()`` for a query without GROUP BY)."""
    aliases = {k.alias for k in agg.keys}
    keys = [i for i, c in enumerate(result.columns) if c in aliases]
    out: dict[Cell, Any] = {}
    for row in result.values:
        group = tuple(row[i] for i in keys)
        for i, column in enumerate(result.columns):
            if i not in keys:
                out[(group, column)] = row[i]
    return out


def changes(agg: Aggregate, a: Run, b: Run) -> dict[str, tuple[Fraction, Fraction]]:
    """Per measurement, the change between two runs' exact statistics in the norm its
    sensitivity bounds — Σ|Δ| (discrete Laplace: L1), ΣΔ² (discrete Gaussian: the squared L2
    the measurement stores), max |Δscore| over groups and candidates (quantiles, exponential
    mechanism) — with that sensitivity; and the partition-selection count's largest change
    per group under ``selection``. Contract: on neighbouring datasets under the same salt each
    change is at most its sensitivity (the compiled plan's claim, ``veil.compile.measure``)."""
    out: dict[str, tuple[Fraction, Fraction]] = {}
    for m in agg.measurements:
        if m.statistic == "quantile":
            worst = Fraction(0)
            ca, cb = a.counts.get(m.name, {}), b.counts.get(m.name, {})
            for g in set(ca) | set(cb):
                if m.quantile is None:
                    continue
                change = score_change(m, ca.get(g, _NO_CELLS), cb.get(g, _NO_CELLS))
                worst = max(worst, change)
            out[m.name] = (worst, m.sensitivity)
            continue
        if m.strata:
            out[m.name] = (_stratified_change(agg, m, a, b), m.sensitivity)
            continue
        if m.statistic == "mode":  # a candidate's score is its count: max |Δcount|
            top = Fraction(0)
            ca, cb = a.counts.get(m.name, {}), b.counts.get(m.name, {})
            for g in set(ca) | set(cb):
                left = dict(
                    zip(*(np.asarray(x).tolist() for x in ca.get(g, _NO_CELLS)), strict=True)
                )
                right = dict(
                    zip(*(np.asarray(x).tolist() for x in cb.get(g, _NO_CELLS)), strict=True)
                )
                for j in set(left) | set(right):
                    top = max(top, Fraction(abs(left.get(j, 0) - right.get(j, 0))))
            out[m.name] = (top, m.sensitivity)
            continue
        diffs = [
            a.exact.get(g, {}).get(m.name, 0) - b.exact.get(g, {}).get(m.name, 0)
            for g in set(a.exact) | set(b.exact)
        ]
        norm = (
            sum(d * d for d in diffs)
            if m.mechanism == "discrete_gaussian"
            else sum(abs(d) for d in diffs)
        )
        out[m.name] = (Fraction(norm), m.sensitivity)
    if agg.selection is not None:
        sel = agg.selection
        chosen = thresholded(agg.measurements)
        if chosen is not None:
            name = chosen.name
            largest = max(
                (
                    abs(a.exact.get(g, {}).get(name, 0) - b.exact.get(g, {}).get(name, 0))
                    for g in set(a.exact) | set(b.exact)
                ),
                default=0,
            )
            out["selection"] = (Fraction(largest), sel.sensitivity)
    return out


def _stratified_change(agg: Aggregate, m: Measurement, a: Run, b: Run) -> Fraction:
    """A stratified sum's change (``veil.compile.strata``) in the units of its global
    sensitivity: each group's change of its re-centred statistic weighted by the global scale
    over its bin's, Σ_g |Δ_g|·s/s_g (L1) or Σ_g Δ_g²·s/s_g (squared L2) — at most the global
    sensitivity exactly when the loss Σ_g |Δ_g|/s_g (or Σ_g Δ_g²/(2s_g)) is at most the
    measurement's share."""
    groups = set(a.exact) | set(b.exact)
    names = [x.name for x in agg.measurements if x.statistic != "quantile"]
    zero = dict.fromkeys(names, 0)
    side_a = {g: {n: int(a.exact.get(g, zero).get(n, 0)) for n in names} for g in groups}
    side_b = {g: {n: int(b.exact.get(g, zero).get(n, 0)) for n in names} for g in groups}
    recentre(agg, side_a)
    recentre(agg, side_b)
    total = Fraction(0)
    for g in groups:
        d = side_a[g][m.name] - side_b[g][m.name]
        weight = m.scale / m.strata[side_a[g][stratum_name(m.name)]].scale
        total += (d * d if m.mechanism == "discrete_gaussian" else abs(d)) * weight
    return total


def finite(value: Any) -> float:
    """A released cell as a float for the statistics (NULL and non-numbers: NaN)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    return float(value)
