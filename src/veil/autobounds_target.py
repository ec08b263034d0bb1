"""Accuracy targets with clamping bounds chosen under DP: ``target=`` with ``bounds="auto"``
(or ``{"income": "auto"}``, ``{"income": {"auto": KEY}}``) (issues 17, 40).

**A target never rests on the clamping** (issue 40). A target on a SUM or an AVG of an auto
column is refused, free, with the fix: its error is the noise *and* the clamping of the rows
outside the bounds the step chooses, and no bounds step can bound that clamping for less than
the declared range itself costs. Proof note: to promise the error of a sum within ±L at the
bounds [a, U] ⊂ [a, W] the step must bound the rows beyond U, each moved by up to W − U, so
its noisy count of them — noise of scale 1/ε_B in rows (one row per unit, or the unit's rows
scaled alike) — must be certified below (L − noise bar)/(W − U): a one-sided tail quantile
q'/ε_B of that noise, times W − U, must fit in L besides the query's own q·U/ε_T (q, q' the
noise's quantiles at the levels the 1 − level splits into, q' ≥ q). By Cauchy–Schwarz,
(ε_B + ε_T)·L ≥ (ε_B + ε_T)(q·U/ε_T + q·(W − U)/ε_B) ≥ q·W, the least ε meeting the target
at the declared range: the certified request is never cheaper than the declared range (the
AVG's bias and noise both scale by 1/n). Measured before the refusal (PUMS income, target
``total=±3e6`` at 95 %, declared [0, 1e6]): the step chose [0, 131072], clamped 3.5 % of the
incomes and moved the sum by −3.4e6, so 2 of 20 seeded releases (11 % of 200 in the issue)
landed within ±3e6 of the true sum; at the declared range, as the refusal advises, ≥ 95 % do
(``tests/statistical/test_targets_real.py``). Targets on other columns — a COUNT, a
COUNT(DISTINCT), a sum of a column with given bounds — keep their promise whatever the bounds
chosen, and run as below; an untargeted SUM or AVG of the auto column gets the bounds chosen.

With ``target=`` veil runs a query at the smallest ε whose error bars meet the targets
(:func:`veil.accuracy.choose_epsilon`, reading no data); with ``bounds="auto"`` it chooses the
clamping bounds from a noisy histogram (:mod:`veil.autobounds`) and spends a share of a
*given* ε on it. Together the share cannot be taken of an ε not yet known, and the bars of a
clamped column — hence the ε meeting the targets — grow with the bounds the data will choose.
So:

1. **Before any data is read** (free; every refusal here charges nothing): each auto column's
   public grid (:func:`veil.autobounds_choice.grid`) cut to its **declared range** (the
   session's or the catalog's bounds for it, else the plan's own) — the widest bounds the step
   can choose. A column without one is refused: the grid then reaches ±2^62, where no target
   on a sum is met, and ε_B below is set from that widest case. ``ε_max``, the smallest ε
   meeting every target at the declared ranges, and ``ε_min`` at the narrowest bin of each
   grid (the step never returns less than one bin), each a search of
   :func:`veil.accuracy.search.smallest_epsilon` (explanations only). The bounds step costs
   ``ε_B = ε_max/9`` (rounded up to three significant digits; ``ε_B/k`` for each of ``k``
   auto columns). Refused: targets ``ε_max`` cannot meet within 9/10 of the owner's largest
   cost of one query (or 10⁴) — so that ``ε_B + ε_max`` fits it —, and a cheapest whole cost
   ``ε_B + ε_min`` above that cap or the grant.
2. **The bounds steps**, ordinary charged and cached veil queries at ``ε_B/k`` each
   (:mod:`veil.autobounds`: the same histograms, thresholds and choices as ``bounds="auto"``
   with a given ε, so their answers are shared through the cache).
3. ``ε_T``: the smallest ε meeting every target at the bounds chosen (explanations: no data
   read), within the cap (9/10 of the owner's largest cost of one query, or of 10⁴). The
   bounds move the budget split between the query's measurements, hence a COUNT's share, so
   ``ε_T`` need not lie between ``ε_min`` and ``ε_max`` (named for the narrowest and widest
   bounds, not for the least and most ε): a search at the bounds chosen that finds no ε
   within the cap is a refusal after the step (its charge stays), not an internal error.
4. **The query** at the bounds chosen and ``ε_T`` (and the query's δ), charged and cached.

Why ε_B = ε_max/9. ``bounds="auto"`` with a given ε spends ``ε/10`` (its default
``bounds_share``) on the step and ``9ε/10`` on the query; given ``ε = ε_max/(9/10)`` its query
runs at ``ε_max``, where the targets are met *whatever bounds the step chooses* within the
declared range. ε_B is that step: the request costs at most ``ε_B + ε_max = 10/9·ε_max``
(what plain auto bounds needs to be sure of the targets), and less the narrower the data's
range is than the declared one — the only gain auto bounds can bring, the declared range
clamping nothing the owner did not already clamp. The alternative that matched the limits
step (:mod:`veil.autolimits_target`: its threshold is the query's noise in rows) does not
transfer: the noise in rows of a sum meeting a target ±L at bounds of width W is about L/W,
which depends on the W the data will choose; matched at the declared range it makes
``ε_B ≈ 2.7·ε_max`` (the whole dearer than the declared range itself), matched at the
narrowest bin (``ε_min``) it starves the step (τ millions of rows: one bin kept, the tails
clamped). With ε_B = ε_max/9 the step's threshold τ (:func:`veil.autobounds_choice.threshold`)
is at most N, the query's noise in rows at ``ε_T`` (its 95 % bar over a row's largest
contribution), whenever ``ε_T`` is 20–25 times below ``ε_max`` — for a sum, bounds that much
narrower than the declared range: τ/N ≈ 9·ln(B/β)/ln(20)·ε_T/ε_max, B the bins (37 over
[0, 10⁶] for a real column, 158 over the whole grid); for wider choices the result's
``auto_bounds`` says the share of rows clamped, with its bar.

Privacy (contract). Each bounds step is ``ε_B/k``-DP (:mod:`veil.autobounds`), and ε_B is
fixed before any data is read. The bounds are post-processing of its noisy counts; ``ε_T``
is a function of the bounds chosen and public parameters alone (the search compiles, it reads
nothing), so the query's privacy parameter is chosen adaptively from the steps' released
output, and for each fixed value of it the query is ``(ε_T, δ_T)``-DP. Sequential
composition with adaptively chosen parameters holds under a privacy filter (Rogers, Roth,
Ullman & Vadhan 2016, "Privacy odometers and filters", basic composition filter): the ledger
is one — every step is reserved against the grant before it runs and refused when the grant
would be exceeded — so the analyst's whole history on a grant of ``(ε_g, δ_g)`` stays
``(ε_g, δ_g)``-DP, and this request is charged exactly ``ε_B + ε_T`` (exact fractions).
Outcomes: every refusal before the bounds steps depends on the query, the schema, the
declared ranges, the grant and the parameters only; after them, what happens — released, or
stopped because the grant (or the owner's largest cost of one query) cannot pay ``ε_T`` —
depends only on the released bounds and the ledger; the steps' charges then stay, and their
answers are cached: asking again after a grant costs nothing for them. ``explain`` says
whether the grant covers the cheapest and the dearest whole: if it covers the dearest, the
query cannot stop for lack of budget after the steps (barring other charges in between).

Not done: with ``limits="auto"`` too (refused, free): ε_B would be set at the dearest
candidate limits (up to 1,024 rows per unit), where targets are rarely met within the cap.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from veil.accounting.budget import Budget, Number
from veil.accuracy.search import (
    Choice,
    check_targets,
    highest_epsilon,
    smallest_epsilon,
)
from veil.accuracy.targets import Target, parse_targets
from veil.autobounds import (
    ChosenBounds,
    _Limits,
    _run_step,
    _Step,
    _steps,
    audit_text,
    plan_of,
    requested,
    step_note,
)
from veil.errors import BudgetExhaustedError, InternalError, InvalidArgumentError
from veil.plan.nodes import Plan
from veil.plan.tree import aggregate_of

if TYPE_CHECKING:
    from veil.random import RandomSource
    from veil.release.explain import Explanation
    from veil.release.result import Result
    from veil.session import Session

__all__ = [
    "SHARE",
    "TargetedBounds",
    "bounds_epsilon",
    "targeted_bounds_explain",
    "targeted_bounds_sql",
]

SHARE = Fraction(1, 10)
"""ε_B is the bounds step ``bounds="auto"`` runs at this share (its default) of the ε whose
query meets the targets at any bounds: ``ε_B = SHARE/(1 − SHARE)·ε_max``."""

Found = tuple["Explanation", Fraction, dict[str, float]]  # smallest_epsilon's answer
Ranges = tuple[tuple[str, Fraction, Fraction], ...]  # (column, lower, upper), in order


def _text(ranges: Ranges) -> str:
    return ", ".join(f"{c}: [{float(lo):g}, {float(hi):g}]" for c, lo, hi in ranges)


@dataclass(frozen=True)
class TargetedBounds:
    """What accuracy targets with auto bounds decided and cost.

    ``bounds_epsilon`` is ε_B, the bounds steps' ε in all; ``epsilon_min`` and
    ``epsilon_max`` the smallest ε meeting every target at the narrowest bin of each auto
    column's grid (``narrowest``) and at its declared range (``widest``); ``covers_cheapest``
    / ``covers_dearest`` whether the grant covered ε_B and the query there when the request
    began (None: no grant). ``chosen`` each column's bounds chosen (their hull when chosen per
    group: ``auto_bounds`` has each group's) and ``epsilon`` the query's ε there, ε_T (None in
    an explanation); ``choice`` each target's bar at ``epsilon`` — in an explanation, at the
    declared ranges and ε_max."""

    bounds_epsilon: Fraction
    epsilon_min: Fraction
    epsilon_max: Fraction
    narrowest: Ranges
    widest: Ranges
    covers_cheapest: bool | None = None
    covers_dearest: bool | None = None
    chosen: Ranges | None = None
    epsilon: Fraction | None = None
    choice: Choice | None = field(default=None, compare=False)

    def range_line(self) -> str:
        """The bounds steps' cost and the query's range of ε, in words."""
        return (
            f"accuracy targets with bounds='auto': the bounds step costs "
            f"ε_B={float(self.bounds_epsilon):.6g} (ε_max/9: the step bounds='auto' runs when "
            "its query's ε meets the targets at any bounds within the declared range), then "
            "the query runs at the smallest ε meeting every target at the bounds chosen, from "
            f"ε_min={float(self.epsilon_min):.6g} at one bin ({_text(self.narrowest)}) to "
            f"ε_max={float(self.epsilon_max):.6g} at the declared range ({_text(self.widest)})"
        )

    def lines(self) -> tuple[str, ...]:
        """The query's ε at the bounds chosen and each target against its bar, in words."""
        if self.chosen is None or self.epsilon is None:
            return (self.range_line(),)
        out = [
            f"smallest epsilon meeting every target at the bounds chosen ({_text(self.chosen)}"
            f"): {float(self.epsilon):.6g}, after the bounds step's ε_B="
            f"{float(self.bounds_epsilon):.6g} (ε_min={float(self.epsilon_min):.6g} … ε_max="
            f"{float(self.epsilon_max):.6g} over the bounds the step could choose)"
        ]
        if self.choice is not None:  # each target against its bar, the assumptions
            out += self.choice.lines()[1:]
        return tuple(out)


