"""Clamping bounds found under differential privacy: ``bounds="auto"`` (issue 14).

A query that sums or averages a column needs clamping bounds. ``bounds="auto"`` (every column
the query clamps) or ``bounds={"income": "auto"}`` (that column) spends a declared share of
the query's ε to choose them from the data, then answers the query with the rest.

The mechanism (after Google's ApproxBounds, ``differential-privacy/cc/algorithms/
approx-bounds.h``, a noisy histogram over logarithmic bins; OpenDP issue #659 sketches the
same idea):

1. **A public grid.** The bins are signed powers of two, ``[-2^(k+1), -2^k)``, …, ``[-1, 0)``
   … ``[0, 2^m)``, ``[2^m, 2^(m+1))``, …, up to ``2^HIGH`` (``m = 0`` for an integer column,
   ``LOW`` for a real one), fixed by the column's type alone — never by its values. A declared
   outer range (the catalog's or the session's bounds for the column) cuts the grid at its
   ends, so the bounds found only ever narrow it.
2. **One ordinary veil query** measures it: ``SELECT BIN(col, grid…) AS bin, COUNT(*) AS n``
   over the query's table and WHERE clause, with the bins as public keys (every bin released,
   pure ε, no δ). It runs through :meth:`veil.Session.run` like any query: the session's
   privacy unit and contribution limits (``max_groups``, ``max_rows_per_group``,
   ``max_rows``) bound each unit's rows, its sensitivity follows from them, discrete Laplace
   noise, its own ledger charge (``-- veil bounds`` in the audit trail) and the ledger's answer
   cache (an identical request — same column, table, filter, limits, ε and data version — is
   answered from it, free).
3. **Selection is post-processing** of the released noisy counts: with ``s`` the counts'
   Laplace scale and ``B`` the number of bins, a bin is *occupied* when its noisy count is at
   least ``τ = ⌈s·ln(B/β)⌉`` (β = 1/20). From the bin with the largest noisy count the range
   absorbs the nearest occupied bin on either side while that widens it at most
   :data:`GROWTH` times (so adjacent bins are always taken, an isolated far bin never: a
   spurious or outlier bin cannot blow the bounds up), then reaches 0 when that widens it by
   at most a third (the sparse bins near 0 of a log grid). No bin occupied (an empty or
   all-NULL column, a few rows): the bin with the largest count alone. The result is always
   a valid pair ``lower < upper``: the path after the data is read is total.

Contract. Preconditions: ``0 < share < 1``; ε a positive number. Postconditions: the bounds
step of column ``c`` is ``ε·share/k``-DP (``k`` auto columns; a histogram of public bins with
the session's contribution bounding, :mod:`veil.compile.statistics`), the main query is the
compiled query at ``ε·(1 − share)`` (and the query's δ), so by sequential composition the
whole is ``(ε, δ)``-DP; the choice is a function of the released counts alone. The grid, the
threshold and every refusal depend on the query, the schema and the parameters only.

Utility. The noise of an empty bin reaches τ with probability ≤ e^{−τ/s} ≤ β/B, so with
probability ≥ 1 − β no empty bin is occupied; a bin holding more than ``τ + s·ln(1/β)``
counted rows is occupied with probability ≥ 1 − β. The bounds then cover the data's bins
that are adjacent to its largest one (the log grid's edges overshoot the data by at most a
factor 2); rows in sparse tail bins (fewer than about τ rows) and in bins cut off by a gap
are clamped — ``ChosenBounds.clamped`` estimates that share from the noisy counts, with a
bar. With few rows per ε (τ ≈ 8/ε_step rows at row level) the tails are clamped more: the
measured cost in accuracy on the LFS and PUMS samples is in
``tests/system/test_autobounds_real.py``.

Per group. ``bounds={"income": {"auto": "region"}}`` finds one range per group of the
query's GROUP BY key ``region`` (its alias or its column), which must be *public* — a declared
domain (``WHERE region IN ('north', 'south')``, or the session's or catalog's domains) or the
bins of a ``BIN`` — else the request is refused, free, with the fix. The step is still *one*
histogram query, now with the keys (group, bin), all public (every cell released, empty ones
included): the same contribution bounding, sensitivity, charge and cache as above, so the
groups compose in parallel and the step costs ``ε·share/k`` whatever the number of groups.
Each group's bounds are chosen from its own row of noisy counts by the same selection, with
τ taken over every released cell (``B·G`` of them: with probability ≥ 1 − β no empty cell of
any group is occupied), and the main query runs with them as per-group bounds
``{"income": {"north": (lo, hi), …}}`` (:mod:`veil.compile.strata` clamps each group's rows
to its own). A group with no occupied bin (empty, or too few rows to tell) takes the hull of
the occupied groups' bounds rather than the bin its noise favours (that could lie anywhere on
the grid, and through the column's hull coarsen every group's fixed-point grid); when no
group is occupied, all take the choice from the pooled counts. Every group gets a valid pair:
the path after the data is read stays total.

Contract (per group). Preconditions as above, and the key public (checked from the plan,
before any reservation). Postconditions: the step is one ``ε·share/k``-DP release — a unit
contributes to at most ``max_groups`` cells (group, bin), each at most ``max_rows_per_group``
rows, exactly as to the bins of the global step, so its sensitivity and scale are the global
step's; the per-group choice is post-processing of the released counts; the main query at
per-group bounds is ``ε·(1 − share)``-DP (:mod:`veil.compile.strata`'s proof note), so the
whole is ``(ε, δ)``-DP by sequential composition.

Plans. A builder query, or a plan given to :meth:`veil.Session.run`, takes the same request:
its aggregation's table, WHERE, keys, unit and limits are those of the SQL of the same
question, so its steps are the same queries (the same fingerprints, charges and cached
answers), and the bounds found are passed at compile time, replacing the plan's own for those
columns (as any ``bounds=`` given to ``run`` does). The outer range of a column is the
session's (a catalog's), else the plan's own.

Accuracy targets. With ``target=`` instead of ε the bounds step's ε is set by the targets
(a ninth of the ε meeting them at the declared range) and the query runs at the smallest ε
meeting them at the bounds chosen: :mod:`veil.autobounds_target`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from veil.accounting.budget import Budget, Number, exact
from veil.autobounds_choice import (
    BETA,
    HIGH,
    LOW,
    Choice,
    ChosenBounds,
    GroupBounds,
    choose,
    grid,
    percent,
    spanning,
    threshold,
)
from veil.errors import BudgetExhaustedError, InternalError, InvalidArgumentError
from veil.plan.nodes import Aggregate, AggregateCall, ColumnBounds, GroupKey, Plan
from veil.plan.tree import aggregate_of

if TYPE_CHECKING:
    from veil.random import RandomSource
    from veil.release.explain import Explanation
    from veil.release.result import Result
    from veil.session import Session

__all__ = [
    "AUTO",
    "BETA",
    "DEFAULT_SHARE",
    "HIGH",
    "LOW",
    "ChosenBounds",
    "GroupBounds",
    "auto_explain",
    "auto_sql",
    "choose",
    "find_bounds",
    "grid",
    "is_auto",
    "percent",
    "threshold",
]

AUTO = "auto"
DEFAULT_SHARE = Fraction(1, 10)
"""The share of the query's ε spent on the bounds when ``bounds_share`` is not given."""
_BIN = "bin"
_COUNT = "n"


