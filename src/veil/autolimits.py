"""Contribution limits chosen under differential privacy: ``limits="auto"`` (issue 17).

A query over a table with many rows per privacy unit needs contribution limits; too low and
the bounding drops most of the data (bias), too high and the noise grows with them.
``limits="auto"`` spends a declared share (``limits_share``, default 0.1) of the query's ε to
choose them from the data, then answers the query with the rest. PipelineDP's parameter
tuning does the same outside the query (a histogram of contributions per unit, then the
bound minimising an error estimate); here it is one step of the query, charged and cached.

The mechanism:

1. **A public grid** of candidate total-rows bounds T: 1, 2, 3, 4, 6, 8, 12, 16, 24, …
   (powers of two and their 1.5 multiples) up to a cap — :data:`MAX_CAP`, lowered to the
   declared limits (the catalog's or the session's: ``max_rows``, else ``max_groups ×
   max_rows_per_group``), which the choice may therefore only lower.
2. **One ordinary veil query** measures the histogram of rows per unit: each unit's row
   count among the query's rows (its table and WHERE), binned on the grid (the last bin
   holds every count ≥ the cap), a COUNT per bin with every bin public (pure ε, no δ), and
   each unit bounded to one row (``max_groups = max_rows_per_group = 1``), so a unit adds 1
   to one bin: sensitivity 1. It runs through :meth:`veil.Session.run` like any query — its
   own ledger charge (``-- veil limits`` in the audit trail) and the answer cache.
3. **The choice is post-processing** of the noisy counts ``n_b``, a count below
   ``τ = ⌈s·ln(B/β)⌉`` taken as 0 (:func:`veil.autobounds.threshold`, β = 1/20: with
   probability ≥ 1 − β no empty bin passes, so a far empty bin's noise — weighted by its
   hundreds of rows — cannot fake a tail; units in bins of fewer than about τ units are not
   counted as dropped either): for each
   candidate T, the rows dropped ``D(T) = Σ_b n_b · max(0, r_b − T)`` (``r_b`` the midpoint
   of the bin's integer counts; the cap for the last bin) and the noise the query would get
   at T, ``N(T)`` — the main query compiled at ``max_rows = T`` (free: the compiler knows the
   scale as a function of the limits), each additive measurement's 68 % half-width divided
   by what one row can add to it, the largest of them, times the number of public groups
   (1 for unknown keys). T minimises ``D(T) + N(T)`` (the smallest of ties). The query then
   runs with ``max_rows = T`` and ``max_groups``, ``max_rows_per_group`` at T (lowered to
   the declared ones): under Laplace noise a total-rows bound alone is never worse than any
   (G, R) with G·R = T — the same L1 sensitivity, and it keeps every row they keep.

Contract. Preconditions: a privacy unit; ``0 < share < 1``; ε a positive number; no limit
given with the call. Postconditions: the limits step is ``ε·share``-DP (a histogram of public
bins where each unit counts once: :mod:`veil.compile.statistics` with G = R = 1), the main
query is the compiled query at ``ε·(1 − share)`` (and the query's δ), so by sequential
composition the whole is ``(ε, δ)``-DP; the choice is a function of the released counts and
of public compilations alone, and every value of the counts gives a valid T (the path after
the data is read is total). The grid, the cap and every refusal depend on the query, the
schema, the declared limits and the parameters only.

Estimates. ``ChosenLimits.dropped`` is ``D(T)`` over the noisy total ``Σ r_b·n_b``, with a
≈95 % bar from the counts' noise (normal approximation). It counts rows per unit over the
WHERE rows: rows a GROUP BY's public keys or the NULL rule leave out are counted too, and
declared G or R below T may drop more than it says.

``limits="auto_groups"`` chooses ``max_groups`` G and ``max_rows_per_group`` R separately —
where they matter: Gaussian noise (L2 sensitivity ``√G·R``, so many groups of few rows cost
less than ``G·R`` rows) and unknown keys (partition selection's threshold grows with G):

1. **Public grids** ``candidates(G_cap)`` and ``candidates(R_cap)`` (the caps: the declared G,
   R, T, else :data:`MAX_CAP`; G also at most the number of public groups), and the pairs
   with ``G·R ≤ max(GROUPS_CAP, G_cap, R_cap)``. The main query keeps the declared
   ``max_rows``, if any.
2. **Two ordinary veil queries**, ``ε·share/2`` each (all of it to one when the other grid
   has a single candidate), each with ``G = R = 1`` (a unit adds 1 to one bin: sensitivity
   1, pure ε): the histogram of distinct groups per unit (the GROUP BY columns' raw values,
   NULL a value), and of each unit's mean rows per group ``⌊rows / groups⌋`` — both per-unit
   keys (:class:`veil.plan.nodes.GroupKey` ``within=`` the key columns), functions of the
   unit's own rows after WHERE.
3. **The choice is post-processing** (:func:`choose_groups`): ``D(G, R)`` the rows dropped
   estimated from the two noisy histograms (counts below τ taken as 0), ``N(G, R)`` the
   noise of the main query compiled at ``(G, R)`` (as ``N(T)`` above); the pair minimising
   ``D + N`` runs.

Contract (``auto_groups``). Preconditions: as for ``auto``, and a GROUP BY. Postconditions:
the limits step is ``ε·share``-DP (two histograms of sensitivity 1, sequential composition),
the main query is compiled at ``ε·(1 − share)`` and the query's δ — at some pairs it takes
the Gaussian mechanism, whose loss is at most that (never more: checked per candidate) — so
the whole is ``(ε, δ)``-DP; the choice is a function of the released counts and of public
compilations alone, total for any counts; the grids, the caps and every refusal depend on
the query, the schema, the declared limits and the parameters only.

Not done: combining ``limits="auto"`` / ``"auto_groups"`` with ``bounds="auto"`` or accuracy
targets; a joint histogram of (groups, rows per group) per unit (the estimate takes them as
independent and a unit's groups as equally large).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from veil.accounting.budget import Budget, Number, exact
from veil.autobounds import _check_covered, _epsilon
from veil.autobounds_choice import _variance, percent, threshold
from veil.compile.statistics import per_row_bound
from veil.errors import InternalError, InvalidArgumentError
from veil.noise.families import family
from veil.plan.nodes import Aggregate, AggregateCall, GroupKey, Plan
from veil.plan.tree import aggregate_of

if TYPE_CHECKING:
    from veil.random import RandomSource
    from veil.release.explain import Explanation
    from veil.release.result import Result
    from veil.session import Session

__all__ = [
    "AUTO",
    "AUTO_GROUPS",
    "DEFAULT_SHARE",
    "MAX_CAP",
    "ChosenLimits",
    "auto_limits_explain",
    "auto_limits_sql",
    "candidates",
    "choose_groups",
    "choose_limit",
    "histogram_edges",
]

AUTO = "auto"
AUTO_GROUPS = "auto_groups"
DEFAULT_SHARE = Fraction(1, 10)
"""The share of the query's ε spent on the limits when ``limits_share`` is not given."""
MAX_CAP = 1024
"""The largest total-rows bound considered when no limit is declared."""
_TOP = Fraction(2) ** 62  # no unit has more rows: the last bin's closed upper edge
_LEVEL = 0.6827  # the half-width level that stands for one standard deviation of noise