def bounds_epsilon(epsilon_max: Fraction) -> Fraction:
    """ε_B: ``SHARE/(1 − SHARE)·ε_max`` (ε_max/9) rounded up to three significant digits."""
    need = epsilon_max * SHARE / (1 - SHARE)
    if need <= 0:
        raise InternalError(f"the targets' largest epsilon is {epsilon_max}, not positive")
    digits = 2 - math.floor(math.log10(need))
    scale = Fraction(10) ** digits
    return Fraction(math.ceil(need * scale)) / scale


@dataclass(frozen=True)
class _Planned:
    """Everything decided before the data: the targets, the steps at ε_B, and the searches
    at the narrowest and the widest bounds."""

    given: dict[str, Any]
    steps: list[_Step]
    step_epsilon: Fraction  # each step's: ε_B / k
    step_loss: Budget  # the steps' losses together (ε_B)
    targets: tuple[Target, ...]
    assumptions: tuple[str, ...]
    narrowest: dict[str, Any]  # the bounds of the cheapest query, per group where asked
    widest: dict[str, Any]  # … of the dearest (the declared ranges)
    cheapest: Found
    dearest: Found
    options: dict[str, Any]  # delta, limits, quantile_buckets: as every probe takes them
    limits: _Limits
    room: Fraction  # the largest ε the query may take (9/10 of the cap: ε_B fits beside it)
    cap: str  # the cap's name

    @property
    def total(self) -> Budget:
        """The cheapest whole: ε_B and the query at one bin."""
        return self.step_loss + self.cheapest[0].cost

    @property
    def dearest_total(self) -> Budget:
        return self.step_loss + self.dearest[0].cost

    def targeted(self, session: Session, **chosen: Any) -> TargetedBounds:
        """The request's :class:`TargetedBounds`, the grant's cover read now."""
        low = high = None
        if session.ledger.has_grant(session.analyst, session.dataset):
            who = (session.analyst, session.dataset)
            low = session.ledger.covers(*who, self.total)
            high = session.ledger.covers(*who, self.dearest_total)
        return TargetedBounds(
            self.step_epsilon * len(self.steps), self.cheapest[1], self.dearest[1],
            _ranges(self.steps, self.narrowest), _ranges(self.steps, self.widest), low, high,
            **chosen,
        )  # fmt: skip