# -- the request ----------------------------------------------------------------------------
def is_auto(bounds: object) -> bool:
    """Whether ``bounds`` asks for auto bounds (``"auto"`` or a mapping with an ``"auto"``)."""
    if isinstance(bounds, str):
        return True  # "auto" or a typo of it: split_request says which
    return isinstance(bounds, Mapping) and any(
        isinstance(v, str) or _per_group(v) is not None for v in bounds.values()
    )


def _per_group(value: object) -> object | None:
    """The key named by a per-group auto request ``{"auto": KEY}`` (None: not one). A group
    literally labelled ``"auto"`` has a pair, never a name, so the two forms never clash."""
    if isinstance(value, Mapping) and AUTO in value:
        named: object = value[AUTO]
        pair = isinstance(named, Sequence) and not isinstance(named, str)
        if isinstance(named, str) or (len(value) == 1 and not pair):
            return named
    return None


def split_request(bounds: object) -> tuple[dict[str, Any], set[str] | None, dict[str, str]]:
    """``bounds`` as (the given pairs, the auto columns — ``None`` for every clamped column —,
    and the auto columns found per group: column → the GROUP BY key named)."""
    if isinstance(bounds, str):
        if bounds != AUTO:
            raise InvalidArgumentError(
                f"bounds={bounds!r} is not understood; pass bounds='auto' (every column the "
                "query clamps) or bounds={'income': 'auto'} or bounds={'income': (0, 1e6)}"
            )
        return {}, None, {}
    if not isinstance(bounds, Mapping):
        raise InvalidArgumentError(f"bounds must be 'auto' or a mapping, got {bounds!r}")
    given: dict[str, Any] = {}
    auto: set[str] = set()
    by: dict[str, str] = {}
    for column, value in bounds.items():
        named = _per_group(value)
        if named is not None:
            if not isinstance(named, str) or len(value) != 1 or not named:
                raise InvalidArgumentError(
                    f"bounds for {column!r} per group must be {{'auto': KEY}} with KEY a GROUP "
                    f"BY key of the query, got {value!r}; e.g. bounds={{{column!r}: "
                    "{'auto': 'region'}}"
                )
            auto.add(column)
            by[column] = named
        elif isinstance(value, str):
            if value != AUTO:
                raise InvalidArgumentError(
                    f"bounds for {column!r} must be a pair (lower, upper) or 'auto', got {value!r}"
                )
            auto.add(column)
        else:
            given[column] = value
    return given, auto, by