# -- the public grid ------------------------------------------------------------------------
def candidates(cap: int) -> tuple[int, ...]:
    """The candidate bounds 1, 2, 3, 4, 6, 8, 12, … up to ``cap`` (``cap`` itself included)."""
    if cap < 1:
        raise InternalError(f"a cap of {cap} rows")
    out = {1}
    p = 2
    while p <= cap:
        out.add(p)
        if p + p // 2 <= cap:
            out.add(p + p // 2)
        p *= 2
    out.add(cap)
    return tuple(sorted(out))


def histogram_edges(grid: Sequence[int]) -> tuple[Fraction, ...]:
    """The bins of the rows-per-unit histogram: ``[c_i, c_{i+1})`` for the candidates and a
    last bin ``[cap, 2^62]`` holding every larger count."""
    return (*(Fraction(c) for c in grid), _TOP)


def _midpoints(grid: Sequence[int]) -> tuple[Fraction, ...]:
    """A representative row count per bin: the midpoint of its integers; the cap for the last."""
    mids = [Fraction(a + b - 1, 2) for a, b in itertools.pairwise(grid)]
    return (*mids, Fraction(grid[-1]))


@dataclass(frozen=True)
class Choice:
    """The post-processed choice from one noisy histogram."""

    limit: int
    dropped: float  # D(T) / noisy total rows, clipped to [0, 1]
    bar: float  # its ≈95 % half-width
    rows: float  # the noisy total of rows
    errors: tuple[tuple[int, float, float], ...]  # (T, D(T), N(T)) per candidate


def choose_limit(
    grid: Sequence[int], counts: Sequence[int], noise: Sequence[float], scale: Fraction
) -> Choice:
    """T minimising ``D(T) + noise[T]`` from noisy ``counts`` (one per bin of
    :func:`histogram_edges`); post-processing only, total: any integers give a candidate."""
    if len(counts) != len(grid) or len(noise) != len(grid) or not grid:
        raise InternalError(f"{len(counts)} counts, {len(noise)} noises for {len(grid)} bins")
    tau = threshold(scale, len(counts))
    n = [c if c >= tau else 0 for c in counts]  # an empty far bin's noise weighs like data
    mids = _midpoints(grid)
    errors = []
    for t, cost in zip(grid, noise, strict=True):
        d = float(sum(c * max(Fraction(0), m - t) for c, m in zip(n, mids, strict=True)))
        errors.append((t, d, cost))
    best = min(errors, key=lambda e: (e[1] + e[2], e[0]))
    total = float(sum(c * m for c, m in zip(n, mids, strict=True)))
    t = best[0]
    weights = [float(max(Fraction(0), m - t)) if c else 0.0 for c, m in zip(n, mids, strict=True)]
    spread = 1.96 * math.sqrt(_variance(scale) * sum(w * w for w in weights))
    share = min(1.0, best[1] / total) if total > 0 else 0.0
    bar = min(1.0, spread / total) if total > 0 else 0.0
    return Choice(t, share, bar, total, tuple(errors))


# -- the request ----------------------------------------------------------------------------
def check_request(limits: object, share: Number | None) -> Fraction:
    """``limits`` is ``"auto"`` or ``"auto_groups"``; the share of ε, exact, in (0, 1)."""
    if limits not in (AUTO, AUTO_GROUPS):
        raise InvalidArgumentError(
            f"limits={limits!r} is not understood; pass limits='auto' (choose max_rows from the "
            "data), limits='auto_groups' (choose max_groups and max_rows_per_group) or give "
            "max_rows= / max_groups= / max_rows_per_group=",
            cli=f"--limits {limits} is not understood; pass --limits auto or --limits auto_groups",
        )
    if share is None:
        return DEFAULT_SHARE
    value = exact(share, "limits_share")
    if not 0 < value < 1:
        raise InvalidArgumentError(
            f"limits_share must lie strictly between 0 and 1 (the share of epsilon spent on "
            f"choosing the limits), got {float(value):g}; e.g. limits_share=0.1",
            cli=f"--limits-share must lie strictly between 0 and 1, got {float(value):g}; "
            "e.g. --limits-share 0.1",
        )
    return value


def refuse_stray_share(share: Number | None) -> None:
    if share is not None:
        raise InvalidArgumentError(
            "limits_share is the share of epsilon spent on choosing the contribution limits, "
            "but limits is not 'auto'; pass limits='auto' or drop limits_share",
            cli="--limits-share needs --limits auto",
        )


def _caps(session: Session) -> tuple[int | None, int | None, int]:
    """(declared G, declared R, cap of T): the catalog's limits, else the session's."""
    declared = session.owner if session.owner is not None else session.contribution
    if declared is None:
        return None, None, MAX_CAP
    g, r, t = declared.max_groups, declared.max_rows_per_group, declared.max_rows
    cap = MAX_CAP
    if g is not None and r is not None:
        cap = min(cap, g * r)
    if t is not None:
        cap = min(cap, t)
    return g, r, cap


@dataclass(frozen=True)
class ChosenLimits:
    """The limits chosen, and what choosing them cost.

    ``max_rows`` is the total-rows bound T chosen, ``max_groups`` / ``max_rows_per_group``
    the limits the query ran with (T, or the declared ones below it); ``dropped`` the noisy
    estimate of the share of rows the bounding drops at T, ``dropped_bar`` its ≈95 %
    half-width; ``loss`` the step's privacy loss and ``cost`` what it was charged now (zero
    when answered from the cache, ``cached``); ``cap`` the largest candidate; ``mode``
    ``"auto"`` or ``"auto_groups"`` (then ``max_rows`` is ``G·R``, or the declared bound below
    it, and ``cap`` the largest ``G`` times the largest ``R`` candidate)."""

    max_rows: int
    max_groups: int
    max_rows_per_group: int
    dropped: float
    dropped_bar: float
    rows: float
    loss: Budget
    cost: Budget
    cached: bool
    cap: int
    mode: str = AUTO

    def line(self) -> str:
        state = "from the cache" if self.cached else f"cost {self.loss}"
        if self.mode == AUTO_GROUPS:
            return (
                f"auto limits: max_groups={self.max_groups}, max_rows_per_group="
                f"{self.max_rows_per_group} (auto_groups; {state}; ≈{percent(self.dropped)} ± "
                f"{percent(self.dropped_bar)} of the rows expected dropped by the bounding)"
            )
        return (
            f"auto limits: max_rows={self.max_rows} (max_groups={self.max_groups}, "
            f"max_rows_per_group={self.max_rows_per_group}; {state}; ≈{percent(self.dropped)}"
            f" ± {percent(self.dropped_bar)} of the rows expected dropped by the bounding, "
            f"candidates 1–{self.cap})"
        )


@dataclass(frozen=True)
class _Prepared:
    plan: Plan
    hist: Aggregate
    grid: tuple[int, ...]
    step_loss: Budget
    step_scale: Fraction
    step_epsilon: Fraction
    main_epsilon: Fraction
    noise: tuple[float, ...]
    limits: tuple[tuple[int, int, int], ...]  # (T, G, R) per candidate
    total: Budget


def _noise(agg: Aggregate) -> float:
    """The noise of the compiled query in rows: per additive measurement its 68 % half-width
    over what one row adds, the largest, times the public groups (1 for unknown keys)."""
    worst = 0.0
    for m in agg.measurements:
        if m.statistic not in ("count", "count_units", "sum", "sum_squares"):
            continue
        if m.mechanism not in ("discrete_laplace", "discrete_gaussian"):
            continue
        per_row = float(per_row_bound(m.statistic, m.limit))
        worst = max(worst, family(m.mechanism).halfwidth(m.scale, _LEVEL) / per_row)
    groups = 1
    if agg.public_keys:
        for k in agg.keys:
            groups *= len(k.labels())
    return worst * groups


def _checked(
    session: Session,
    limits: object,
    share: Number | None,
    epsilon: object,
    given: tuple[int | None, int | None, int | None],
) -> tuple[Fraction, Fraction]:
    """The refusals every mode shares (free, before anything is read): the request, no limit
    given with it, ε, a privacy unit. Returns (share, ε)."""
    part = check_request(limits, share)
    if any(v is not None for v in given):
        names = ("max_groups", "max_rows_per_group", "max_rows")
        name, value = next((n, v) for n, v in zip(names, given, strict=True) if v is not None)
        raise InvalidArgumentError(
            f"limits={limits!r} chooses the contribution limits, but {name}={value} is given too; "
            f"drop {name} (limits={limits!r} stays within the catalog's limits) or drop "
            f"limits={limits!r}",
            cli=f"--limits {limits} chooses the limits; drop --{name.replace('_', '-')}",
        )
    eps = _epsilon(epsilon)
    if session.privacy_unit is None:
        raise InvalidArgumentError(
            f"limits={limits!r} chooses how many rows each privacy unit keeps, but the session has "
            "no privacy unit (each row is a unit: nothing to bound); pass privacy_unit= to "
            f"the session, or drop limits={limits!r}",
            cli=f"--limits {limits} needs a privacy unit: pass --privacy-unit user_id (say)",
        )
    return part, eps


def _prepare(
    session: Session,
    query: str | Plan,
    *,
    epsilon: object,
    delta: Number | None,
    bounds: Any,
    limits: object,
    share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    given: tuple[int | None, int | None, int | None],
    quantile_buckets: int | None,
) -> _Prepared:
    """Everything decidable without data: the request, the grid, the histogram step and the
    main query compiled at every candidate (so its refusals come first, free)."""
    part, eps = _checked(session, limits, share, epsilon, given)
    g_cap, r_cap, cap = _caps(session)
    if cap <= 1:
        raise InvalidArgumentError(
            "limits='auto' has nothing to choose: the declared limits allow one row per unit; "
            "drop limits='auto'",
            cli="--limits auto has nothing to choose: the declared limits allow one row per unit",
        )
    plan = query if isinstance(query, Plan) else session.plan(query, bounds=bounds, domains=domains)
    agg = aggregate_of(plan)
    step_eps = eps * part
    main_eps = eps * (1 - part)
    grid = candidates(cap)
    if session.privacy_unit is None:
        raise InternalError("no privacy unit after the checks")
    hist = Aggregate(
        child=agg.child,
        keys=(
            GroupKey(
                session.privacy_unit, edges=histogram_edges(grid), alias="rows", per_unit=True
            ),
        ),
        aggregates=(AggregateCall("n", "count"),),
        privacy_unit=session.privacy_unit,
    )
    compiled_hist = aggregate_of(session._compile(hist, step_eps, None, None, 1, 1, None))
    ms = compiled_hist.measurements
    if compiled_hist.budget is None or len(ms) != 1 or ms[0].mechanism != "discrete_laplace":
        raise InternalError("the limits step compiled to an unexpected measurement")
    if ms[0].sensitivity != 1:
        raise InternalError(f"the limits step's sensitivity is {ms[0].sensitivity}, not 1")
    noise: list[float] = []
    chosen: list[tuple[int, int, int]] = []
    budget: Budget | None = None
    for t in grid:
        g = t if g_cap is None else min(t, g_cap)
        r = t if r_cap is None else min(t, r_cap)
        compiled = aggregate_of(
            session._compile(plan, main_eps, delta, bounds, g, r, t, quantile_buckets)
        )
        if compiled.budget is None:
            raise InternalError("the compiled aggregation has no charged loss")
        budget = compiled.budget if budget is None else budget
        if compiled.budget != budget:
            raise InternalError("the query's loss depends on its limits")
        noise.append(_noise(compiled))
        chosen.append((t, g, r))
    if budget is None:
        raise InternalError("no candidate limits")
    if not any(noise):
        raise InvalidArgumentError(
            "limits='auto' weighs rows dropped against the noise of counts and sums, and this "
            "query has none (a quantile or a mode alone); give max_rows= instead"
        )
    return _Prepared(
        plan, hist, grid, compiled_hist.budget, ms[0].scale, step_eps, main_eps,
        tuple(noise), tuple(chosen), compiled_hist.budget + budget,
    )  # fmt: skip


def auto_limits_sql(
    session: Session,
    query: str | Plan,
    *,
    epsilon: object,
    delta: Number | None,
    bounds: Any,
    limits: object,
    limits_share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    given: tuple[int | None, int | None, int | None],
    consistent: bool,
    source: RandomSource | None,
    progress: Any,
    quantile_buckets: int | None,
    text: str | None = None,
) -> Result:
    """:meth:`veil.Session.sql` (or :meth:`~veil.Session.run`) with auto limits: refuse what
    is decidable first (free), then run the histogram step, then the query at the chosen
    limits with ``ε·(1 − share)``.

    The result's ``cost`` is what was charged now in all, ``auto_limits`` the
    :class:`ChosenLimits`, and its notes say the choice and the expected rows dropped."""
    if limits == AUTO_GROUPS:
        return _groups_sql(
            session, query, epsilon=epsilon, delta=delta, bounds=bounds, limits=limits,
            limits_share=limits_share, domains=domains, given=given, consistent=consistent,
            source=source, progress=progress, quantile_buckets=quantile_buckets,
            text=text if text is not None or not isinstance(query, str) else query,
        )  # fmt: skip
    p = _prepare(
        session, query, epsilon=epsilon, delta=delta, bounds=bounds, limits=limits,
        share=limits_share, domains=domains, given=given, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    if text is None and isinstance(query, str):
        text = query
    _check_covered(session, p.total)
    step = session.run(
        p.hist,
        epsilon=p.step_epsilon,
        max_groups=1,
        max_rows_per_group=1,
        source=source,
        text=f"-- veil limits: rows per unit for: {text or 'a query plan'}",
    )
    # rows: one per bin, in grid order (public keys); stats: the noisy integer counts
    counts = [int(s["count"]) for s in step.stats]
    c = choose_limit(p.grid, counts, p.noise, p.step_scale)
    t, g, r = next(x for x in p.limits if x[0] == c.limit)
    result = session.run(
        p.plan,
        epsilon=p.main_epsilon,
        delta=delta,
        bounds=bounds,
        max_groups=g,
        max_rows_per_group=r,
        max_rows=t,
        consistent=consistent,
        source=source,
        progress=progress,
        text=text,
        quantile_buckets=quantile_buckets,
    )
    chosen = ChosenLimits(
        t, g, r, c.dropped, c.bar, c.rows, p.step_loss, step.cost, step.cached, p.grid[-1]
    )
    return replace(
        result,
        cost=result.cost + step.cost,
        cached=result.cached and step.cached,
        notes=(chosen.line(), *result.notes),
        auto_limits=chosen,
    )


def auto_limits_explain(
    session: Session,
    query: str | Plan,
    *,
    epsilon: object,
    delta: Number | None,
    bounds: Any,
    limits: object,
    limits_share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    given: tuple[int | None, int | None, int | None],
    quantile_buckets: int | None,
) -> Explanation:
    """:meth:`veil.Session.explain` with auto limits: the whole cost (the step and the query),
    whether the grant covers it, and what the step will do — nothing read, nothing charged.
    The error bars are the query's at the largest candidate (the noisiest choice)."""
    notes: list[str] = []
    if epsilon is None:
        epsilon = 1
        notes.append("no epsilon given: costs and error bars are shown for epsilon=1")
    if limits == AUTO_GROUPS:
        return _groups_explain(
            session, query, epsilon=epsilon, delta=delta, bounds=bounds, limits=limits,
            limits_share=limits_share, domains=domains, given=given,
            quantile_buckets=quantile_buckets, notes=notes,
        )  # fmt: skip
    p = _prepare(
        session, query, epsilon=epsilon, delta=delta, bounds=bounds, limits=limits,
        share=limits_share, domains=domains, given=given, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    t, g, r = p.limits[-1]
    explanation = session.explain(
        p.plan,
        epsilon=p.main_epsilon,
        delta=delta,
        bounds=bounds,
        max_groups=g,
        max_rows_per_group=r,
        max_rows=t,
        domains=domains,
        quantile_buckets=quantile_buckets,
    )
    notes.append(
        f"auto limits: a noisy histogram of rows per unit over {len(p.grid)} bins "
        f"(max_rows candidates {', '.join(map(str, p.grid))}), costing {p.step_loss}; the "
        "candidate with the fewest expected rows dropped plus noise is chosen"
    )
    notes.append(
        f"the query itself costs {explanation.cost}; its error bars are shown at the largest "
        f"candidate, max_rows={t}, and shrink with the limit chosen"
    )
    covered = explanation.covered
    if explanation.remaining is not None:
        covered = session.ledger.covers(session.analyst, session.dataset, p.total)
    return replace(explanation, cost=p.total, covered=covered, notes=(*notes, *explanation.notes))


# -- limits="auto_groups": max_groups and max_rows_per_group chosen separately ---------------
GROUPS_CAP = MAX_CAP
"""The largest ``G·R`` considered by ``limits="auto_groups"`` when no limit is declared."""


def _bins(grid: Sequence[int], counts: Sequence[int], scale: Fraction) -> list[Fraction]:
    """The noisy counts of a histogram over ``grid``'s bins, a count below τ taken as 0."""
    tau = threshold(scale, len(counts))
    return [Fraction(c) if c >= tau else Fraction(0) for c in counts]


@dataclass(frozen=True)
class GroupsChoice:
    """The post-processed choice of ``(G, R)`` from the two noisy histograms."""

    max_groups: int
    max_rows_per_group: int
    dropped: float  # D(G, R) / noisy total rows, clipped to [0, 1]
    bar: float  # its ≈95 % half-width
    rows: float  # the noisy total of rows
    errors: tuple[tuple[int, int, float, float], ...]  # (G, R, D, N) per candidate


def _dropped(
    g_grid: Sequence[int],
    groups: Sequence[Fraction],
    r_grid: Sequence[int],
    means: Sequence[Fraction],
    g: int,
    r: int,
) -> tuple[float, float]:
    """(rows dropped at (G, R), total rows): see :func:`choose_groups`."""
    gm, rm = _midpoints(g_grid), _midpoints(r_grid)
    units = sum(means, Fraction(0))
    if units > 0:
        mean = sum((c * m for c, m in zip(means, rm, strict=True)), Fraction(0)) / units
        kept_r = sum((c * min(m, Fraction(r)) for c, m in zip(means, rm, strict=True)), Fraction(0))
        kept_r /= units
    else:
        mean = kept_r = Fraction(1)
    pairs = sum((c * m for c, m in zip(groups, gm, strict=True)), Fraction(0))
    kept_pairs = sum(
        (c * min(m, Fraction(g)) for c, m in zip(groups, gm, strict=True)), Fraction(0)
    )
    return float(mean * pairs - kept_r * kept_pairs), float(mean * pairs)


def choose_groups(
    g_grid: Sequence[int],
    group_counts: Sequence[int],
    g_scale: Fraction,
    r_grid: Sequence[int],
    pair_counts: Sequence[int],
    r_scale: Fraction,
    noise: Mapping[tuple[int, int], float],
) -> GroupsChoice:
    """``(G, R)`` minimising ``D(G, R) + noise[G, R]`` over the candidates ``noise`` lists;
    post-processing only, total: any integer counts give a candidate.

    ``group_counts``: the noisy histogram of distinct groups per unit over ``g_grid``'s bins
    (``n_b``); ``pair_counts``: of each unit's mean rows per group ``⌊rows / groups⌋`` over
    ``r_grid``'s (``q_b``). A count below τ is 0 (as in :func:`choose_limit`). With ``m_b`` the
    bins' midpoints (the cap for the last), the mean rows per group ``r̄ = Σ q_b·m_b / Σ q_b``,
    the rows per group ``R`` keeps ``κ(R) = Σ q_b·min(m_b, R) / Σ q_b``, the (unit, group)
    pairs ``P = Σ n_b·m_b`` and those G keeps ``K(G) = Σ n_b·min(m_b, G)``:
    ``D(G, R) = r̄·P − κ(R)·K(G)`` — a unit's groups taken as equally large and its rows per
    group independent of its number of groups (so a unit with one large group among small
    ones counts as even: D may under-state what R drops). The smallest ``(G·R, G)`` wins
    ties."""
    if len(group_counts) != len(g_grid) or len(pair_counts) != len(r_grid) or not noise:
        raise InternalError("the groups histograms do not match their grids")
    groups = _bins(g_grid, group_counts, g_scale)
    pairs = _bins(r_grid, pair_counts, r_scale)
    errors = []
    for (g, r), cost in noise.items():
        d, _ = _dropped(g_grid, groups, r_grid, pairs, g, r)
        errors.append((g, r, d, cost))
    best = min(errors, key=lambda e: (e[2] + e[3], e[0] * e[1], e[0]))
    g, r = best[0], best[1]
    d, total = _dropped(g_grid, groups, r_grid, pairs, g, r)

    def share(gs: Sequence[Fraction], ps: Sequence[Fraction]) -> float:
        dd, tt = _dropped(g_grid, gs, r_grid, ps, g, r)
        return dd / tt if tt > 0 else 0.0

    # the bar: the delta method over every non-zero count (a numerical gradient, one count
    # moved by one standard deviation of its noise at a time)
    base = share(groups, pairs)
    var = 0.0
    for counts, scale, is_groups in ((groups, g_scale, True), (pairs, r_scale, False)):
        sd = math.sqrt(_variance(scale))
        for i, c in enumerate(counts):
            if not c:
                continue
            moved = list(counts)
            moved[i] = c + Fraction(sd)
            other = share(moved, pairs) if is_groups else share(groups, moved)
            var += (other - base) ** 2
    bar = min(1.0, 1.96 * math.sqrt(var))
    return GroupsChoice(g, r, min(1.0, max(0.0, base)), bar, total, tuple(errors))


@dataclass(frozen=True)
class _PreparedGroups:
    plan: Plan
    hists: tuple[tuple[str, Aggregate, tuple[int, ...], Fraction, Fraction], ...]
    g_grid: tuple[int, ...]
    r_grid: tuple[int, ...]
    step_loss: Budget
    main_epsilon: Fraction
    noise: dict[tuple[int, int], float]
    max_rows: int | None
    total: Budget


def _prepare_groups(
    session: Session,
    query: str | Plan,
    *,
    epsilon: object,
    delta: Number | None,
    bounds: Any,
    limits: object,
    share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    given: tuple[int | None, int | None, int | None],
    quantile_buckets: int | None,
) -> _PreparedGroups:
    """``limits="auto_groups"``: everything decidable without data (see :func:`_prepare`)."""
    part, eps = _checked(session, limits, share, epsilon, given)
    unit = session.privacy_unit
    if unit is None:
        raise InternalError("no privacy unit after the checks")
    plan = query if isinstance(query, Plan) else session.plan(query, bounds=bounds, domains=domains)
    agg = aggregate_of(plan)
    columns = tuple(k.column for k in agg.keys if not k.per_unit)
    if not columns:
        raise InvalidArgumentError(
            "limits='auto_groups' chooses max_groups and max_rows_per_group, but the query has "
            "no GROUP BY (one group: only the rows per unit matter); use limits='auto'",
            cli="--limits auto_groups needs a GROUP BY; use --limits auto",
        )
    declared = session.owner if session.owner is not None else session.contribution
    g_max, r_max, t_max = (
        (None, None, None)
        if declared is None
        else (declared.max_groups, declared.max_rows_per_group, declared.max_rows)
    )
    g_cap = min([MAX_CAP, *(v for v in (g_max, t_max) if v is not None)])
    r_cap = min([MAX_CAP, *(v for v in (r_max, t_max) if v is not None)])
    if agg.public_keys:
        possible = 1
        for k in agg.keys:
            possible *= len(k.labels())
        g_cap = min(g_cap, possible)
    if g_cap <= 1 and r_cap <= 1:
        raise InvalidArgumentError(
            "limits='auto_groups' has nothing to choose: the declared limits (or the public "
            "groups) allow one group and one row in it per unit; drop limits='auto_groups'",
            cli="--limits auto_groups has nothing to choose: one group and one row per unit",
        )
    g_grid = candidates(g_cap)
    r_grid = candidates(r_cap)
    step_eps = eps * part
    main_eps = eps * (1 - part)
    wanted = [(n, grid, d) for n, grid, d in (("groups", g_grid, True), ("rows", r_grid, False))
              if len(grid) > 1]  # fmt: skip
    hists = []
    step_loss: Budget | None = None
    for name, grid, distinct in wanted:
        each = step_eps / len(wanted)
        key = GroupKey(
            unit, edges=histogram_edges(grid), alias=name, per_unit=True, within=columns,
            distinct=distinct,
        )  # fmt: skip
        hist = Aggregate(
            child=agg.child, keys=(key,), aggregates=(AggregateCall("n", "count"),),
            privacy_unit=unit,
        )  # fmt: skip
        compiled = aggregate_of(session._compile(hist, each, None, None, 1, 1, None))
        ms = compiled.measurements
        if compiled.budget is None or len(ms) != 1 or ms[0].mechanism != "discrete_laplace":
            raise InternalError("the limits step compiled to an unexpected measurement")
        if ms[0].sensitivity != 1:
            raise InternalError(f"the limits step's sensitivity is {ms[0].sensitivity}, not 1")
        step_loss = compiled.budget if step_loss is None else step_loss + compiled.budget
        hists.append((name, hist, grid, ms[0].scale, each))
    if step_loss is None:
        raise InternalError("no histogram for the limits step")
    noise: dict[tuple[int, int], float] = {}
    budget: Budget | None = None
    for g in g_grid:
        for r in r_grid:
            if g * r > max(GROUPS_CAP, g_cap, r_cap):
                continue
            compiled = aggregate_of(
                session._compile(plan, main_eps, delta, bounds, g, r, t_max, quantile_buckets)
            )
            if compiled.budget is None:
                raise InternalError("the compiled aggregation has no charged loss")
            budget = compiled.budget if budget is None else budget  # (1, 1): Laplace, exact
            b = compiled.budget
            if b.epsilon is None or budget.epsilon is None:
                raise InternalError("the compiled aggregation's loss has no epsilon")
            if b.epsilon > budget.epsilon or b.delta > budget.delta:
                raise InternalError("the query's loss at some limits exceeds its loss at (1, 1)")
            noise[g, r] = _noise(compiled)
    if budget is None:
        raise InternalError("no candidate limits")
    if not any(noise.values()):
        raise InvalidArgumentError(
            "limits='auto_groups' weighs rows dropped against the noise of counts and sums, and "
            "this query has none (a quantile or a mode alone); give max_groups= and "
            "max_rows_per_group= instead"
        )
    return _PreparedGroups(
        plan, tuple(hists), g_grid, r_grid, step_loss, main_eps, noise, t_max, step_loss + budget
    )


def _groups_sql(
    session: Session,
    query: str | Plan,
    *,
    epsilon: object,
    delta: Number | None,
    bounds: Any,
    limits: object,
    limits_share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    given: tuple[int | None, int | None, int | None],
    consistent: bool,
    source: RandomSource | None,
    progress: Any,
    quantile_buckets: int | None,
    text: str | None,
) -> Result:
    p = _prepare_groups(
        session, query, epsilon=epsilon, delta=delta, bounds=bounds, limits=limits,
        share=limits_share, domains=domains, given=given, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    _check_covered(session, p.total)
    counts: dict[str, list[int]] = {}
    cost: Budget | None = None
    cached = True
    for name, hist, _grid, _scale, each in p.hists:
        what = "distinct groups per unit" if name == "groups" else "rows per (unit, group)"
        step = session.run(
            hist, epsilon=each, max_groups=1, max_rows_per_group=1, source=source,
            text=f"-- veil limits: {what} for: {text or 'a query plan'}",
        )  # fmt: skip
        counts[name] = [int(s["count"]) for s in step.stats]
        cost = step.cost if cost is None else cost + step.cost
        cached = cached and step.cached
    if cost is None:
        raise InternalError("no histogram ran")
    scales = {name: scale for name, _h, _g, scale, _e in p.hists}
    c = choose_groups(
        p.g_grid, counts.get("groups", [0]), scales.get("groups", Fraction(1)),
        p.r_grid, counts.get("rows", [0]), scales.get("rows", Fraction(1)), p.noise,
    )  # fmt: skip
    g, r = c.max_groups, c.max_rows_per_group
    result = session.run(
        p.plan, epsilon=p.main_epsilon, delta=delta, bounds=bounds, max_groups=g,
        max_rows_per_group=r, max_rows=p.max_rows, consistent=consistent, source=source,
        progress=progress, text=text, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    t = g * r if p.max_rows is None else min(g * r, p.max_rows)
    chosen = ChosenLimits(
        t,
        g,
        r,
        c.dropped,
        c.bar,
        c.rows,
        p.step_loss,
        cost,
        cached,
        p.g_grid[-1] * p.r_grid[-1],
        mode=AUTO_GROUPS,
    )
    return replace(
        result,
        cost=result.cost + cost,
        cached=result.cached and cached,
        notes=(chosen.line(), *result.notes),
        auto_limits=chosen,
    )


def _groups_explain(
    session: Session,
    query: str | Plan,
    *,
    epsilon: object,
    delta: Number | None,
    bounds: Any,
    limits: object,
    limits_share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    given: tuple[int | None, int | None, int | None],
    quantile_buckets: int | None,
    notes: list[str],
) -> Explanation:
    p = _prepare_groups(
        session, query, epsilon=epsilon, delta=delta, bounds=bounds, limits=limits,
        share=limits_share, domains=domains, given=given, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    g, r = max(p.noise, key=lambda k: (p.noise[k], k[0] * k[1]))
    explanation = session.explain(
        p.plan, epsilon=p.main_epsilon, delta=delta, bounds=bounds, max_groups=g,
        max_rows_per_group=r, max_rows=p.max_rows, domains=domains,
        quantile_buckets=quantile_buckets,
    )  # fmt: skip
    names = {"groups": "distinct groups per unit", "rows": "rows per (unit, group)"}
    hists = " and ".join(f"{names[n]} over {len(grid)} bins" for n, _h, grid, _s, _e in p.hists)
    notes.append(
        f"auto limits (auto_groups): noisy histograms of {hists} (max_groups candidates "
        f"{', '.join(map(str, p.g_grid))}; max_rows_per_group candidates "
        f"{', '.join(map(str, p.r_grid))}; {len(p.noise)} pairs), costing {p.step_loss}; the "
        "pair with the fewest expected rows dropped plus noise is chosen, its expected share "
        "of rows dropped (the bias) shown with the answer"
    )
    notes.append(
        f"the query itself costs {explanation.cost}; its error bars are shown at the noisiest "
        f"candidate, max_groups={g}, max_rows_per_group={r}, and shrink with the pair chosen"
    )
    covered = explanation.covered
    if explanation.remaining is not None:
        covered = session.ledger.covers(session.analyst, session.dataset, p.total)
    return replace(explanation, cost=p.total, covered=covered, notes=(*notes, *explanation.notes))