def _ranges(steps: Sequence[_Step], pairs: Mapping[str, Any]) -> Ranges:
    """Each auto column's range in ``pairs`` (the hull of its groups' when per group)."""
    out = []
    for s in steps:
        value = pairs[s.column]
        inner = list(value.values()) if isinstance(value, Mapping) else [value]
        out.append((s.column, min(p[0] for p in inner), max(p[1] for p in inner)))
    return tuple(out)


def _spread(
    steps: Sequence[_Step], pick: Mapping[str, tuple[Fraction, Fraction]]
) -> dict[str, Any]:
    """``pick`` (column → pair) as a query takes it: per group where the step is per group."""
    return {
        s.column: pick[s.column]
        if s.key is None
        else {label: pick[s.column] for label in s.key.labels()}
        for s in steps
    }


def _narrowest(edges: Sequence[Fraction]) -> tuple[Fraction, Fraction]:
    """The narrowest bin of a grid (the one nearest 0 among equals): the least the step can
    return."""
    i = min(
        range(len(edges) - 1),
        key=lambda i: (edges[i + 1] - edges[i], max(abs(edges[i]), abs(edges[i + 1]))),
    )
    return edges[i], edges[i + 1]


def _search(
    session: Session,
    query: str | Plan,
    planned_given: Mapping[str, Any],
    pairs: Mapping[str, Any],
    targets: tuple[Target, ...],
    options: Mapping[str, Any],
    domains: Mapping[str, Sequence[Any]] | None,
    *,
    highest: Fraction,
    start: Fraction | None = None,
) -> Found | None:
    bounds = {**planned_given, **pairs}
    plan = plan_of(session, query, bounds, domains)
    return smallest_epsilon(
        session, plan, targets, start=start, highest=highest, quiet=True, bounds=bounds,
        **options,
    )  # fmt: skip