def group_key(agg: Aggregate, column: str, name: str) -> GroupKey:
    """The public GROUP BY key of ``agg`` named ``name`` (its alias, else its column), for
    ``column``'s per-group auto bounds: refused, free, when there is none or it is not public
    (its groups would then depend on the data)."""
    keys = [k for k in agg.keys if k.alias == name] or [k for k in agg.keys if k.column == name]
    request = f"bounds={{{column!r}: {{'auto': {name!r}}}}}"
    if len(keys) != 1:
        shown = ", ".join(repr(k.alias) for k in agg.keys) or "none"
        what = "several" if keys else "no"
        raise InvalidArgumentError(
            f"{request}: the query has {what} GROUP BY key {name!r} (its keys: {shown}); "
            "name one of its keys by its alias",
            cli=f"--bounds {column}=auto:{name}: the query has {what} GROUP BY key {name!r} "
            f"(its keys: {shown}); name one of its keys by its alias",
        )
    key = keys[0]
    if not key.is_public:
        fix = (
            f"declare its groups, e.g. WHERE {key.column} IN ('a', 'b') (or domains="
            f"{{{key.column!r}: [...]}}), or group by BIN({key.column}, …)"
        )
        raise InvalidArgumentError(
            f"{request}: the groups of {name!r} are not public (they would come from the "
            f"data, and so would which groups get bounds); {fix}",
            cli=f"--bounds {column}=auto:{name}: the groups of {name!r} are not public; "
            f"declare them, e.g. WHERE {key.column} IN ('a', 'b') (or --domain), or group by "
            f"BIN({key.column}, …)",
        )
    return key


def check_share(share: Number | None) -> Fraction:
    """The bounds' share of ε, exact, in (0, 1) (default :data:`DEFAULT_SHARE`)."""
    if share is None:
        return DEFAULT_SHARE
    value = exact(share, "bounds_share")
    if not 0 < value < 1:
        raise InvalidArgumentError(
            f"bounds_share must lie strictly between 0 and 1 (the share of epsilon spent on "
            f"finding the bounds), got {float(value):g}; e.g. bounds_share=0.1",
            cli=f"--bounds-share must lie strictly between 0 and 1, got {float(value):g}; "
            "e.g. --bounds-share 0.1",
        )
    return value


def _epsilon(epsilon: object) -> Fraction:
    if epsilon is None:
        raise InvalidArgumentError("a query needs a privacy cost: pass epsilon=0.1 (say)")
    if isinstance(epsilon, Budget):
        raise InvalidArgumentError(
            f"bounds='auto' splits epsilon between the bounds and the query; pass epsilon as a "
            f"number (and delta= where needed), not {epsilon!r}"
        )
    value = exact(epsilon, "epsilon")  # type: ignore[arg-type]
    if value <= 0:
        raise InvalidArgumentError(f"epsilon must be positive, got {float(value):g}")
    return value


# -- the bounds step ------------------------------------------------------------------------
@dataclass(frozen=True)
class _Step:
    column: str
    edges: tuple[Fraction, ...]
    plan: Aggregate  # the histogram query (uncompiled)
    loss: Budget
    tau: int
    scale: Fraction
    outer: tuple[Fraction, Fraction] | None
    key: GroupKey | None = None  # per group: the query's public key


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    return name


def histogram_plan(
    agg: Aggregate, column: str, edges: Sequence[Fraction], key: GroupKey | None = None
) -> Aggregate:
    """The bounds step's query over ``agg``'s rows (its table and WHERE): a COUNT per public
    bin of ``column`` — per (group, bin) with ``key``, a public key — with ``agg``'s privacy
    unit and contribution limits."""
    groups = () if key is None else (key,)
    taken = {k.alias for k in groups}
    alias = _fresh(_BIN, taken)
    return Aggregate(
        child=agg.child,
        keys=(*groups, GroupKey(column, edges=tuple(edges), alias=alias)),
        aggregates=(AggregateCall(_fresh(_COUNT, taken | {alias}), "count"),),
        privacy_unit=agg.privacy_unit,
        contribution=agg.contribution,
    )


