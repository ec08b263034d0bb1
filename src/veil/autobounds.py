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

Not done: bounds per group of a GROUP BY (one range for the whole column is found, over the
query's WHERE rows), and combining ``bounds="auto"`` with accuracy targets.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from veil.accounting.budget import Budget, Number, exact
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
    "ChosenBounds",
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
BETA = Fraction(1, 20)
"""β: the chance that an empty bin's noise alone passes the threshold (all bins together)."""
HIGH = 62
"""The grid's outermost edges are ±2^HIGH (values beyond fall outside every bin)."""
LOW = -16
"""A real column's finest power of two: ``[0, 2^LOW)`` is the bin of the values near 0."""
_BIN = "bin"
_COUNT = "n"


# -- the request ----------------------------------------------------------------------------
def is_auto(bounds: object) -> bool:
    """Whether ``bounds`` asks for auto bounds (``"auto"`` or a mapping with an ``"auto"``)."""
    if isinstance(bounds, str):
        return True  # "auto" or a typo of it: split_request says which
    return isinstance(bounds, Mapping) and any(isinstance(v, str) for v in bounds.values())


def split_request(bounds: object) -> tuple[dict[str, Any], set[str] | None]:
    """``bounds`` as (the given pairs, the auto columns — ``None`` for every clamped column)."""
    if isinstance(bounds, str):
        if bounds != AUTO:
            raise InvalidArgumentError(
                f"bounds={bounds!r} is not understood; pass bounds='auto' (every column the "
                "query clamps) or bounds={'income': 'auto'} or bounds={'income': (0, 1e6)}"
            )
        return {}, None
    if not isinstance(bounds, Mapping):
        raise InvalidArgumentError(f"bounds must be 'auto' or a mapping, got {bounds!r}")
    given: dict[str, Any] = {}
    auto: set[str] = set()
    for column, value in bounds.items():
        if isinstance(value, str):
            if value != AUTO:
                raise InvalidArgumentError(
                    f"bounds for {column!r} must be a pair (lower, upper) or 'auto', got {value!r}"
                )
            auto.add(column)
        else:
            given[column] = value
    return given, auto


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


# -- the public grid ------------------------------------------------------------------------
def grid(integer: bool, outer: tuple[Fraction, Fraction] | None = None) -> tuple[Fraction, ...]:
    """The bin edges for a column: signed powers of two from ``2^0`` (integer) or ``2^LOW``
    (real) up to ``2^HIGH``, with 0; cut to ``outer`` = (lower, upper) when declared (its ends
    become the outermost edges). Public: a function of the type and the declared range."""
    low = 0 if integer else LOW
    powers = [Fraction(2) ** k for k in range(low, HIGH + 1)]
    edges = sorted({Fraction(0), *powers, *(-p for p in powers)})
    if outer is None:
        return tuple(edges)
    lo, hi = outer
    if lo >= hi:
        return (lo, hi)  # one point: nothing to find (refused before any step, see _steps)
    inside = [e for e in edges if lo < e < hi]
    return (lo, *inside, hi)


def threshold(scale: Fraction, bins: int) -> int:
    """τ = ⌈s·ln(B/β)⌉: an empty bin's discrete-Laplace noise (scale ``s``) reaches τ with
    probability ≤ e^{−τ/s} ≤ β/B, so all ``bins`` together with probability ≤ β."""
    if scale <= 0 or bins < 1:
        raise InternalError(f"a threshold needs scale > 0 and bins ≥ 1, got {scale}, {bins}")
    return max(1, math.ceil(float(scale) * math.log(bins / float(BETA))))


@dataclass(frozen=True)
class Choice:
    """The post-processed choice from one noisy histogram."""

    lower: Fraction
    upper: Fraction
    below: float  # noisy estimate of the share of counted rows below ``lower``
    above: float  # … above ``upper``
    bar: float  # ≈95 % half-width of below + above (normal approximation)
    rows: int  # the noisy total count (clipped at 0)
    occupied: int  # how many bins passed the threshold


def choose(
    edges: Sequence[Fraction], counts: Sequence[int], tau: int, scale: Fraction = Fraction(1)
) -> Choice:
    """The bounds from noisy ``counts`` of the bins between ``edges`` (post-processing only;
    total: any integers give a pair lower < upper); ``scale`` the counts' Laplace scale, for
    the bar of the clamped share (a normal approximation of the summed noise, 95 %)."""
    if len(edges) != len(counts) + 1 or not counts:
        raise InternalError(f"{len(counts)} counts for {len(edges)} edges")
    occupied = [i for i, c in enumerate(counts) if c >= tau]
    # the seed: the bin with the largest noisy count (the first of ties), occupied or not
    seed = max(range(len(counts)), key=lambda i: (counts[i], -i))
    first, last = _grow(edges, occupied, seed)
    first, last = _toward_zero(edges, first, last)
    total = sum(counts)
    below = sum(counts[:first])
    above = sum(counts[last + 1 :])
    share = (lambda part: min(1.0, max(0.0, part / total))) if total > 0 else (lambda _: 0.0)
    outside = first + len(counts) - 1 - last  # bins summed into the two estimates
    bar = 1.96 * math.sqrt(outside * _variance(scale)) / total if total > 0 and outside else 0.0
    return Choice(
        edges[first],
        edges[last + 1],
        share(below),
        share(above),
        min(1.0, bar),
        max(0, total),
        len(occupied),
    )


GROWTH = 4
"""Absorbing an occupied bin may widen the bounds at most this many times (see :func:`_grow`)."""


def _grow(edges: Sequence[Fraction], occupied: Sequence[int], seed: int) -> tuple[int, int]:
    """Bins ``first..last``: from ``seed``, absorb the nearest occupied bin on either side
    (the one that widens less first) while absorbing it makes the range at most
    :data:`GROWTH` times wider. A neighbouring bin always qualifies (on the log grid it at
    most triples the width), so data spread over adjacent bins is taken whole; an isolated
    far bin — the rare empty bin whose noise passed τ, or a handful of outliers — is not, so
    it cannot blow the bounds (and the noise) up by orders of magnitude."""
    first = last = seed
    while True:
        lower = [i for i in occupied if i < first]
        upper = [i for i in occupied if i > last]
        width = edges[last + 1] - edges[first]
        options = []
        if lower:
            options.append((edges[last + 1] - edges[lower[-1]], lower[-1], last))
        if upper:
            options.append((edges[upper[0] + 1] - edges[first], first, upper[0]))
        options = [o for o in options if o[0] <= GROWTH * width]
        if not options:
            return first, last
        _, first, last = min(options)


def _variance(scale: Fraction) -> float:
    """The variance 2a/(1 − a)² of discrete Laplace noise of scale ``s`` (a = e^{−1/s})."""
    a = math.exp(-1 / float(scale))
    return 2 * a / (1 - a) ** 2


def _toward_zero(edges: Sequence[Fraction], first: int, last: int) -> tuple[int, int]:
    """Bins ``first..last`` widened to reach 0 (or the grid's edge nearest 0 on their side)
    when that widens them by at most a third: on a log grid the sparse bins near 0 would be
    clamped otherwise, and closing that gap costs little noise (income: [8192, 65536] becomes
    [0, 65536]; a year's [1024, 2048] stays)."""
    lo, hi = edges[first], edges[last + 1]
    width = hi - lo
    if lo > 0:
        z = next(i for i, e in enumerate(edges) if e >= 0)
        if edges[z] < lo and (hi - edges[z]) * 3 <= width * 4:
            return z, last
    elif hi < 0:
        z = max(i for i, e in enumerate(edges) if e <= 0)  # an edge index: bins end at z − 1
        if edges[z] > hi and (edges[z] - lo) * 3 <= width * 4:
            return first, z - 1
    return first, last


# -- the bounds step ------------------------------------------------------------------------
@dataclass(frozen=True)
class ChosenBounds:
    """The bounds chosen for one column, and what finding them cost.

    ``loss`` is the bounds step's privacy loss and ``cost`` what it was charged now (zero when
    answered from the cache, ``cached``); ``clamped`` the noisy estimate of the share of the
    column's counted rows that fall outside ``[lower, upper]`` (``clamped_below`` and
    ``clamped_above`` the two sides, ``clamped_bar`` its ≈95 % half-width); ``outer`` the
    declared range it stayed within, if any; ``bins`` and ``threshold`` the grid's size and
    the occupied-bin threshold τ."""

    column: str
    lower: Fraction
    upper: Fraction
    loss: Budget
    cost: Budget
    cached: bool
    clamped_below: float
    clamped_above: float
    clamped_bar: float
    rows: int
    bins: int
    threshold: int
    outer: tuple[Fraction, Fraction] | None = None

    @property
    def clamped(self) -> float:
        return self.clamped_below + self.clamped_above

    @property
    def pair(self) -> tuple[Fraction, Fraction]:
        return (self.lower, self.upper)

    def line(self) -> str:
        """One line for a result's notes."""
        state = "from the cache, free" if self.cached else f"charged {self.cost}"
        return (
            f"auto bounds for {self.column!r}: [{float(self.lower):g}, {float(self.upper):g}] "
            f"({state}; ≈{percent(self.clamped)} ± {percent(self.clamped_bar)} of its rows "
            f"expected clamped: {percent(self.clamped_below)} below, "
            f"{percent(self.clamped_above)} above)"
        )


def percent(share: float) -> str:
    """A share in [0, 1] as a percentage for people: ``0.25 %``, ``6.7 %``, ``100 %``."""
    value = 100 * share
    return f"{value:.0f} %" if value >= 10 else f"{value:.2g} %"


@dataclass(frozen=True)
class _Step:
    column: str
    edges: tuple[Fraction, ...]
    plan: Aggregate  # the histogram query (uncompiled)
    loss: Budget
    tau: int
    scale: Fraction
    outer: tuple[Fraction, Fraction] | None


def histogram_plan(agg: Aggregate, column: str, edges: Sequence[Fraction]) -> Aggregate:
    """The bounds step's query over ``agg``'s rows (its table and WHERE): a COUNT per public
    bin of ``column``, with ``agg``'s privacy unit and contribution limits."""
    return Aggregate(
        child=agg.child,
        keys=(GroupKey(column, edges=tuple(edges), alias=_BIN),),
        aggregates=(AggregateCall(_COUNT, "count"),),
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
) -> list[_Step]:
    """Compile each column's bounds step (free: nothing is read) and its threshold; the outer
    range of a column is ``within``'s, else the session's (a catalog's: the owner's)."""
    steps: list[_Step] = []
    for column in columns:
        declared = session.bounds.get(column)
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
        hist = histogram_plan(agg, column, edges)
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
        tau = threshold(m.scale, len(edges) - 1)
        steps.append(_Step(column, edges, hist, compiled.budget, tau, m.scale, outer))
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


def _prepare(
    session: Session,
    text: str,
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
    given, auto = split_request(bounds)
    eps = _epsilon(epsilon)
    part = check_share(share)
    plan = session.plan(text, bounds=given, domains=domains)
    agg = aggregate_of(plan)
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
    step_eps = eps * part / len(columns)
    main_eps = eps * (1 - part)
    steps = _steps(session, agg, columns, step_eps, limits)
    placeholder = {s.column: s.outer if s.outer is not None else (Fraction(0), Fraction(1))
                   for s in steps}  # fmt: skip
    pairs = {**given, **placeholder}
    main_plan = session.plan(text, bounds=pairs, domains=domains)
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
    return _Prepared(plan, given, steps, main_eps, step_eps, total, placeholder)


def _check_covered(session: Session, total: Budget) -> None:
    """Refuse, before the first reservation, a request whose whole cost does not fit."""
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
    # rows: one per bin, in grid order (public keys); stats: the noisy integer counts
    counts = [int(s["count"]) for s in result.stats]
    c = choose(step.edges, counts, step.tau, step.scale)
    return ChosenBounds(
        column=step.column,
        lower=c.lower,
        upper=c.upper,
        loss=step.loss,
        cost=result.cost,
        cached=result.cached,
        clamped_below=c.below,
        clamped_above=c.above,
        clamped_bar=c.bar,
        rows=c.rows,
        bins=len(step.edges) - 1,
        threshold=step.tau,
        outer=step.outer,
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
) -> list[ChosenBounds]:
    """The bounds of ``columns`` of ``table`` (rows matching SQL condition ``where``, if
    given), each column's step at ``epsilon / len(columns)`` — ``veil bounds``; ``within``
    gives outer ranges (column → (lower, upper)) the bounds must stay in, narrowing a data
    owner's (refused, free, if it widens them). The steps are
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
    condition = f" WHERE {where}" if where else ""
    plan = session.plan(f"SELECT COUNT(*) AS n FROM {_quoted(table)}{condition}")
    agg = aggregate_of(plan)
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
    steps = _steps(session, agg, names, step_eps, limits, outer)
    total = steps[0].loss
    for s in steps[1:]:
        total = total + s.loss
    _check_covered(session, total)
    text = f"veil bounds {table} {' '.join(names)}{condition}"
    return [_run_step(session, s, limits, source, step_eps, text) for s in steps]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def auto_sql(
    session: Session,
    text: str,
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
) -> Result:
    """:meth:`veil.Session.sql` with auto bounds: refuse what is decidable first (free), then
    run each bounds step, then the query at the chosen bounds with ``ε·(1 − share)``.

    The returned result's ``cost`` is what was charged now in all (steps and query), its
    ``auto_bounds`` the :class:`ChosenBounds`, its notes one line per column."""
    limits = _Limits(max_groups, max_rows_per_group, max_rows)
    prepared = _prepare(
        session, text, epsilon=epsilon, delta=delta, bounds=bounds, share=bounds_share,
        domains=domains, limits=limits, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    _check_covered(session, prepared.total)
    chosen = [
        _run_step(session, s, limits, source, prepared.step_epsilon, text) for s in prepared.steps
    ]
    pairs = {**prepared.given, **{c.column: c.pair for c in chosen}}
    plan = session.plan(text, bounds=pairs, domains=domains)
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
    text: str,
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
        session, text, epsilon=epsilon, delta=delta, bounds=bounds, share=bounds_share,
        domains=domains, limits=limits, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    pairs = {**prepared.given, **prepared.placeholder}
    explanation = session.explain(
        text,
        epsilon=prepared.main_epsilon,
        delta=delta,
        bounds=pairs,
        max_groups=max_groups,
        max_rows_per_group=max_rows_per_group,
        max_rows=max_rows,
        domains=domains,
        quantile_buckets=quantile_buckets,
    )
    for s in prepared.steps:
        ranged = (
            f"within the declared [{float(s.outer[0]):g}, {float(s.outer[1]):g}]"
            if s.outer is not None
            else "on the public power-of-two grid"
        )
        notes.append(
            f"auto bounds for {s.column!r}: a noisy histogram of {len(s.edges) - 1} "
            f"log-scale bins {ranged}, costing {s.loss}; bins with a noisy count ≥ "
            f"{s.tau} set the bounds (rows in sparser tails are clamped)"
        )
    notes.append(
        f"the query itself costs {explanation.cost}; its error bars are shown at placeholder "
        f"bounds {', '.join(f'{c}: [{float(lo):g}, {float(hi):g}]' for c, (lo, hi) in sorted(prepared.placeholder.items()))}"  # noqa: E501
        " and depend on the bounds chosen"
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