def _plan(
    session: Session,
    query: str | Plan,
    *,
    target: Any,
    epsilon: object,
    delta: Number | None,
    bounds: object,
    bounds_share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    limits: _Limits,
    quantile_buckets: int | None,
) -> _Planned:
    """Step 1 of the module's flow: free, nothing read."""
    if epsilon is not None:
        raise InvalidArgumentError(
            f"pass target= or epsilon={epsilon!r}, not both: the target chooses ε"
        )
    if bounds_share is not None:
        raise InvalidArgumentError(
            "bounds_share is the share of a given epsilon spent on finding the bounds; with "
            "target= the bounds step's ε is set by the targets (ε_max/9, ε_max the ε meeting "
            "them at the declared range); drop bounds_share",
            cli="--bounds-share is a share of a given --epsilon; with --target the bounds "
            "step's ε is set by the targets: drop --bounds-share",
        )
    targets = parse_targets(target)
    given, plan, columns, by = requested(session, query, bounds, domains)
    assumptions = tuple(check_targets(plan, targets))
    agg = aggregate_of(plan)
    shape = _steps(session, agg, columns, Fraction(1), limits, by=by)  # the grids: ε unused
    for s in shape:
        if s.outer is None:
            raise InvalidArgumentError(
                f"target= with bounds='auto' needs a declared range for {s.column!r} (the "
                "widest bounds the step may choose: the targets' ε there sets the step's); "
                f"declare one, e.g. Session.local(..., bounds={{{s.column!r}: (0, 1e6)}}) or "
                f"the catalog's bounds, or pass epsilon= with bounds='auto'",
                cli=f"--target with --bounds auto needs a declared range for {s.column!r} (the "
                "widest bounds the step may choose); give it beside the auto column, e.g. "
                f"--bounds {s.column}=0:1000000 --bounds {s.column}=auto, or pass --epsilon "
                "instead of --target",
            )
    options: dict[str, Any] = {
        "delta": delta,
        "max_groups": limits.max_groups,
        "max_rows_per_group": limits.max_rows_per_group,
        "max_rows": limits.max_rows,
        "quantile_buckets": quantile_buckets,
    }
    highest, cap = highest_epsilon(session)
    room = highest * (1 - SHARE)  # ε_B + ε_max within the cap
    widest = _spread(shape, {s.column: (s.edges[0], s.edges[-1]) for s in shape})
    narrowest = _spread(shape, {s.column: _narrowest(s.edges) for s in shape})
    args = (session, query, given)
    dearest = _search(*args, widest, targets, options, domains, highest=room)
    _refuse_clamped_targets(plan, targets, shape, widest, dearest)
    if dearest is None:
        shown = _text(_ranges(shape, widest))
        raise InvalidArgumentError(
            f"the targets ({'; '.join(map(str, targets))}) need more than "
            f"{float(room):g} (9/10 of {cap}, the rest for the bounds step) at the widest "
            f"bounds the step may choose, the declared range ({shown}); loosen them, declare a "
            "narrower range, or pass epsilon= with bounds='auto' (nothing was charged)",
            cli=f"the targets ({'; '.join(map(str, targets))}) need more than "
            f"{float(room):g} (9/10 of {cap}) at the declared range ({shown}); loosen the "
            "--target values, declare a narrower range, or pass --epsilon (nothing was charged)",
        )
    eps_b = bounds_epsilon(dearest[1])
    step_eps = eps_b / len(columns)
    steps = _steps(session, agg, columns, step_eps, limits, by=by)
    loss = steps[0].loss
    for s in steps[1:]:
        loss = loss + s.loss
    if loss != Budget(epsilon=eps_b):
        raise InternalError("the bounds steps' loss is not the ε_B decided")
    cheapest = _search(*args, narrowest, targets, options, domains, highest=dearest[1])
    if cheapest is None:
        raise InternalError(
            "the targets are met at the declared range but not at one bin of it: the bars are "
            "not monotone in the bounds"
        )
    return _Planned(
        given, steps, step_eps, loss, targets, assumptions, narrowest, widest, cheapest,
        dearest, options, limits, room, cap,
    )  # fmt: skip