@dataclass(frozen=True)
class _Limits:
    max_groups: int | None
    max_rows_per_group: int | None
    max_rows: int | None


def _steps(
    session: Session,
    agg: Aggregate,
    columns: Sequence[str],
    epsilon: Fraction,
    limits: _Limits,
    within: Mapping[str, tuple[Fraction, Fraction]] | None = None,
    by: Mapping[str, GroupKey] | None = None,
) -> list[_Step]:
    """Compile each column's bounds step (free: nothing is read) and its threshold; the outer
    range of a column is ``within``'s, else the session's (a catalog's: the owner's), else the
    bounds ``agg`` carries for it (a plan built with them; their hull if per group); ``by``
    the public key of each column found per group."""
    steps: list[_Step] = []
    for column in columns:
        # the session's range (a catalog's: the owner's) is the one a query compiles with;
        # a plan's own bounds only where the session has none (as Session.run resolves them)
        declared = session.bounds.get(column)
        if declared is None:
            declared = next((b for b in agg.bounds if b.column == column), None)
        outer = (declared.lower, declared.upper) if declared is not None else None
        if within is not None and column in within:
            outer = within[column]
        integer = agg.child.field(column).type == "integer"
        if outer is not None and outer[0] >= outer[1]:
            lo, hi = (float(v) for v in outer)
            raise InvalidArgumentError(
                f"the declared range of {column!r} is the single point [{lo:g}, {hi:g}]: there "
                f"are no bounds to find; pass bounds={{{column!r}: ({lo:g}, {hi:g})}}",
                cli=f"the declared range of {column!r} is the single point [{lo:g}, {hi:g}]: "
                f"there are no bounds to find; pass --bounds {column}={lo:g}:{hi:g}",
            )
        edges = grid(integer, outer)
        if len(edges) < 2 or edges[0] >= edges[-1]:
            raise InternalError(f"an empty grid for {column!r}")
        key = (by or {}).get(column)
        hist = histogram_plan(agg, column, edges, key)
        compiled = aggregate_of(
            session._compile(
                hist,
                epsilon,
                None,
                None,
                limits.max_groups,
                limits.max_rows_per_group,
                limits.max_rows,
            )
        )
        if compiled.budget is None or len(compiled.measurements) != 1:
            raise InternalError("the bounds step compiled to an unexpected measurement")
        m = compiled.measurements[0]
        if m.mechanism != "discrete_laplace" or m.statistic != "count":
            raise InternalError(f"the bounds step measures with {m.mechanism}, not Laplace")
        # τ over every released cell: with probability ≥ 1 − β no empty (group, bin) passes
        cells = (len(edges) - 1) * (1 if key is None else len(key.labels()))
        tau = threshold(m.scale, cells)
        steps.append(_Step(column, edges, hist, compiled.budget, tau, m.scale, outer, key))
    return steps


@dataclass(frozen=True)
class _Prepared:
    plan: Plan
    given: dict[str, Any]
    steps: list[_Step]
    main_epsilon: Fraction
    step_epsilon: Fraction
    total: Budget
    placeholder: dict[str, tuple[Fraction, Fraction]]
    pairs: dict[str, Any]  # the given bounds and the placeholders (per group where asked)


def plan_of(
    session: Session,
    query: str | Plan,
    bounds: Mapping[str, Any],
    domains: Mapping[str, Sequence[Any]] | None,
) -> Plan:
    """The plan of ``query`` with ``bounds``: SQL text is planned with them, unweighted (auto
    bounds refuse survey weights, so only ``weights=False`` gets here: a session's weights
    column must not weigh it again); a plan (a builder's, or :meth:`veil.Session.plan`'s) is
    its own — the bounds passed when it is compiled replace its own, exactly as in
    :meth:`veil.Session.run`, so the compiled query, its fingerprint and its charge are those
    of the same SQL query."""
    if isinstance(query, str):
        return session.plan(query, bounds=bounds, domains=domains, weights=False)
    return query


def audit_text(query: str | Plan, text: str | None) -> str:
    """What the ledger's audit trail names the query by in its steps' records."""
    if text is not None:
        return text
    return query if isinstance(query, str) else "a query plan"


