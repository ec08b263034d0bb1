"""Contribution limits chosen under differential privacy: ``limits="auto"`` (issue 17).

A query over a table with many rows per privacy unit needs contribution limits; too low and
the bounding drops most of the data (bias), too high and the noise grows with them.
``limits="auto"`` spends a declared share (``limits_share``, default 0.1) of the query's ε to
choose them from the data, then answers the query with the rest. PipelineDP's parameter
tuning does the same outside the query (a histogram of contributions per unit, then the
bound minimising an error estimate); here it is one step of the query, charged and cached.

The mechanism:

1. **A public grid** of candidate total-rows bounds T: 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14,
   16, 20, 24, … (four a doubling: :func:`veil.autolimits_choice.fine_candidates`) up to a cap
   — :data:`MAX_CAP`, lowered to the
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

``limits="auto_groups"`` chooses ``max_groups`` G and ``max_rows_per_group`` R as well as
``max_rows`` T — where they matter: Gaussian noise (L2 sensitivity at most ``√(T·R)``, so many
groups of few rows cost less than T rows in one) and unknown keys (partition selection's
threshold grows with G) — from **one joint histogram**:

1. **Public grids**: the groups axis ``candidates(G_cap)`` (G_cap the declared G or T, else
   :data:`MAX_CAP`, and at most the number of public groups), the rows axis
   ``candidates(T_cap)`` (as for ``auto``); the candidates are the triples of
   :func:`veil.autolimits_choice.joint_candidates` — T on the rows grid, G and R on powers of
   two within their caps, each in normal form — so ``auto``'s ``(T, T, T)`` are among them.
2. **One ordinary veil query** at ``ε·share``: per unit, the cell of (its number of distinct
   groups — the GROUP BY columns' raw values, NULL a value — binned on the groups axis, its
   number of rows binned on the rows axis), a COUNT per cell, every cell public, each unit
   bounded to ``G = R = 1``.
3. **The choice is post-processing** (:func:`veil.autolimits_choice.choose_joint`):
   ``D(T, G, R)`` the rows dropped estimated from the noisy cells (below τ taken as 0),
   ``N(T, G, R)`` the noise of the main query compiled at the triple (as ``N(T)`` above); the
   triple minimising ``D + N`` runs.

Sensitivity of the joint histogram (proof). Neighbouring datasets differ by all rows of one
unit u. Both keys of a row are window functions partitioned by the unit over the rows after
WHERE (:class:`veil.plan.nodes.GroupKey` ``per_unit=True``; the distinct groups by two dense
ranks, the rows by a count), so every other unit's rows keep their keys when u's rows are
added or removed: only u's contribution changes. Every row of u has the same pair of keys (a
function of u's rows alone), and the engine's bounding at ``G = R = 1`` keeps at most one row
of u; so the vector of cell counts moves by at most 1 in one cell: L1 sensitivity 1 (the
compiled measurement is checked to be discrete Laplace of sensitivity 1), ``ε·share``-DP by
the discrete Laplace mechanism (Canonne–Kamath–Steinke 2020), no δ: every cell is public.
``tests/test_autolimits_groups.py`` checks the move by one on removing a unit.

Contract (``auto_groups``). Preconditions: as for ``auto``, and a GROUP BY. Postconditions:
the limits step is ``ε·share``-DP (the proof above), the main query is compiled at
``ε·(1 − share)`` and the query's δ — at some triples it takes the Gaussian mechanism, whose
loss is at most the one charged (checked per candidate, before anything is read) — so the
whole is ``(ε, δ)``-DP by sequential composition; the choice is a function of the released
counts and of public compilations alone, total for any counts; the grids, the caps and every
refusal depend on the query, the schema, the declared limits and the parameters only.

With ``bounds="auto"`` too: :mod:`veil.autoboth`; with accuracy targets instead of ε:
:mod:`veil.autolimits_target`. Not done: groups of unequal size within a unit (the estimate
takes a unit's groups as equally large, so it may under-state what a binding R drops).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from veil.accounting.budget import Budget, Number, exact
from veil.autobounds import _check_covered, _epsilon
from veil.autobounds_choice import percent
from veil.autolimits_choice import (
    Picked,
    candidates,
    choose_joint,
    choose_limit,
    fine_candidates,
    histogram_edges,
    joint_candidates,
)
from veil.compile.statistics import per_row_bound
from veil.errors import InternalError, InvalidArgumentError
from veil.noise.families import family
from veil.plan.nodes import Aggregate, AggregateCall, GroupKey, Plan
from veil.plan.tree import aggregate_of

if TYPE_CHECKING:
    from veil.autolimits_target import TargetedLimits
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
    "choose_joint",
    "choose_limit",
    "histogram_edges",
]

AUTO = "auto"
AUTO_GROUPS = "auto_groups"
DEFAULT_SHARE = Fraction(1, 10)
"""The share of the query's ε spent on the limits when ``limits_share`` is not given."""
MAX_CAP = 1024
"""The largest total-rows bound (and number of groups) considered when no limit is declared."""
_LEVEL = 0.6827  # the half-width level that stands for one standard deviation of noise


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


