"""``veil audit query``: test one SQL query on the data owner's own table against its claimed
(ε, δ), by sampling releases on neighbouring datasets.

**The audit is NOT differentially private.** It reads every row of the table and its report —
thousands of releases, their histograms, the exact and raw answers — reveals the true values.
It is a tool for the data owner, on tables the caller can read directly (paths or in-memory
frames: never a catalog or service dataset), charged to an in-memory scratch budget (no real
ledger is read or written). Every output says so (:data:`NOT_DP`).

What it runs, for SQL ``sql`` with claimed (ε, δ) (see :mod:`veil.audit.query_runs`):

1. the query on D through veil's whole path (a :class:`veil.Session`: parse, compile, free
   checks, reserve, lower, engine, exact statistics, noise, post-processing, commit), once on
   the table as given and once on the same rows as read (the form the neighbours take): both
   must give the same exact statistics;
2. the same on every neighbour D′ (:func:`veil.audit.neighbours.neighbours`), under the same
   bounding salt. Checks: the outcome (released / refused / failed, and its message) is the
   same as D's (DESIGN §1, failure is an output); each measurement's exact statistics moved by
   at most its sensitivity (:func:`veil.audit.query_runs.changes`);
3. ``releases`` fresh releases on each side through veil's release stage (noise from the
   operating system's CSPRNG, partition selection, estimators, post-processing). For every
   released cell (group × column), its value or its absence is compared between the sides by
   :func:`veil.audit.query_stats.epsilon_lower_bound`; the confidence is split over every test
   of the audit (Bonferroni), so the audit's false-alarm rate is at most 1 − ``confidence``;
4. error-bar calibration on D: the share of releases whose stated bar (at ``level``) covers the
   exact bounded value (the noiseless answer from the exact statistics), per column, with a
   Clopper–Pearson interval; and the share covering the raw value (the plain SQL on the raw
   rows, no clamping, no contribution bounds): the difference is the bounding bias, which the
   bars do not claim to cover.

Verdict: FAIL if any outcome differs, any change exceeds its sensitivity, any ε (or δ) lower
bound exceeds the claim, or a column's coverage is significantly below ``level``; INCONCLUSIVE
if no violation was found but these samples could not have shown a loss of twice the claimed
ε (:func:`veil.audit.query_stats.detectable` above 2ε: raise ``releases_per_side``); PASS
otherwise. PASS does not prove privacy.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Literal

import duckdb
import numpy as np
import pyarrow as pa

from veil.accounting.budget import Number
from veil.audit.histograms import Histogram, histogram
from veil.audit.neighbours import Neighbour, neighbours
from veil.audit.query_runs import (
    Cell,
    Run,
    cells_of,
    changes,
    finite,
    noiseless,
    releases,
    run,
)
from veil.audit.query_stats import (
    EXIT_CODES,
    Verdict,
    binomial_lower,
    binomial_upper,
    detectable,
    epsilon_lower_bound,
    significantly_below,
)
from veil.engines.duckdb import DuckDBEngine
from veil.errors import InvalidArgumentError
from veil.plan.nodes import Aggregate, as_fraction
from veil.random import RandomSource, system_source

__all__ = [
    "NOT_DP",
    "CellBound",
    "Coverage",
    "NeighbourAudit",
    "QueryAudit",
    "judge",
    "query",
]

NOT_DP = (
    "NOT DIFFERENTIALLY PRIVATE: this audit read every row of the table and its report reveals "
    "the true values; it is for the data owner only. Passing an audit does not prove privacy."
)
Progress = Callable[[int, int], None]  # (done, total) releases


@dataclass(frozen=True)
class CellBound:
    """The ε lower bound of one released cell between D and one neighbour."""

    cell: str
    epsilon: float
    delta: float
    event: str
    p: float
    q: float


@dataclass(frozen=True)
class NeighbourAudit:
    """What one neighbour D′ showed: outcomes, exact changes against sensitivities, and the
    cell with the largest ε lower bound; ``problems`` say why it FAILs (empty: it did not)."""

    name: str
    description: str
    crafted: bool
    outcome: str
    neighbour_outcome: str
    changes: Mapping[str, tuple[Fraction, Fraction]]
    worst: CellBound | None
    cells: int
    problems: tuple[str, ...]
    histogram: Histogram | None = None  # the worst cell's releases on D and on D′

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "crafted": self.crafted,
            "outcome": self.outcome,
            "neighbour_outcome": self.neighbour_outcome,
            "changes": {
                k: {"change": str(c), "sensitivity": str(s)} for k, (c, s) in self.changes.items()
            },
            "worst_cell": None if self.worst is None else self.worst.__dict__,
            "cells": self.cells,
            "problems": list(self.problems),
            "worst_cell_histogram": None if self.histogram is None else self.histogram.to_json(),
        }


@dataclass(frozen=True)
class Coverage:
    """Error-bar calibration of one column on D: releases whose bar covered the exact bounded
    value (``covered`` of ``total``, ``interval`` its Clopper–Pearson interval) and the raw
    value (``raw_covered`` of ``raw_total``; None when the raw SQL could not be run)."""

    column: str
    level: float
    covered: int
    total: int
    interval: tuple[float, float]
    raw_covered: int | None
    raw_total: int | None
    failed: bool

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__, interval=list(self.interval))


@dataclass(frozen=True)
class QueryAudit:
    """The report of :func:`query` (see the module docstring). ``verdict`` is PASS, FAIL or
    INCONCLUSIVE; ``exit_code`` 0, 1 or 2."""

    sql: str
    epsilon: Fraction
    delta: Fraction | None
    releases: int
    confidence: float
    tests: int
    detectable: float
    verdict: Verdict
    neighbours: tuple[NeighbourAudit, ...]
    coverage: tuple[Coverage, ...]
    notes: tuple[str, ...] = ()
    pipeline: str = field(
        default="each neighbour's statistics: the whole Session path (parse, compile, checks, "
        "reserve on a scratch budget, lower, DuckDB, exact statistics); each release: veil's "
        "release stage on those statistics (measure: CSPRNG noise, partition selection, "
        "quantile choice; finish: estimators, post-processing, error bars)"
    )

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    @property
    def worst(self) -> CellBound | None:
        bounds = [n.worst for n in self.neighbours if n.worst is not None]
        return max(bounds, key=lambda b: b.epsilon, default=None)

    def to_json(self) -> dict[str, Any]:
        worst = self.worst
        return {
            "audit": "query",
            "warning": NOT_DP,
            "verdict": self.verdict,
            "sql": self.sql,
            "epsilon": float(self.epsilon),
            "delta": None if self.delta is None else float(self.delta),
            "releases_per_side": self.releases,
            "confidence": self.confidence,
            "false_alarm_rate": round(1 - self.confidence, 12),
            "tests": self.tests,
            "smallest_detectable_epsilon": self.detectable,
            "worst": None if worst is None else worst.__dict__,
            "neighbours": [n.to_json() for n in self.neighbours],
            "coverage": [c.to_json() for c in self.coverage],
            "pipeline": self.pipeline,
            "notes": list(self.notes),
        }

    def lines(self) -> list[str]:
        """The report as text lines for a terminal."""
        out = [NOT_DP, "", f"query: {self.sql}", f"claimed: ε={float(self.epsilon):g}"
               + ("" if self.delta is None else f", δ={float(self.delta):g}"),
               f"releases: {self.releases} per side, {self.tests} tests; confidence "
               f"{self.confidence:g} overall (false-alarm rate ≤ {1 - self.confidence:.3g})",
               f"smallest violation these samples could show: ε ≈ {self.detectable:.3g}",
               ""]  # fmt: skip
        head = f"{'neighbour':<24} {'outcome':<9} {'max Δ/sens':>10} {'ε lower bound':>14}  cell"
        out.append(head)
        for n in self.neighbours:
            ratio = max(
                (float(c / s) if s else (math.inf if c else 0.0) for c, s in n.changes.values()),
                default=0.0,
            )
            eps = "-" if n.worst is None else f"{n.worst.epsilon:.3f}"
            cell = "" if n.worst is None else n.worst.cell
            status = "same" if n.outcome == n.neighbour_outcome else "DIFFERS"
            out.append(f"{n.name:<24} {status:<9} {ratio:>10.3f} {eps:>14}  {cell}")
            out.extend(f"    FAIL: {p}" for p in n.problems)
        if self.coverage:
            out += ["", f"error bars ({self.coverage[0].level:.0%}) covering the exact bounded "
                    "value (and the raw value: the difference is bounding bias)"]  # fmt: skip
            for c in self.coverage:
                raw = (
                    "raw: n/a"
                    if c.raw_covered is None or not c.raw_total
                    else f"raw {c.raw_covered / c.raw_total:.3f}"
                )
                flag = "  FAIL: significantly below the level" if c.failed else ""
                out.append(
                    f"  {c.column:<20} {c.covered / max(c.total, 1):.3f} "
                    f"[{c.interval[0]:.3f}, {c.interval[1]:.3f}] of {c.total}; {raw}{flag}"
                )
        out += [f"note: {n}" for n in self.notes]
        out += ["", f"verdict: {self.verdict}", NOT_DP]
        return out


def _check_tables(tables: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(tables, Mapping) or not tables:
        raise InvalidArgumentError(
            "the audit needs the tables as name → path (or an in-memory frame), e.g. "
            "tables={'people': 'people.csv'}"
        )
    out: dict[str, Any] = {}
    for name, source in tables.items():
        if isinstance(source, str | os.PathLike):
            path = os.fspath(source)
            if not os.path.isfile(path):
                raise InvalidArgumentError(
                    f"table {name!r}: no file at {path!r}; the audit runs only on a CSV or "
                    "Parquet file the caller can read directly (never a catalog dataset)"
                )
        out[name] = source
    return out


def _read(
    tables: Mapping[str, Any], schema: Mapping[str, Mapping[str, str]] | None
) -> dict[str, pa.Table]:
    """Every table as the session reads it (declared types applied), as Arrow."""
    engine = DuckDBEngine(tables, schema=schema)
    try:
        return {
            name: engine.connection.sql(
                f'SELECT * FROM "{name.replace(chr(34), chr(34) * 2)}"'
            ).to_arrow_table()
            for name in tables
        }
    finally:
        engine.close()


def _scan_table(agg: Aggregate) -> str:
    node = agg.child
    while node.children:
        node = node.children[0]
    table: str = getattr(node, "table")  # noqa: B009 (the Scan at the bottom)
    return table


def _samples(results: Sequence[dict[Cell, Any]], cell: Cell) -> np.ndarray:
    return np.asarray([finite(r[cell]) if cell in r else math.nan for r in results], dtype=float)


def _label(cell: Cell) -> str:
    group, column = cell
    return column if not group else f"{column} @ {', '.join(map(str, group))}"


def _raw(data: Mapping[str, pa.Table], sql: str, agg: Aggregate) -> dict[Cell, Any] | None:
    """The plain SQL on the raw rows (no clamping, no bounding), as cells; None if DuckDB
    cannot run the text as written."""
    con = duckdb.connect()
    try:
        for name, table in data.items():
            con.register(name, table)
        rows = con.sql(sql).to_arrow_table()
    except duckdb.Error:
        return None
    finally:
        con.close()
    aliases = {k.alias for k in agg.keys}
    columns = rows.column_names
    keys = [c for c in columns if c in aliases]
    out: dict[Cell, Any] = {}
    for row in rows.to_pylist():
        group = tuple(row[k] for k in keys)
        for c in columns:
            if c not in aliases:
                out[(group, c)] = row[c]
    return out


def _coverage(
    base: Run,
    results: Sequence[Any],
    raw: dict[Cell, Any] | None,
    level: float,
    confidence: float,
    agg: Aggregate,
) -> list[Coverage]:
    truth = cells_of(noiseless(base), agg)
    tallies: dict[str, list[int]] = {}
    for result in results:
        bars = result.error_bars(level)
        cells = cells_of(result, agg)
        aliases = {k.alias for k in agg.keys}
        key_idx = [i for i, c in enumerate(result.columns) if c in aliases]
        for row, bar in zip(result.values, bars, strict=True):
            group = tuple(row[i] for i in key_idx)
            for j, column in enumerate(result.columns):
                half = bar[j]
                if half is None or j in key_idx:
                    continue
                value = cells[(group, column)]
                t = tallies.setdefault(column, [0, 0, 0, 0])
                exact = truth.get((group, column))
                if exact is not None:
                    t[0] += int(abs(float(value) - float(exact)) <= half)
                    t[1] += 1
                true_raw = None if raw is None else raw.get((group, column))
                if true_raw is not None:
                    t[2] += int(abs(float(value) - float(true_raw)) <= half)
                    t[3] += 1
    out = []
    for column, (k, n, rk, rn) in tallies.items():
        lo = binomial_lower(k, n, 1 - (1 - confidence) / 2) if n else 0.0
        hi = binomial_upper(k, n, 1 - (1 - confidence) / 2) if n else 1.0
        out.append(
            Coverage(
                column,
                level,
                k,
                n,
                (lo, hi),
                None if raw is None else rk,
                None if raw is None else rn,
                failed=significantly_below(k, n, level, 1 - (1 - confidence) / 2),
            )
        )
    return out


def judge(base: Run, other: Run, moved: Mapping[str, tuple[Fraction, Fraction]]) -> list[str]:
    """Why a neighbour's run FAILs before any sampling: its outcome (status, error class and
    message) differs from D's (DESIGN §1: failure is an output), or a measurement's exact
    statistics moved by more than its sensitivity (``moved``: :func:`changes`)."""
    problems: list[str] = []
    if other.outcome != base.outcome:
        problems.append(
            f"the outcome differs: D {base.outcome.describe()}; D′ {other.outcome.describe()}"
        )
    for name, (change, sens) in moved.items():
        if change > sens:
            problems.append(
                f"{name} moved by {float(change):.6g}, more than its sensitivity {float(sens):.6g}"
            )
    return problems


def query(
    sql: str,
    tables: Mapping[str, Any],
    *,
    epsilon: Number,
    delta: Number | None = None,
    privacy_unit: str | None = None,
    bounds: Mapping[str, tuple[Any, Any]] | None = None,
    max_groups: int | None = None,
    max_rows_per_group: int | None = None,
    schema: Mapping[str, Mapping[str, str]] | None = None,
    quantile_buckets: int = 1024,
    neighbours_of: Literal["auto"] = "auto",
    releases_per_side: int = 2000,
    confidence: float = 0.95,
    level: float = 0.95,
    progress: Progress | None = None,
    source: RandomSource | None = None,
    weights: str | None = None,
) -> QueryAudit:
    """Audit ``sql`` on ``tables`` at its claimed (``epsilon``, ``delta``) — see the module
    docstring. NOT differentially private: the data owner's tool.

    ``tables``: name → CSV/Parquet path or an in-memory frame; ``schema``, ``privacy_unit``,
    ``bounds``, ``max_groups``, ``max_rows_per_group`` and ``quantile_buckets`` are those of
    :meth:`veil.Session.local`; ``releases_per_side`` releases are drawn on D and on each
    neighbour; ``confidence`` is the whole audit's (its false-alarm rate is at most
    1 − confidence); ``level`` the error bars' confidence level; ``progress(done, total)`` is
    called as releases are drawn; ``source`` a seeded random source for repeatable tests
    (default: the operating system's CSPRNG, for the salt and every release); ``weights`` a
    survey-weights column (``Session.sql(weights=)``).
    """
    if neighbours_of != "auto":
        raise InvalidArgumentError(f"neighbours must be 'auto', got {neighbours_of!r}")
    if isinstance(releases_per_side, bool) or not isinstance(releases_per_side, int):
        raise InvalidArgumentError(f"releases must be an integer, got {releases_per_side!r}")
    if releases_per_side < 20:
        raise InvalidArgumentError(
            f"releases must be at least 20 per side, got {releases_per_side}; e.g. 2000"
        )
    for name, value in (("confidence", confidence), ("level", level)):
        if not isinstance(value, int | float) or not 0 < value < 1:
            raise InvalidArgumentError(f"{name} must lie in (0, 1), e.g. 0.95; got {value!r}")
    eps = as_fraction(epsilon, "epsilon")
    dlt = None if delta is None else as_fraction(delta, "delta")
    sources = _check_tables(tables)
    salt = int.from_bytes((source or system_source()).random_bytes(8), "big") >> 1
    options: dict[str, Any] = {
        "privacy_unit": privacy_unit,
        "bounds": dict(bounds or {}),
        "max_groups": max_groups,
        "max_rows_per_group": max_rows_per_group,
        "quantile_buckets": quantile_buckets,
        "weights": weights,
    }
    given = run(sources, sql, salt=salt, epsilon=eps, delta=dlt, options=options, schema=schema)
    data = _read(sources, schema)
    base = run(data, sql, salt=salt, epsilon=eps, delta=dlt, options=options)
    notes: list[str] = [f"veil warns: {w}" for w in given.advice]
    if given.outcome != base.outcome or dict(given.exact) != dict(base.exact):
        notes.append(
            "the table as given and as read into memory gave different outcomes or statistics: "
            "the neighbours below were built from the rows as read"
        )
    if base.agg is None or base.compiled is None:
        return QueryAudit(
            sql, eps, dlt, 0, confidence, 0, math.inf, "INCONCLUSIVE", (), (),
            (f"the query is not released on D ({base.outcome.describe()}): nothing to sample",),
        )  # fmt: skip
    agg = base.agg
    table = _scan_table(agg)
    built, why = neighbours(data[table], agg)
    notes.extend(why)
    runs = [
        (n, run({**data, table: n.data}, sql, salt=salt, epsilon=eps, delta=dlt, options=options))
        for n in built
    ]
    released = [(n, r) for n, r in runs if r.agg is not None]
    total = releases_per_side * (1 + len(released))
    done = [0]

    def step() -> None:
        done[0] += 1
        if progress is not None:
            progress(done[0], total)

    base_results = list(releases(base, releases_per_side, step=step, source=source))
    base_cells = [cells_of(r, agg) for r in base_results]
    per_neighbour: list[tuple[Neighbour, Run, list[dict[Cell, Any]]]] = []
    for n, r in runs:
        cells = (
            [cells_of(x, agg) for x in releases(r, releases_per_side, step=step, source=source)]
            if r.agg is not None
            else []
        )
        per_neighbour.append((n, r, cells))
    universe = [
        sorted({c for cs in (base_cells, cells) for res in cs for c in res}, key=repr)
        for _, _, cells in per_neighbour
    ]
    tests = max(1, sum(len(u) for u, (_, r, _) in zip(universe, per_neighbour, strict=True)
                       if r.agg is not None))  # fmt: skip
    each = 1 - (1 - confidence) / (tests + 1)  # +1: the coverage tests share the split
    claimed_delta = float(dlt or 0)
    audits: list[NeighbourAudit] = []
    for (n, r, cells), cell_list in zip(per_neighbour, universe, strict=True):
        moved = changes(agg, base, r) if r.agg is not None else {}
        problems = judge(base, r, moved)
        worst: CellBound | None = None
        picture: Histogram | None = None
        for cell in cell_list if r.agg is not None else []:
            on_d, on_neighbour = _samples(base_cells, cell), _samples(cells, cell)
            b = epsilon_lower_bound(
                on_d, on_neighbour, epsilon=float(eps), delta=claimed_delta, confidence=each
            )
            if worst is None or b.epsilon > worst.epsilon:
                worst = CellBound(_label(cell), b.epsilon, b.delta, b.event, b.p, b.q)
                picture = histogram(on_d, on_neighbour)
            if b.epsilon > float(eps) or b.delta > claimed_delta:
                problems.append(
                    f"{_label(cell)}: ε ≥ {b.epsilon:.3f} and δ ≥ {b.delta:.3g} at ε="
                    f"{float(eps):g} with confidence {each:.6g} (event {b.event}: "
                    f"{b.p:.3f} vs {b.q:.3f})"
                )
        audits.append(
            NeighbourAudit(
                n.name,
                n.description,
                n.crafted,
                base.outcome.describe(),
                r.outcome.describe(),
                moved,
                worst,
                len(cell_list),
                tuple(problems),
                picture,
            )
        )
    raw = _raw(data, sql, agg)
    if raw is None:
        notes.append("the raw value: DuckDB could not run the query text as plain SQL")
    coverage = _coverage(base, base_results, raw, level, 1 - (1 - confidence) / (tests + 1), agg)
    power = detectable(float(eps), releases_per_side, each)
    failed = any(a.problems for a in audits) or any(c.failed for c in coverage)
    verdict: Verdict = "FAIL" if failed else "INCONCLUSIVE" if power > 2 * float(eps) else "PASS"
    return QueryAudit(
        sql,
        eps,
        dlt,
        releases_per_side,
        confidence,
        tests,
        power,
        verdict,
        tuple(audits),
        tuple(coverage),
        tuple(notes),
    )