def _refuse_clamped_targets(
    plan: Plan,
    targets: tuple[Target, ...],
    steps: Sequence[_Step],
    widest: Mapping[str, Any],
    dearest: Found | None,
) -> None:
    """Refuse, free, a target on a SUM or AVG of an auto column (the module's "A target never
    rests on the clamping"): the fix is the declared range, where the targets are met at
    ``dearest``'s ε (None: not within the cap), or no target on it."""
    auto = {s.column for s in steps}
    calls = {a.alias: a for a in aggregate_of(plan).aggregates}
    clamped = [
        t for t in targets if calls[t.column].needs_bounds and calls[t.column].column in auto
    ]
    if not clamped:
        return
    t = clamped[0]
    a = calls[t.column]
    column = a.column or ""
    lo, hi = next((float(x), float(y)) for c, x, y in _ranges(steps, widest) if c == column)
    why = (
        f"the target on {t.column!r} ({a.function.upper()} of {column!r}, whose bounds are "
        "auto) cannot be promised with bounds='auto': its error includes the clamping of the "
        "rows outside the bounds the step chooses, which the step's noisy counts cannot bound "
        "for less than the declared range itself costs (see veil.autobounds_target); the "
        + (
            f"targets are met at the declared range ({_text(_ranges(steps, widest))}) at "
            f"ε={float(dearest[1]):.6g}: "
            if dearest is not None
            else "targets are not met even at the declared range (loosen them); "
        )
    )
    raise InvalidArgumentError(
        f"{why}pass bounds={{{column!r}: ({lo:g}, {hi:g})}} instead of 'auto', or keep "
        f"bounds='auto' with targets on other columns only (nothing was charged)",
        cli=f"{why}pass --bounds {column}={lo:g}:{hi:g} without --bounds {column}=auto, or "
        "keep --bounds auto with targets on other columns only (nothing was charged)",
    )