def _caps(session: Session) -> tuple[int, int, int]:
    """(cap of G, cap of R, cap of T): the catalog's limits, else the session's, else
    :data:`MAX_CAP` — the choice may only lower the declared limits."""
    declared = session.owner if session.owner is not None else session.contribution
    if declared is None:
        return MAX_CAP, MAX_CAP, MAX_CAP
    g, r, t = declared.max_groups, declared.max_rows_per_group, declared.max_rows
    cap = MAX_CAP
    if g is not None and r is not None:
        cap = min(cap, g * r)
    if t is not None:
        cap = min(cap, t)
    return min(cap, MAX_CAP if g is None else g), min(cap, MAX_CAP if r is None else r), cap


@dataclass(frozen=True)
class ChosenLimits:
    """The limits chosen, and what choosing them cost.

    ``max_rows`` is the total-rows bound T chosen, ``max_groups`` / ``max_rows_per_group``
    the limits the query ran with (``auto``: T, or the declared ones below it); ``dropped``
    the noisy estimate of the share of rows the bounding drops, ``dropped_bar`` its ≈95 %
    half-width; ``loss`` the step's privacy loss and ``cost`` what it was charged now (zero
    when answered from the cache, ``cached``); ``cap`` the largest T candidate; ``mode``
    ``"auto"`` or ``"auto_groups"``; ``targeted``, with accuracy targets, the
    :class:`veil.autolimits_target.TargetedLimits` (the ε the query ran at, and its range)."""

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
    targeted: TargetedLimits | None = None

    def line(self) -> str:
        state = "from the cache" if self.cached else f"cost {self.loss}"
        bias = (
            f"≈{percent(self.dropped)} ± {percent(self.dropped_bar)} of the rows expected "
            "dropped by the bounding"
        )
        if self.mode == AUTO_GROUPS:
            return (
                f"auto limits: max_groups={self.max_groups}, max_rows_per_group="
                f"{self.max_rows_per_group}, max_rows={self.max_rows} (auto_groups; {state}; "
                f"{bias})"
            )
        return (
            f"auto limits: max_rows={self.max_rows} (max_groups={self.max_groups}, "
            f"max_rows_per_group={self.max_rows_per_group}; {state}; {bias}, candidates "
            f"1–{self.cap})"
        )


@dataclass(frozen=True)
class _Prepared:
    """Everything either mode decides without data: the main plan, the one histogram step,
    the candidates ``(T, G, R)`` with the main query's noise at each, the whole cost, and the
    post-processing that turns the step's noisy counts into a :class:`Picked`."""

    mode: str
    plan: Plan
    hist: Aggregate
    what: str  # the histogram, for the audit text and explain
    step_loss: Budget
    step_scale: Fraction
    step_epsilon: Fraction
    main_epsilon: Fraction
    limits: tuple[tuple[int, int, int], ...]  # (T, G, R) per candidate
    noise: tuple[float, ...]
    total: Budget
    choose: Callable[[Sequence[int]], Picked]
    """The choice from the step's noisy counts, among every candidate."""
    among: Callable[[Sequence[int], Collection[tuple[int, int, int]]], Picked]
    """The same choice among some candidates only (``veil.autolimits_target``'s cap)."""
    grids: str  # the candidates, for explain

    @property
    def grid(self) -> tuple[int, ...]:
        """The candidate total-rows bounds T."""
        return tuple(sorted({t for t, _g, _r in self.limits}))


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
    return checked_request(session, limits, share, given), _epsilon(epsilon)