def requested(
    session: Session,
    query: str | Plan,
    bounds: object,
    domains: Mapping[str, Sequence[Any]] | None,
) -> tuple[dict[str, Any], Plan, list[str], dict[str, GroupKey]]:
    """The auto request of ``bounds`` on ``query`` (free, nothing read): the pairs given
    beside it, the query planned with them, the auto columns in order and the public key of
    each column found per group."""
    given, auto, named = split_request(bounds)
    plan = plan_of(session, query, given, domains)
    agg = aggregate_of(plan)
    by = {column: group_key(agg, column, name) for column, name in sorted(named.items())}
    clamped = sorted({a.column for a in agg.aggregates if a.needs_bounds and a.column})
    if auto is None:
        columns = [c for c in clamped if c not in given]
        if not columns:
            raise InvalidArgumentError(
                "bounds='auto' finds bounds for the columns a query sums or averages, and "
                "this query clamps none without given bounds; drop bounds='auto'"
            )
    else:
        stray = sorted(auto - set(clamped))
        if stray:
            raise InvalidArgumentError(
                f"bounds={{{stray[0]!r}: 'auto'}}: no aggregate of this query clamps "
                f"{stray[0]!r}, so finding its bounds would spend budget for nothing; the "
                f"query clamps {clamped or 'no column'}"
            )
        columns = sorted(auto)
    return given, plan, columns, by


def _prepare(
    session: Session,
    query: str | Plan,
    *,
    epsilon: object,
    delta: Number | None,
    bounds: object,
    share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    limits: _Limits,
    quantile_buckets: int | None,
) -> _Prepared:
    """Everything decidable without data: the columns, the split, the grids, every compiled
    step and the main query at placeholder bounds (so its refusals come first, free)."""
    eps = _epsilon(epsilon)
    part = check_share(share)
    given, plan, columns, by = requested(session, query, bounds, domains)
    agg = aggregate_of(plan)
    step_eps = eps * part / len(columns)
    main_eps = eps * (1 - part)
    steps = _steps(session, agg, columns, step_eps, limits, by=by)
    placeholder = {s.column: s.outer if s.outer is not None else (Fraction(0), Fraction(1))
                   for s in steps}  # fmt: skip
    # the main query at placeholder bounds, per group where asked (so that its per-group
    # refusals, veil.compile.strata's, come now, free)
    pairs: dict[str, Any] = {**given, **placeholder}
    for s in steps:
        if s.key is not None:
            pairs[s.column] = {label: placeholder[s.column] for label in s.key.labels()}
    main_plan = plan_of(session, query, pairs, domains)
    compiled = aggregate_of(
        session._compile(
            main_plan,
            main_eps,
            delta,
            pairs,
            limits.max_groups,
            limits.max_rows_per_group,
            limits.max_rows,
            quantile_buckets,
        )
    )
    if compiled.budget is None:
        raise InternalError("the compiled aggregation has no charged loss")
    total = compiled.budget
    for s in steps:
        total = total + s.loss
    return _Prepared(plan, given, steps, main_eps, step_eps, total, placeholder, pairs)


def _check_whole(session: Session, total: Budget) -> None:
    """Refuse, free, a request whose whole cost — bounds steps and query together — is above
    the data owner's largest cost of one query (each part alone may be below it)."""
    if session.owner is not None:
        session.owner.check_cost(total)


def _check_covered(session: Session, total: Budget) -> None:
    """Refuse, before the first reservation, a request whose whole cost is above the owner's
    per-query cap or does not fit the grant."""
    _check_whole(session, total)
    if not session.ledger.has_grant(session.analyst, session.dataset):
        return  # the first reserve says so (LedgerError), before any data is read
    if not session.ledger.covers(session.analyst, session.dataset, total):
        raise BudgetExhaustedError(
            total, session.remaining(), analyst=session.analyst, dataset=session.dataset
        )


def _run_step(
    session: Session,
    step: _Step,
    limits: _Limits,
    source: RandomSource | None,
    epsilon: Fraction,
    text: str,
) -> ChosenBounds:
    """Run one bounds step (an ordinary, charged, cached veil query) and choose from it."""
    result = session.run(
        step.plan,
        epsilon=epsilon,
        max_groups=limits.max_groups,
        max_rows_per_group=limits.max_rows_per_group,
        max_rows=limits.max_rows,
        source=source,
        text=f"-- veil bounds: auto bounds for {step.column!r} of: {text}",
    )
    # rows: one per bin (per group and bin: group-major), in the public keys' order;
    # stats: the noisy integer counts
    counts = [int(s["count"]) for s in result.stats]
    bins = len(step.edges) - 1
    labels = () if step.key is None else step.key.labels()
    if len(counts) != bins * max(1, len(labels)):
        raise InternalError(f"the bounds step released {len(counts)} counts, not {bins}×groups")
    rows_of = [counts[g * bins : (g + 1) * bins] for g in range(max(1, len(labels)))]
    picked = [choose(step.edges, c, step.tau, step.scale) for c in rows_of]
    if step.key is not None:
        picked = _unoccupied_take_the_hull(step, picked, rows_of)
    groups: tuple[GroupBounds, ...] = ()
    if step.key is None:
        one = picked[0]
        key, summary = None, (one.lower, one.upper, one.below, one.above, one.bar)
        rows = one.rows
    else:
        key = step.key.alias
        groups = tuple(
            GroupBounds(label, c.lower, c.upper, c.below, c.above, c.bar, c.rows)
            for label, c in zip(labels, picked, strict=True)
        )
        rows, summary = _over_groups(picked)
    lower, upper, below, above, bar = summary
    return ChosenBounds(
        column=step.column,
        lower=lower,
        upper=upper,
        loss=step.loss,
        cost=result.cost,
        cached=result.cached,
        clamped_below=below,
        clamped_above=above,
        clamped_bar=bar,
        rows=rows,
        bins=bins,
        threshold=step.tau,
        outer=step.outer,
        key=key,
        groups=groups,
    )