def _check_cheapest(session: Session, planned: _Planned) -> None:
    """Refuse, before the bounds steps, targets whose cheapest whole cost (ε_B + ε_min) is
    above the owner's cap or the grant."""
    total = planned.total
    facts = (
        f"the targets ({'; '.join(map(str, planned.targets))}) with bounds='auto' need at "
        f"least {total} ({total.precise()} exactly: the bounds step ε_B="
        f"{float(planned.step_loss.eps):.6g} and the query at one bin, "
        f"ε_min={float(planned.cheapest[1]):.6g})"
    )
    if session.owner is not None:
        try:
            session.owner.check_cost(total)
        except InvalidArgumentError as over:
            raise InvalidArgumentError(f"{facts}: {over} (nothing was charged)") from None
    if not session.ledger.has_grant(session.analyst, session.dataset):
        return  # the first reserve says so (LedgerError), before any data is read
    if not session.ledger.covers(session.analyst, session.dataset, total):
        err = BudgetExhaustedError(
            total, session.remaining(), analyst=session.analyst, dataset=session.dataset
        )
        said = f"{facts}, but the remaining budget is {err.remaining.precise()}; "
        err.args = (f"{said}loosen the targets or ask for more budget (nothing was charged)",)
        err.cli = (
            f"{said}loosen the --target values or ask an administrator to grant more (veil "
            "budget grant); nothing was charged"
        )
        raise err


def _steps_kept(chosen: Sequence[ChosenBounds]) -> str:
    """What the analyst keeps of bounds steps already run: their charge and cached answers."""
    if all(c.cached for c in chosen):
        return "the bounds step was answered from the cache, free;"
    charged = chosen[0].cost
    for c in chosen[1:]:
        charged = charged + c.cost
    return (
        f"the bounds step's charge ({charged}) stays, and its answer is cached: asking again "
        "costs nothing for it;"
    )