def checked_request(
    session: Session,
    limits: object,
    share: Number | None,
    given: tuple[int | None, int | None, int | None],
) -> Fraction:
    """:func:`_checked` without ε (accuracy targets choose it): the request, no limit given
    with it, a privacy unit. Returns the share."""
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
    if session.privacy_unit is None:
        raise InvalidArgumentError(
            f"limits={limits!r} chooses how many rows each privacy unit keeps, but the session "
            "has no privacy unit (each row is a unit: nothing to bound); pass privacy_unit= to "
            f"the session, or drop limits={limits!r}",
            cli=f"--limits {limits} needs a privacy unit: pass --privacy-unit user_id (say)",
        )
    return part


def _step(
    session: Session, agg: Aggregate, keys: tuple[GroupKey, ...], eps: Fraction
) -> tuple[Aggregate, Budget, Fraction]:
    """The histogram step over ``keys`` (per-unit keys) at ``G = R = 1``, compiled and checked:
    (the aggregation, its loss, its noise scale)."""
    hist = Aggregate(
        child=agg.child, keys=keys, aggregates=(AggregateCall("n", "count"),),
        privacy_unit=session.privacy_unit,
    )  # fmt: skip
    compiled = aggregate_of(session._compile(hist, eps, None, None, 1, 1, None))
    ms = compiled.measurements
    if compiled.budget is None or len(ms) != 1 or ms[0].mechanism != "discrete_laplace":
        raise InternalError("the limits step compiled to an unexpected measurement")
    if ms[0].sensitivity != 1:
        raise InternalError(f"the limits step's sensitivity is {ms[0].sensitivity}, not 1")
    return hist, compiled.budget, ms[0].scale


def _noises(
    session: Session,
    plan: Plan,
    limits: Sequence[tuple[int, int, int]],
    main_eps: Fraction,
    delta: Number | None,
    bounds: Any,
    quantile_buckets: int | None,
    mode: str,
) -> tuple[tuple[float, ...], Budget]:
    """The main query compiled at every candidate (so its refusals come first, free): the
    noise at each and the loss charged — the first candidate's (the smallest limits: Laplace,
    exact), which no other candidate's may exceed."""
    noise: list[float] = []
    budget: Budget | None = None
    for t, g, r in limits:
        compiled = aggregate_of(
            session._compile(plan, main_eps, delta, bounds, g, r, t, quantile_buckets)
        )
        b = compiled.budget
        if b is None:
            raise InternalError("the compiled aggregation has no charged loss")
        budget = b if budget is None else budget
        if b.epsilon is None or budget.epsilon is None:
            raise InternalError("the compiled aggregation's loss has no epsilon")
        if b.epsilon > budget.epsilon or b.delta > budget.delta:
            raise InternalError("the query's loss at some limits exceeds its loss at the smallest")
        noise.append(_noise(compiled))
    if budget is None:
        raise InternalError("no candidate limits")
    if not any(noise):
        fix = "max_rows=" if mode == AUTO else "max_groups= and max_rows_per_group="
        raise InvalidArgumentError(
            f"limits={mode!r} weighs rows dropped against the noise of counts and sums, and this "
            f"query has none (a quantile or a mode alone); give {fix} instead"
        )
    return tuple(noise), budget


@dataclass(frozen=True)
class Shape:
    """What either mode decides from the query and the declared limits alone, before any ε:
    the main plan, the histogram's per-unit keys and grids, and the candidates ``(T, G, R)``
    — the first componentwise the smallest, the last the largest."""

    mode: str
    plan: Plan
    agg: Aggregate
    keys: tuple[GroupKey, ...]
    t_grid: tuple[int, ...]
    g_grid: tuple[int, ...]  # () for limits="auto"
    limits: tuple[tuple[int, int, int], ...]