def _unoccupied_take_the_hull(
    step: _Step, picked: list[Choice], rows_of: Sequence[Sequence[int]]
) -> list[Choice]:
    """Per group: a group none of whose bins passed τ (an empty or nearly empty group) takes
    the hull of the occupied groups' bounds, not the bin its noise happens to favour — which
    could lie anywhere on the grid and, through the column's hull, coarsen every group's
    fixed-point grid; when no group is occupied, every group takes the choice from the
    pooled counts (the histogram of the whole column). Post-processing of the released
    counts; total (the hull's ends are edges of the grid)."""
    edges = step.edges
    occupied = [c for c in picked if c.occupied > 0]
    if occupied:
        lower, upper = min(c.lower for c in occupied), max(c.upper for c in occupied)
    else:
        pooled = [sum(column) for column in zip(*rows_of, strict=True)]
        whole = choose(edges, pooled, step.tau, step.scale)
        lower, upper = whole.lower, whole.upper
    first, last = edges.index(lower), edges.index(upper) - 1
    return [
        c if c.occupied > 0 else spanning(edges, counts, first, last, step.scale)
        for c, counts in zip(picked, rows_of, strict=True)
    ]


def _over_groups(
    picked: Sequence[Choice],
) -> tuple[int, tuple[Fraction, Fraction, float, float, float]]:
    """The groups' choices together: the noisy rows, the hull and the clamped shares over all
    the groups' rows (each group's share weighted by its noisy rows; the bars' variances add,
    the groups' noise being independent)."""
    rows = sum(c.rows for c in picked)
    weight = [c.rows / rows if rows > 0 else 0.0 for c in picked]
    pairs = list(zip(weight, picked, strict=True))
    bar = math.sqrt(sum((w * c.bar) ** 2 for w, c in pairs))
    return rows, (
        min(c.lower for c in picked),
        max(c.upper for c in picked),
        min(1.0, sum(w * c.below for w, c in pairs)),
        min(1.0, sum(w * c.above for w, c in pairs)),
        min(1.0, bar),
    )


def find_bounds(
    session: Session,
    table: str,
    columns: Sequence[str],
    *,
    epsilon: object,
    where: str | None = None,
    within: Mapping[str, tuple[Any, Any]] | None = None,
    max_groups: int | None = None,
    max_rows_per_group: int | None = None,
    max_rows: int | None = None,
    source: RandomSource | None = None,
    by: str | None = None,
    domains: Mapping[str, Sequence[Any]] | None = None,
) -> list[ChosenBounds]:
    """The bounds of ``columns`` of ``table`` (rows matching SQL condition ``where``, if
    given), each column's step at ``epsilon / len(columns)`` — ``veil bounds``; ``within``
    gives outer ranges (column → (lower, upper)) the bounds must stay in, narrowing a data
    owner's (refused, free, if it widens them); ``by`` a public GROUP BY key (a column with a
    declared domain — ``domains``, the session's, or ``where``'s ``col IN (…)`` — or
    ``BIN(col, e0, …) AS name``) to find the bounds per group of. The steps are
    the ones :func:`auto_sql` runs, so a query with ``bounds='auto'`` over the same rows whose
    share of ε equals a step's ε is answered from the cache for its bounds."""
    limits = _Limits(max_groups, max_rows_per_group, max_rows)
    eps = _epsilon(epsilon)
    names = list(dict.fromkeys(columns))
    if not names:
        raise InvalidArgumentError(
            "name at least one column to find bounds for",
            cli="name at least one column: veil bounds TABLE COLUMN [COLUMN ...]",
        )
    condition = "" if where is None else f" WHERE {_condition(where)}"
    if by is None:
        plan = session.plan(f"SELECT COUNT(*) AS n FROM {_quoted(table)}{condition}")
    else:
        key, name = _key(by)
        plan = session.plan(
            f"SELECT {key}, COUNT(*) AS n FROM {_quoted(table)}{condition} GROUP BY {name}",
            domains=domains,
        )
    agg = aggregate_of(plan)
    keys = {c: group_key(agg, c, agg.keys[0].alias) for c in names} if by is not None else None
    for column in names:
        agg.child.field(column)  # an unknown column: SchemaError, free
    ranges = {c: ColumnBounds(c, lo, hi) for c, (lo, hi) in (within or {}).items()}
    stray = sorted(set(ranges) - set(names))
    if stray:
        raise InvalidArgumentError(
            f"a range is given for {stray[0]!r}, which is not among the columns to bound "
            f"{names}; drop it or add the column",
        )
    if session.owner is not None:
        session.owner.check_bounds({c: (b.lower, b.upper) for c, b in ranges.items()})
    step_eps = eps / len(names)
    outer = {c: (b.lower, b.upper) for c, b in ranges.items()}
    steps = _steps(session, agg, names, step_eps, limits, outer, keys)
    total = steps[0].loss
    for s in steps[1:]:
        total = total + s.loss
    _check_covered(session, total)
    grouped = f" BY {by}" if by is not None else ""
    text = f"veil bounds {table} {' '.join(names)}{condition}{grouped}"
    return [_run_step(session, s, limits, source, step_eps, text) for s in steps]


