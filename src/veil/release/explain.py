"""What a query will do, without reading private data: plan, SQL, sensitivities, noise, cost,
expected error bars."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, assert_never

from veil.accounting.budget import Budget
from veil.aggregates import kind
from veil.aggregates.base import Expected
from veil.compile.statistics import effective_groups, reach, thresholded
from veil.noise.families import family
from veil.plan.canonical import canonical
from veil.plan.nodes import (
    Aggregate,
    Filter,
    Having,
    Limit,
    Measurement,
    Plan,
    Project,
    Scan,
    Sort,
)
from veil.plan.visitor import PlanVisitor
from veil.release.estimators import column_models, noise_models
from veil.release.explained import Explained, budget_line, explanation_lines
from veil.release.result import Usage

__all__ = [
    "Explained",
    "Explanation",
    "budget_line",
    "describe_contribution",
    "describe_usage",
    "expected_errors",
    "explanation_lines",
    "plan_tree",
]


def _g(x: Fraction | float) -> str:
    return f"{float(x):.6g}"


def _unit(m: Measurement) -> Fraction:
    """The value of one integer step of ``m``'s statistic, in value units (1 for counts)."""
    if m.statistic == "sum":
        return m.step
    if m.statistic == "sum_squares":
        width = m.step * m.limit
        return width * width / (2 * m.limit)
    return Fraction(1)


def _units(m: Measurement) -> str:
    return {"sum": "value units", "sum_squares": "squared units"}.get(m.statistic, "rows")


def _sensitivity_text(m: Measurement) -> str:
    norm = family(m.mechanism).norm
    match norm:
        case "L1":
            value = _g(m.sensitivity * _unit(m))
            return f"L1 = {value} {'rows' if _units(m) == 'rows' else f'({_units(m)})'}"
        case "L2^2":
            l2 = math.sqrt(float(m.sensitivity)) * float(_unit(m))
            return f"L2 = {l2:.6g} {'rows' if _units(m) == 'rows' else f'({_units(m)})'}"
        case "score":
            return f"score sensitivity Δ = {_g(m.sensitivity)} per group"
        case _:
            assert_never(norm)


def _noise_text(m: Measurement, groups: Fraction) -> str:
    match m.mechanism:
        case "discrete_laplace":
            return f"discrete Laplace, scale {_g(m.scale * _unit(m))}"
        case "discrete_gaussian":
            return f"discrete Gaussian, σ = {math.sqrt(float(m.scale)) * float(_unit(m)):.6g}"
        case "exponential":
            eps_g = 2 * m.sensitivity / m.scale
            return (
                f"exponential mechanism over {m.limit} candidates "
                f"(step {_g(m.step)}), "
                f"ε = {_g(eps_g)} per group × {_g(groups)} group(s) per unit"
            )
        case _:
            assert_never(m.mechanism)


def _strata_sensitivity(m: Measurement) -> str:
    if not m.strata:
        return ""
    return " (before stratifying)"


def _strata_noise(agg: Aggregate, m: Measurement) -> str:
    """A stratified sum's per-bin calibration (``veil.compile.strata``), in value units."""
    if not m.strata or m.stratum_key is None:
        return ""
    key = agg.keys[m.stratum_key]
    parts = []
    for label, st in zip(key.labels(), m.strata, strict=True):
        sens = family(m.mechanism).norm
        if m.mechanism == "discrete_gaussian":
            l2 = math.sqrt(float(st.sensitivity)) * float(m.step)
            noise = f"L2 = {l2:.6g}, σ = {math.sqrt(float(st.scale)) * float(m.step):.6g}"
        else:
            noise = f"{sens} = {_g(st.sensitivity * m.step)}, scale {_g(st.scale * m.step)}"
        parts.append(
            f"{label}: in [{_g(st.lower)}, {_g(st.upper)}], centre {_g(st.centre)}, {noise}"
        )
    return f"; stratified by the groups of {key.alias} (parallel composition): " + "; ".join(parts)


def describe_contribution(agg: Aggregate) -> str:
    """The privacy unit and the bound on what one unit contributes, in words."""
    c = agg.contribution
    if agg.privacy_unit is None:
        if c.max_rows is None:
            return "row-level privacy (each row is a unit)"
        return (
            f"each person: at most {c.max_rows} row(s), declared (contributions={c.max_rows}; "
            "the table has no id column, so veil accounts for it without enforcing it)"
        )
    text = (
        f"privacy unit {agg.privacy_unit}: at most {c.max_groups} group(s) and "
        f"{c.max_rows_per_group} row(s) per group"
    )
    return text if c.max_rows is None else f"{text}, {c.max_rows} row(s) in all"


def describe_usage(agg: Aggregate) -> tuple[Usage, ...]:
    """What each part of the charged budget pays for."""
    models = column_models(agg)
    g = effective_groups(agg)
    out: list[Usage] = []
    for m in agg.measurements:
        used = tuple(c.alias for c in models if m.name in c.measurements())
        if agg.selection is not None and m is thresholded(agg.measurements):
            used = (*used, "(partition selection)")
        out.append(
            Usage(
                m.name,
                m.mechanism,
                m.budget,
                _sensitivity_text(m) + _strata_sensitivity(m),
                _noise_text(m, reach(agg).spread) + _strata_noise(agg, m),
                used,
            )
        )
    if agg.selection is not None:
        s = agg.selection
        out.append(
            Usage(
                "partition selection",
                f"threshold on the noisy count ({s.mechanism})",
                s.budget,
                f"≤ {g} group(s) per unit, ≤ {reach(agg).rows} row(s) each",
                f"release a group iff noisy count ≥ {_g(s.threshold)}",
                tuple(k.alias for k in agg.keys if not k.is_public),
            )
        )
    return tuple(out)