def targeted_bounds_sql(
    session: Session,
    query: str | Plan,
    *,
    target: Any,
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
    """:meth:`veil.Session.sql` (or :meth:`~veil.Session.run`) with accuracy targets and auto
    bounds: the module's four steps. The result's ``cost`` is what was charged now in all
    (ε_B + ε_T, or less from the cache), ``auto_bounds`` the :class:`ChosenBounds` and
    ``targeted`` the :class:`TargetedBounds` (the choice of ε_T); its notes say both."""
    limits = _Limits(max_groups, max_rows_per_group, max_rows)
    planned = _plan(
        session, query, target=target, epsilon=epsilon, delta=delta, bounds=bounds,
        bounds_share=bounds_share, domains=domains, limits=limits,
        quantile_buckets=quantile_buckets,
    )  # fmt: skip
    _check_cheapest(session, planned)
    before = planned.targeted(session)  # the grant's cover when the request began
    shown = audit_text(query, text)
    if text is None and isinstance(query, str):
        text = query
    chosen = [
        _run_step(session, s, limits, source, planned.step_epsilon, shown) for s in planned.steps
    ]
    # the engine has read data: from here on, everything is a function of the released counts
    picked = {c.column: c.value for c in chosen}
    at = _ranges(planned.steps, picked)
    targets = "; ".join(map(str, planned.targets))
    found = planned.dearest
    where = _text(at)
    if picked != planned.widest:  # the declared range's ε: a public hint where to start
        within = _search(
            session, query, planned.given, picked, planned.targets, planned.options, domains,
            highest=planned.room, start=planned.dearest[1],
        )  # fmt: skip
        if within is None:
            raise InvalidArgumentError(
                f"the targets ({targets}) need more than {float(planned.room):g} (9/10 of "
                f"{planned.cap}) at the bounds chosen ({where}); {_steps_kept(chosen)} loosen "
                "the targets"
            )
        found = within
    explanation, eps, bars = found
    choice = Choice(eps, bars, planned.targets, explanation, planned.assumptions)
    if session.owner is not None:  # ε fits (the search's cap); δ may not
        try:
            session.owner.check_cost(planned.step_loss + explanation.cost)
        except InvalidArgumentError as err:
            raise InvalidArgumentError(
                f"{err} — at the bounds chosen ({where}); {_steps_kept(chosen)} loosen the targets"
            ) from None
    pairs = {**planned.given, **picked}
    try:
        result = session.run(
            plan_of(session, query, pairs, domains), epsilon=eps, delta=delta, bounds=pairs,
            max_groups=max_groups, max_rows_per_group=max_rows_per_group, max_rows=max_rows,
            consistent=consistent, source=source, progress=progress, text=text,
            quantile_buckets=quantile_buckets,
        )  # fmt: skip
    except BudgetExhaustedError as err:
        said = (
            f"the targets ({targets}) need {err.requested} ({err.requested.precise()} exactly) "
            f"at the bounds chosen ({where}), but the remaining budget is "
            f"{err.remaining.precise()}; {_steps_kept(chosen)} "
        )
        err.args = (f"{said}ask for more budget or loosen the targets",)
        err.cli = (
            f"{said}ask an administrator to grant more (veil budget grant) or loosen the "
            "--target values"
        )
        raise
    targeted = replace(before, chosen=at, epsilon=eps, choice=choice)
    cost = result.cost
    for c in chosen:
        cost = cost + c.cost
    return replace(
        result,
        cost=cost,
        cached=result.cached and all(c.cached for c in chosen),
        notes=(*(c.line() for c in chosen), *targeted.lines(), *result.notes),
        auto_bounds=tuple(chosen),
        targeted=targeted,
    )


def targeted_bounds_explain(
    session: Session,
    query: str | Plan,
    *,
    target: Any,
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
    """:meth:`veil.Session.explain` with accuracy targets and auto bounds — nothing read,
    nothing charged: ε_B, the range [ε_min, ε_max] and whether the grant covers the cheapest
    and the dearest whole (``targeted``, a :class:`TargetedBounds`). Refused, free, as the
    query would be. The explanation shown is the query's at the declared ranges and ε_max,
    where the targets are met whatever the step chooses; its ``cost`` is the most the request
    can cost, ε_B + ε_max, and ``covered`` whether the grant covers that."""
    limits = _Limits(max_groups, max_rows_per_group, max_rows)
    planned = _plan(
        session, query, target=target, epsilon=epsilon, delta=delta, bounds=bounds,
        bounds_share=bounds_share, domains=domains, limits=limits,
        quantile_buckets=quantile_buckets,
    )  # fmt: skip
    _check_cheapest(session, planned)  # refused as the query would be, free
    shown, eps, bars = planned.dearest
    choice = Choice(eps, bars, planned.targets, shown, planned.assumptions)
    targeted = planned.targeted(session, choice=choice)
    dearest = planned.dearest_total
    notes = [
        targeted.range_line(),
        f"whole cost: {planned.total} with bounds of one bin, {dearest} at the declared range",
    ]
    if shown.remaining is not None:
        notes.append(
            f"the remaining {shown.remaining.precise()} "
            + (
                "covers the dearest whole: the query cannot stop for lack of budget after the "
                "bounds step"
                if targeted.covers_dearest
                else "covers the cheapest whole but not the dearest: if the bounds chosen need "
                "more than is left after the bounds step, the query stops there (the step's "
                "charge stays and its answer is cached)"
            )
        )
    notes += [step_note(s) for s in planned.steps]
    notes += [
        f"target {t} at the declared range: bar ± {bars[t.column]:.6g} (limit ± {t.limit:.6g})"
        for t in planned.targets
    ]
    notes += [f"assumption: {a}" for a in planned.assumptions]
    notes.append(
        f"the query itself costs {shown.cost} at the declared range "
        f"({_text(targeted.widest)}, ε={float(eps):.6g}); its error bars are shown there"
    )
    return replace(
        shown,
        cost=dearest,
        covered=targeted.covers_dearest,
        notes=(*notes, *shown.notes),
        targeted=targeted,
    )