def shape(
    session: Session,
    query: str | Plan,
    *,
    limits: object,
    bounds: Any,
    domains: Mapping[str, Sequence[Any]] | None,
) -> Shape:
    """The grids and candidates of either mode (the request checked already): refused, free,
    when there is nothing to choose or (``auto_groups``) no GROUP BY."""
    unit = session.privacy_unit
    if unit is None:
        raise InternalError("no privacy unit after the checks")
    g_cap, r_cap, cap = _caps(session)
    mode = AUTO_GROUPS if limits == AUTO_GROUPS else AUTO
    if mode == AUTO and cap <= 1:
        raise InvalidArgumentError(
            "limits='auto' has nothing to choose: the declared limits allow one row per unit; "
            "drop limits='auto'",
            cli="--limits auto has nothing to choose: the declared limits allow one row per unit",
        )
    plan = query if isinstance(query, Plan) else session.plan(query, bounds=bounds, domains=domains)
    agg = aggregate_of(plan)
    t_grid = fine_candidates(cap) if mode == AUTO else candidates(cap)
    rows_key = GroupKey(unit, edges=histogram_edges(t_grid), alias="rows", per_unit=True)
    if mode == AUTO:
        triples = tuple((t, min(t, g_cap), min(t, r_cap)) for t in t_grid)
        return Shape(mode, plan, agg, (rows_key,), t_grid, (), triples)
    columns = tuple(k.column for k in agg.keys if not k.per_unit)
    if not columns:
        raise InvalidArgumentError(
            "limits='auto_groups' chooses max_groups and max_rows_per_group, but the query has "
            "no GROUP BY (one group: only the rows per unit matter); use limits='auto'",
            cli="--limits auto_groups needs a GROUP BY; use --limits auto",
        )
    if agg.public_keys:
        possible = 1
        for k in agg.keys:
            possible *= len(k.labels())
        g_cap = min(g_cap, possible)
    if cap <= 1 or (g_cap <= 1 and r_cap <= 1):
        raise InvalidArgumentError(
            "limits='auto_groups' has nothing to choose: the declared limits (or the public "
            "groups) allow one group and one row in it per unit; drop limits='auto_groups'",
            cli="--limits auto_groups has nothing to choose: one group and one row per unit",
        )
    g_grid = candidates(g_cap)
    groups_key = GroupKey(
        unit, edges=histogram_edges(g_grid), alias="groups", per_unit=True, within=columns,
        distinct=True,
    )  # fmt: skip
    triples = joint_candidates(g_cap, r_cap, cap)
    return Shape(mode, plan, agg, (groups_key, rows_key), t_grid, g_grid, triples)


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
    bounds_part: Fraction = Fraction(0),
) -> _Prepared:
    """Everything decidable without data, for either mode: the request, the grids, the
    histogram step and the main query compiled at every candidate. ``bounds_part``: the share
    of ε the bounds steps take (``veil.autoboth``); the query gets ``1 − share − bounds_part``."""
    part, eps = _checked(session, limits, share, epsilon, given)
    found = shape(session, query, limits=limits, bounds=bounds, domains=domains)
    return measured(session, found, eps * part, eps * (1 - part - bounds_part), delta, bounds,
                    quantile_buckets)  # fmt: skip


def measured(
    session: Session,
    found: Shape,
    step_eps: Fraction,
    main_eps: Fraction,
    delta: Number | None,
    bounds: Any,
    quantile_buckets: int | None,
) -> _Prepared:
    """``found`` at a cost: the histogram step compiled at ``step_eps`` and the main query at
    ``main_eps`` at every candidate (its noise there, and every refusal: free)."""
    mode, plan, triples, t_grid, g_grid = (
        found.mode, found.plan, found.limits, found.t_grid, found.g_grid
    )  # fmt: skip
    hist, step_loss, scale = _step(session, found.agg, found.keys, step_eps)
    noise, budget = _noises(session, plan, triples, main_eps, delta, bounds, quantile_buckets, mode)
    if mode == AUTO:

        def among(counts: Sequence[int], allowed: Collection[tuple[int, int, int]]) -> Picked:
            c = choose_limit(t_grid, counts, noise, scale, {x[0] for x in allowed})
            t, g, r = next(x for x in triples if x[0] == c.limit)
            return Picked(t, g, r, c.dropped, c.bar, c.rows)

        def choose(counts: Sequence[int]) -> Picked:
            return among(counts, triples)

        what = f"rows per unit over {len(t_grid)} bins"
        grids = f"max_rows candidates {', '.join(map(str, t_grid))}"
        return _Prepared(
            mode, plan, hist, what, step_loss, scale, step_eps, main_eps, triples, noise,
            step_loss + budget, choose, among, grids,
        )  # fmt: skip

    def joint_among(counts: Sequence[int], allowed: Collection[tuple[int, int, int]]) -> Picked:
        return choose_joint(g_grid, t_grid, counts, scale, triples, noise, allowed)

    def joint(counts: Sequence[int]) -> Picked:
        return choose_joint(g_grid, t_grid, counts, scale, triples, noise)

    what = f"distinct groups × rows per unit over {len(g_grid)} × {len(t_grid)} cells"
    grids = (
        f"max_groups candidates {', '.join(map(str, sorted({x[1] for x in triples})))}; "
        f"max_rows_per_group candidates {', '.join(map(str, sorted({x[2] for x in triples})))}"
        f"; max_rows candidates {', '.join(map(str, t_grid))}; {len(triples)} triples"
    )
    return _Prepared(
        mode, plan, hist, what, step_loss, scale, step_eps, main_eps, triples, noise,
        step_loss + budget, joint, joint_among, grids,
    )  # fmt: skip