def expected_errors(agg: Aggregate, level: float = 0.95) -> dict[str, str]:
    """Data-independent error bars at ``level`` per aggregate (n is the group's row count)."""
    noise = noise_models(agg)
    out: dict[str, str] = {}
    for c in column_models(agg):
        first = Expected(c, noise, 0)
        if first.stratum is None:
            out[c.alias] = kind(c.function).expected(Expected(c, noise), level)
            continue
        # a stratified sum: each bin's own bar (its noise, its centre, its bounds)
        m = next(x for x in agg.measurements if x.name == c.sum)
        labels = agg.keys[m.stratum_key or 0].labels()
        out[c.alias] = "; ".join(
            f"{label}: {kind(c.function).expected(Expected(c, noise, i), level)}"
            for i, label in enumerate(labels)
        )
    return out


class _Tree(PlanVisitor[list[str]]):
    """One line per node, root first, children indented."""

    def _under(self, head: str, child: Plan) -> list[str]:
        return [head, *("  " + line for line in self.visit(child))]

    def visit_scan(self, node: Scan) -> list[str]:
        return [f"Scan {node.table} ({', '.join(f.name for f in node.columns)})"]

    def visit_filter(self, node: Filter) -> list[str]:
        return self._under(f"Filter {node.predicate.sql()}", node.child)

    def visit_aggregate(self, node: Aggregate) -> list[str]:
        keys = []
        for k in node.keys:
            kind = (
                "bins" if k.edges is not None else "public" if k.domain is not None else "unknown"
            )
            keys.append(f"{k.alias} ({kind})")
        calls = []
        for a in node.aggregates:
            arg = a.column or "*"
            if a.function == "quantile":
                arg = f"{arg}, {a.q}"
            rank = ""
            if a.top is not None:
                arg, rank = f"{arg}, {a.top[1]}", f" rank {a.top[0]}"
            weight = f" weight {a.weight}" if a.weight is not None else ""
            name = a.function.upper()
            if a.weights is not None:  # survey weights: the call as the analyst wrote it
                name = {"wcount": "COUNT", "wsum": "SUM", "wavg": "AVG"}.get(a.function, name)
                weight += f" weighted by {a.weights}"
            calls.append(f"{a.alias} = {name}({arg}){rank}{weight}")
        # a MODE does not clamp: its bounds list its candidates (rows outside count for none)
        clamped = {
            a.column
            for a in node.aggregates
            if a.needs_bounds and a.function not in ("mode", "top_k")
        } | {a.weights for a in node.aggregates if a.weights is not None}  # survey weights
        bounds = ", ".join(
            f"{b.column} ∈ [{_g(b.lower)}, {_g(b.upper)}]"
            + (f" (per group: {len(b.groups)} groups)" if b.groups else "")
            for b in node.bounds
            if b.column in clamped
        )
        candidates = ", ".join(
            f"{b.column} ∈ {{{_g(b.lower)}, …, {_g(b.upper)}}}"
            for b in node.bounds
            if b.column not in clamped
        )
        head = f"Aggregate by {', '.join(keys) or '(no groups)'}: {'; '.join(calls)}"
        if bounds:
            head += f" | clamp {bounds}"
        if candidates:
            head += f" | MODE candidates {candidates}"
        return self._under(head, node.child)

    def visit_having(self, node: Having) -> list[str]:
        return self._under(f"Having {node.predicate.sql()} (released values)", node.child)

    def visit_sort(self, node: Sort) -> list[str]:
        keys = ", ".join(f"{k.column}{' DESC' if k.descending else ''}" for k in node.keys)
        return self._under(f"Sort {keys} (released values)", node.child)

    def visit_limit(self, node: Limit) -> list[str]:
        off = f" offset {node.offset}" if node.offset else ""
        return self._under(f"Limit {node.count}{off}", node.child)

    def visit_project(self, node: Project) -> list[str]:
        return self._under(f"Project {', '.join(node.columns)}", node.child)


def plan_tree(plan: Plan) -> str:
    """A readable outline of ``plan`` (one node per line)."""
    return "\n".join(_Tree().visit(plan))


@dataclass(frozen=True)
class Explanation:
    """The dry run of a query: nothing was read, nothing charged."""

    plan: Plan
    sql: str
    quantile_sql: tuple[str, ...]
    cost: Budget
    usage: tuple[Usage, ...]
    errors: dict[str, str]
    contribution: str
    notes: tuple[str, ...] = ()
    remaining: Budget | None = None  # the caller's remaining budget (None: no grant)
    covered: bool | None = None  # whether it covers ``cost`` (None: no grant to ask)
    # with accuracy targets and auto limits: veil.autolimits_target.TargetedLimits; with
    # auto bounds: veil.autobounds_target.TargetedBounds
    targeted: Any = field(default=None, compare=False)

    @property
    def canonical(self) -> dict[str, object]:
        return canonical(self.plan)

    @property
    def budget_line(self) -> str:
        """Whether the caller's budget covers the query, in words."""
        return budget_line(self.remaining, self.covered)

    def __str__(self) -> str:
        lines = ["plan:", *("  " + line for line in plan_tree(self.plan).splitlines())]
        return "\n".join([*lines, *explanation_lines(self)])