def _condition(where: object) -> str:
    """``where`` (SQL text) as ONE row condition, regenerated from its parse tree without
    comments (it is the whole WHERE clause: nothing around it to bind tighter): a second
    clause, a statement or a comment that would swallow the rest of the query is refused,
    free, never spliced."""
    import sqlglot
    from sqlglot import exp

    if not isinstance(where, str) or not where.strip():
        raise InvalidArgumentError(
            f"where={where!r} must be a non-empty SQL condition, e.g. where='age >= 18'",
            cli=f"--where {where!r} must be a non-empty SQL condition, e.g. --where 'age >= 18'",
        )
    try:
        commented = any(token.comments for token in sqlglot.tokenize(where, read="duckdb"))
        tree = None if commented else sqlglot.parse_one(where, read="duckdb", into=exp.Condition)
    except Exception:  # ParseError, TokenError, or sqlglot's own slip on odd text
        tree = None
    if not isinstance(tree, exp.Expr) or isinstance(tree, exp.Query):
        raise InvalidArgumentError(
            f"where={where!r} must be one SQL condition on the table's rows (e.g. "
            "where=\"age >= 18 AND state IN ('CA', 'NY')\"), with no other clause, statement or "
            "comment",
            cli=f"--where {where!r} must be one SQL condition on the table's rows (e.g. "
            "--where \"age >= 18 AND state IN ('CA', 'NY')\"), with no other clause, statement "
            "or comment",
        )
    return tree.sql(dialect="duckdb", comments=False)