def step_note(p: _Prepared) -> str:
    """What explain says of the limits step of ``p``."""
    label = "auto limits" if p.mode == AUTO else "auto limits (auto_groups)"
    chosen = "candidate" if p.mode == AUTO else "triple"
    return (
        f"{label}: a noisy histogram of {p.what} ({p.grids}), costing {p.step_loss}; the "
        f"{chosen} with the fewest expected rows dropped plus noise is chosen, its expected "
        "share of rows dropped (the bias) shown with the answer"
    )


def at_text(p: _Prepared, limits: tuple[int, int, int]) -> str:
    """Candidate ``limits`` (T, G, R) of ``p``'s mode, as text."""
    t, g, r = limits
    return (
        f"max_rows={t}"
        if p.mode == AUTO
        else f"max_groups={g}, max_rows_per_group={r}, max_rows={t}"
    )


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
    """:meth:`veil.Session.sql` (or :meth:`~veil.Session.run`) with auto limits, either mode:
    refuse what is decidable first (free), then run the histogram step, then the query at the
    chosen limits with ``ε·(1 − share)``.

    The result's ``cost`` is what was charged now in all, ``auto_limits`` the
    :class:`ChosenLimits`, and its notes say the choice and the expected rows dropped."""
    p = _prepare(
        session, query, epsilon=epsilon, delta=delta, bounds=bounds, limits=limits,
        share=limits_share, domains=domains, given=given, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    if text is None and isinstance(query, str):
        text = query
    _check_covered(session, p.total)
    step = session.run(
        p.hist, epsilon=p.step_epsilon, max_groups=1, max_rows_per_group=1, source=source,
        text=f"-- veil limits: {p.what.split(' over ')[0]} for: {text or 'a query plan'}",
    )  # fmt: skip
    # rows: one per bin (per cell, groups outer), in grid order; stats: the noisy counts
    c = p.choose([int(s["count"]) for s in step.stats])
    result = session.run(
        p.plan, epsilon=p.main_epsilon, delta=delta, bounds=bounds, max_groups=c.max_groups,
        max_rows_per_group=c.max_rows_per_group, max_rows=c.max_rows, consistent=consistent,
        source=source, progress=progress, text=text, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    chosen = ChosenLimits(
        c.max_rows, c.max_groups, c.max_rows_per_group, c.dropped, c.bar, c.rows, p.step_loss,
        step.cost, step.cached, max(x[0] for x in p.limits), mode=p.mode,
    )  # fmt: skip
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
    """:meth:`veil.Session.explain` with auto limits, either mode: the whole cost (the step
    and the query), whether the grant covers it, and what the step will do — nothing read,
    nothing charged. The error bars are the query's at the noisiest candidate."""
    notes: list[str] = []
    if epsilon is None:
        epsilon = 1
        notes.append("no epsilon given: costs and error bars are shown for epsilon=1")
    p = _prepare(
        session, query, epsilon=epsilon, delta=delta, bounds=bounds, limits=limits,
        share=limits_share, domains=domains, given=given, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    k = max(range(len(p.limits)), key=lambda i: (p.noise[i], p.limits[i]))
    t, g, r = p.limits[k]
    explanation = session.explain(
        p.plan, epsilon=p.main_epsilon, delta=delta, bounds=bounds, max_groups=g,
        max_rows_per_group=r, max_rows=t, domains=domains, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    notes.append(step_note(p))
    notes.append(
        f"the query itself costs {explanation.cost}; its error bars are shown at the noisiest "
        f"candidate, {at_text(p, p.limits[k])}, and shrink with the limits chosen"
    )
    covered = explanation.covered
    if explanation.remaining is not None:
        covered = session.ledger.covers(session.analyst, session.dataset, p.total)
    return replace(explanation, cost=p.total, covered=covered, notes=(*notes, *explanation.notes))