def _key(by: object) -> tuple[str, str]:
    """The key expression ``by`` (a column, or an expression with an alias) as the SELECT
    list and the GROUP BY clause write it, regenerated from its parse tree: refused, free,
    otherwise."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(by, dialect="duckdb") if isinstance(by, str) else None
    except Exception:  # ParseError, TokenError, or sqlglot's own slip on odd text
        tree = None
    if isinstance(tree, exp.Alias):
        return tree.sql(dialect="duckdb", comments=False), _quoted(tree.alias)
    if isinstance(tree, exp.Column):
        text = tree.sql(dialect="duckdb", comments=False)
        return text, text
    raise InvalidArgumentError(
        f"by={by!r} must be a column with a declared domain (by='region') or a binned key "
        "with a name (by='BIN(age, 0, 30, 60, 120) AS band')",
        cli=f"--by {by!r} must be a column with a declared domain (--by region) or a binned "
        "key with a name (--by 'BIN(age, 0, 30, 60, 120) AS band')",
    )


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def step_note(s: _Step, tau: str | None = None) -> str:
    """What explain says of bounds step ``s``; ``tau`` the threshold as shown (its own by
    default)."""
    ranged = (
        f"within the declared [{float(s.outer[0]):g}, {float(s.outer[1]):g}]"
        if s.outer is not None
        else "on the public power-of-two grid"
    )
    groups = (
        ""
        if s.key is None
        else f" for each of the {len(s.key.labels())} groups of {s.key.alias!r} (one "
        "histogram query: the groups compose in parallel)"
    )
    return (
        f"auto bounds for {s.column!r}: a noisy histogram of {len(s.edges) - 1} "
        f"log-scale bins {ranged}{groups}, costing {s.loss}; bins with a noisy count ≥ "
        f"{s.tau if tau is None else tau} set the bounds"
        f"{' of each group' if s.key is not None else ''} (rows in sparser tails are clamped)"
    )


def placeholders(prepared: _Prepared) -> str:
    """The placeholder bounds explain shows the error bars at, as text."""
    return ", ".join(
        f"{c}: [{float(lo):g}, {float(hi):g}]"
        for c, (lo, hi) in sorted(prepared.placeholder.items())
    )


def auto_sql(
    session: Session,
    query: str | Plan,
    *,
    epsilon: object,
    delta: Number | None,
    bounds: object,
    bounds_share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    max_groups: int | None,
    max_rows_per_group: int | None,
    max_rows: int | None,
    consistent: bool,
    source: RandomSource | None,
    progress: Any,
    quantile_buckets: int | None,
    text: str | None = None,
) -> Result:
    """:meth:`veil.Session.sql` (or :meth:`~veil.Session.run` on a plan) with auto bounds:
    refuse what is decidable first (free), then run each bounds step, then the query at the
    chosen bounds with ``ε·(1 − share)``. A plan and the SQL of the same question run the same
    steps and the same query: the same charges, fingerprints and cached answers.

    The returned result's ``cost`` is what was charged now in all (steps and query), its
    ``auto_bounds`` the :class:`ChosenBounds`, its notes one line per column."""
    limits = _Limits(max_groups, max_rows_per_group, max_rows)
    prepared = _prepare(
        session, query, epsilon=epsilon, delta=delta, bounds=bounds, share=bounds_share,
        domains=domains, limits=limits, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    _check_covered(session, prepared.total)
    shown = audit_text(query, text)
    chosen = [
        _run_step(session, s, limits, source, prepared.step_epsilon, shown) for s in prepared.steps
    ]
    pairs = {**prepared.given, **{c.column: c.value for c in chosen}}
    plan = plan_of(session, query, pairs, domains)
    if text is None and isinstance(query, str):
        text = query
    result = session.run(
        plan,
        epsilon=prepared.main_epsilon,
        delta=delta,
        bounds=pairs,
        max_groups=max_groups,
        max_rows_per_group=max_rows_per_group,
        max_rows=max_rows,
        consistent=consistent,
        source=source,
        progress=progress,
        text=text,
        quantile_buckets=quantile_buckets,
    )
    cost = result.cost
    for c in chosen:
        cost = cost + c.cost
    return replace(
        result,
        cost=cost,
        cached=result.cached and all(c.cached for c in chosen),
        notes=(*(c.line() for c in chosen), *result.notes),
        auto_bounds=tuple(chosen),
    )


def auto_explain(
    session: Session,
    query: str | Plan,
    *,
    epsilon: object,
    delta: Number | None,
    bounds: object,
    bounds_share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    max_groups: int | None,
    max_rows_per_group: int | None,
    max_rows: int | None,
    quantile_buckets: int | None,
) -> Explanation:
    """:meth:`veil.Session.explain` with auto bounds: the whole cost (bounds steps and query),
    whether the grant covers it, and what each step will do — nothing read, nothing charged.
    The error bars are the query's at placeholder bounds (the declared range, else [0, 1]):
    the real ones depend on the bounds the step chooses."""
    notes: list[str] = []
    if epsilon is None:
        epsilon = 1
        notes.append("no epsilon given: costs and error bars are shown for epsilon=1")
    limits = _Limits(max_groups, max_rows_per_group, max_rows)
    prepared = _prepare(
        session, query, epsilon=epsilon, delta=delta, bounds=bounds, share=bounds_share,
        domains=domains, limits=limits, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    _check_whole(session, prepared.total)
    pairs = prepared.pairs
    explanation = session.explain(
        query,
        weights=False,  # unweighted, as the query runs (see plan_of)
        epsilon=prepared.main_epsilon,
        delta=delta,
        bounds=pairs,
        max_groups=max_groups,
        max_rows_per_group=max_rows_per_group,
        max_rows=max_rows,
        domains=domains,
        quantile_buckets=quantile_buckets,
    )
    notes.extend(step_note(s) for s in prepared.steps)
    notes.append(
        f"the query itself costs {explanation.cost}; its error bars are shown at placeholder "
        f"bounds {placeholders(prepared)} and depend on the bounds chosen"
    )
    remaining = explanation.remaining
    covered = explanation.covered
    if remaining is not None:
        covered = session.ledger.covers(session.analyst, session.dataset, prepared.total)
    return replace(
        explanation,
        cost=prepared.total,
        covered=covered,
        notes=(*notes, *explanation.notes),
    )
