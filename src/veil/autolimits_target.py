"""Accuracy targets with contribution limits chosen under DP: ``target=`` with
``limits="auto"`` or ``"auto_groups"`` (issue 17).

With ``target=`` veil runs a query at the smallest ε whose error bars meet the targets
(:func:`veil.accuracy.choose_epsilon`, reading no data); with ``limits="auto"`` it chooses the
limits from a noisy histogram (:mod:`veil.autolimits`) and spends a share of a *given* ε on it.
Together the share cannot be taken of an ε not yet known, and the bars — hence the ε meeting
the targets — depend on the limits the data will choose. So:

1. **Before any data is read** (free; every refusal here charges nothing): the candidates
   ``(T, G, R)`` of the mode (:func:`veil.autolimits.shape`); ``ε_min``, the smallest ε meeting
   every target at the smallest candidate ``(1, 1, 1)``, and ``ε_max`` at the largest (each a
   search of :func:`veil.accuracy.search.smallest_epsilon`: explanations only). The limits
   step costs ``ε_L``, the least ε (three significant digits, rounded up) at which its
   threshold ``τ = ⌈ln(B/β)/ε_L⌉`` (:func:`veil.autobounds.threshold`, B bins, β = 1/20) is at
   most ``N₀``, the query's noise in rows at the smallest candidate and ``ε_min``
   (:func:`veil.autolimits._noise`): a bin holding as many units as that noise — enough,
   alone, to make one more row per unit worth its noise in the choice below — is seen. For a
   count or a sum ``N₀ ≈ 1.15·K/ε_min`` (K public groups), so ``ε_L ≈ 6·ε_min/K`` over the 36
   bins of 1 … 1024. (``limits_share``, a share of a *given* ε, is refused with targets: with the
   ``limits_share/(1 − limits_share)·ε_min`` this module first used, a loose target left the
   step blind — τ about 47 times ``N₀`` — and 3,000 units of 1–20 rows each with a target of
   ±100 on their count got ``max_rows=1``: nine rows in ten dropped, reported as ≈0 %.) The choice
   weighs rows dropped against the noise of the query at ``ε_min`` at each candidate, as
   ``limits="auto"`` does at its query's ε: raising T is worth it while the rows it keeps
   exceed the extra noise in rows the query would have at the targets' cheapest ε, which the
   larger ε then buys back. Refused: targets that ``ε_min`` cannot meet within the owner's
   largest cost of one query (or 10⁴), or whose cheapest whole cost ``ε_L + ε_min`` is above
   that cap or the grant.
2. **The limits step**, an ordinary charged and cached veil query at ``ε_L``, and the choice
   of ``(T, G, R)`` from its noisy counts, as :mod:`veil.autolimits` makes it with the query's
   noise at ``ε_min``.
3. ``ε_T``: the smallest ε meeting every target at the limits chosen — ``ε_min`` or ``ε_max``
   at the end candidates, else a search between them (explanations: no data read) — **capped**
   at :data:`COST_CAP` times ``ε_S``, the ε the targets need at the limits the step's counts
   support beyond doubt (below).
4. **The query** at the limits chosen and ``ε_T`` (and the query's δ), charged and cached.

The cap. An empty bin's noise passes τ with probability ≤ β over all the bins, and when one
far from the data does, its τ-odd units at a count of hundreds of rows look like a heavy tail
the choice must keep: measured on the tour's table (20,000 units of one to three rows, target
``n=±50``), 4 of 300 seeded steps chose T = 14 … 512 where 3 was right (6 of 300 chose
24 … 768 on the coarser grid before), and the query's ε grows with T (up to 124 times the
usual cost in the issue that found it). So the choice is
made twice from the same released counts, both post-processing: as above, and from the counts
the step supports beyond doubt (:func:`trusted_counts`: a bin of at least 2τ, or of at least τ
beside another — an isolated far bin just above τ, what an empty bin's noise makes, counts
as empty; a tail of many thin adjacent bins stays). With ``S`` the limits chosen from those
and ``ε_S`` the targets' ε there, the query spends at most ``COST_CAP·ε_S``: when the first
choice needs more, ``limits="auto"`` takes the best candidate (by the same
rows-dropped-plus-noise criterion) among those up to the largest whose ε fits the cap (ε is
nondecreasing along its candidates; a binary search finds it), and ``"auto_groups"`` takes
``S`` itself. A real tail — a bin of 2τ units, or bins of τ side by side — is in both
choices; a thinner one is kept as far as the cap allows, and the answer says when the cap
bound (``TargetedLimits.trusted``, ``capped``).

The ε searched are nondecreasing in the limits: every sensitivity and partition-selection
threshold grows with each of T, G and R, each bar with the noise scales, and the first and
last candidates are componentwise the smallest and largest (:func:`veil.autolimits.shape`) —
so ``ε_min ≤ ε_T ≤ ε_max``, and the search at a candidate in between stops at ``ε_max``
(one not met there is an internal error: nothing is released).

Privacy (contract). The limits step is ``ε_L``-DP (:mod:`veil.autolimits`: a histogram of
public bins, each unit counted once), and ``ε_L`` is fixed before any data is read. ``T`` is
post-processing of its noisy counts; ``ε_T`` is a function of ``T`` and public parameters
alone (the search compiles, it reads nothing), so the query's privacy parameter is chosen
adaptively from the first step's released output. For each fixed value of that output the
query is ``(ε_T, δ_T)``-DP. Sequential composition with adaptively chosen parameters holds
under a privacy filter (Rogers, Roth, Ullman & Vadhan 2016, "Privacy odometers and filters",
basic composition filter): the ledger is one — every step is reserved against the grant
before it runs and refused when the grant would be exceeded — so the analyst's whole history
on a grant of ``(ε_g, δ_g)`` stays ``(ε_g, δ_g)``-DP, and this request is charged exactly
``ε_L + ε_T`` (exact fractions). Outcomes: every refusal before the limits step depends on
the query, the schema, the declared limits, the grant and the parameters only; after it,
what happens — released, or stopped because the grant (or the owner's largest cost of one
query) cannot pay ``ε_T`` — depends only on the released ``T`` and the ledger; the limits
step's charge then stays, and its answer is cached: asking again after a grant costs nothing
for it. ``explain`` says whether the grant covers the cheapest and the dearest candidate: if
it covers the dearest, the query cannot stop for lack of budget after the step (barring other
charges in between).

With ``bounds="auto"`` as well: refused, free (:mod:`veil.autobounds_target` takes targets
with auto bounds alone; its bounds step's ε is set at the declared range, which with auto
limits would be taken at the dearest candidate, up to 1,024 rows per unit).
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
    quietly,
    smallest_epsilon,
)
from veil.accuracy.targets import Target, parse_targets
from veil.autobounds_choice import BETA, threshold
from veil.autolimits import (
    AUTO,
    ChosenLimits,
    _noise,
    _Prepared,
    at_text,
    checked_request,
    measured,
    shape,
    step_note,
)
from veil.autolimits_choice import Picked
from veil.errors import BudgetExhaustedError, InternalError, InvalidArgumentError
from veil.plan.nodes import Plan
from veil.plan.tree import aggregate_of

if TYPE_CHECKING:
    from veil.random import RandomSource
    from veil.release.explain import Explanation
    from veil.release.result import Result
    from veil.session import Session

__all__ = [
    "COST_CAP",
    "TargetedLimits",
    "targeted_limits_explain",
    "targeted_limits_sql",
    "trusted_counts",
]

COST_CAP = 2
"""The query's ε is at most this many times what the targets need at the limits the step's
counts support beyond doubt (the module's "The cap")."""

Found = tuple["Explanation", Fraction, dict[str, float]]  # smallest_epsilon's answer


@dataclass(frozen=True)
class TargetedLimits:
    """What accuracy targets with auto limits decided and cost.

    ``limits_epsilon`` is ε_L, the limits step's ε; ``epsilon_min`` and ``epsilon_max`` the
    smallest ε meeting every target at the smallest and the largest candidate limits
    (``cheapest``, ``dearest``, each ``(max_rows, max_groups, max_rows_per_group)``;
    ``epsilon_max`` None: not met within the cap); ``covers_cheapest`` / ``covers_dearest``
    whether the grant covered ε_L and the query there when the request began (None: no
    grant). ``chosen`` the limits the query ran with and ``epsilon`` its ε, ε_T (None in an
    explanation); ``choice`` each target's bar at ``epsilon`` — in an explanation, at the
    dearest candidate (the cheapest when the dearest is above the cap)."""

    mode: str
    limits_epsilon: Fraction
    epsilon_min: Fraction
    epsilon_max: Fraction | None
    cheapest: tuple[int, int, int]
    dearest: tuple[int, int, int]
    covers_cheapest: bool | None = None
    covers_dearest: bool | None = None
    chosen: tuple[int, int, int] | None = None
    epsilon: Fraction | None = None
    choice: Choice | None = field(default=None, compare=False)
    trusted: tuple[int, int, int] | None = None
    """The limits chosen from the counts the step supports beyond doubt (the cap's
    reference: :func:`trusted_counts`)."""
    trusted_epsilon: Fraction | None = None
    """ε_S, the targets' ε at ``trusted``: the query's ε is at most COST_CAP times it."""
    capped: bool = False
    """Whether the cap lowered the limits the counts chose (to keep ε ≤ COST_CAP·ε_S)."""

    def at(self, limits: tuple[int, int, int]) -> str:
        """Candidate ``limits`` ``(T, G, R)`` as text."""
        t, g, r = limits
        if self.mode == "auto":
            return f"max_rows={t}"
        return f"max_groups={g}, max_rows_per_group={r}, max_rows={t}"

    def range_line(self) -> str:
        """The limits step's cost and the query's range of ε over the candidates, in words."""
        low = f"ε_min={float(self.epsilon_min):.6g} at {self.at(self.cheapest)}"
        high = (
            f"more than the cap at {self.at(self.dearest)}"
            if self.epsilon_max is None
            else f"ε_max={float(self.epsilon_max):.6g} at {self.at(self.dearest)}"
        )
        return (
            f"accuracy targets with limits={self.mode!r}: the limits step costs "
            f"ε_L={float(self.limits_epsilon):.6g} (set so that a bin holding as many units as "
            "the query's noise in rows at ε_min passes its threshold), "
            "then the query runs at the smallest ε meeting every target at the limits chosen, "
            f"from {low} to {high}"
        )

    def lines(self) -> tuple[str, ...]:
        """The query's ε at the limits chosen and each target against its bar, in words."""
        if self.chosen is None or self.epsilon is None:
            return (self.range_line(),)
        high = "the cap" if self.epsilon_max is None else f"{float(self.epsilon_max):.6g}"
        out = [
            f"smallest epsilon meeting every target at the limits chosen ({self.at(self.chosen)}"
            f"): {float(self.epsilon):.6g}, after the limits step's ε_L="
            f"{float(self.limits_epsilon):.6g} (ε_min={float(self.epsilon_min):.6g} … ε_max="
            f"{high} over the candidates)"
        ]
        if self.capped and self.trusted is not None:
            out.append(
                f"the limits step's counts chose more, at an ε above {COST_CAP} times the "
                f"targets' at the limits they support beyond doubt ({self.at(self.trusted)}): "
                "the query ran at the largest limits within that cap"
            )
        if self.choice is not None:  # each target against its bar, the assumptions
            out += self.choice.lines()[1:]
        return tuple(out)


@dataclass(frozen=True)
class _Planned:
    """Everything decided before the data: the targets, the limits step at ε_L with the main
    query compiled at every candidate at ε_min, and the searches at both ends."""

    prepared: _Prepared
    targets: tuple[Target, ...]
    assumptions: tuple[str, ...]
    cheapest: Found
    dearest: Found | None
    highest: Fraction  # the largest ε the query may take
    cap: str  # its name
    options: dict[str, Any]  # delta, bounds, quantile_buckets: as every probe takes them

    @property
    def dearest_total(self) -> Budget | None:
        """ε_L and the query at the dearest candidate (None: above the cap)."""
        return None if self.dearest is None else self.prepared.step_loss + self.dearest[0].cost

    def targeted(self, session: Session, **chosen: Any) -> TargetedLimits:
        """The request's :class:`TargetedLimits`, the grant's cover read now."""
        p = self.prepared
        low = high = None
        if session.ledger.has_grant(session.analyst, session.dataset):
            who = (session.analyst, session.dataset)
            low = session.ledger.covers(*who, p.total)
            top = self.dearest_total
            high = top is not None and session.ledger.covers(*who, top)
        return TargetedLimits(
            p.mode, p.step_epsilon, self.cheapest[1],
            None if self.dearest is None else self.dearest[1], p.limits[0], p.limits[-1],
            low, high, **chosen,
        )  # fmt: skip


def _search(
    session: Session,
    plan: Plan,
    targets: tuple[Target, ...],
    limits: tuple[int, int, int],
    options: Mapping[str, Any],
    *,
    highest: Fraction,
    start: Fraction | None = None,
) -> Found | None:
    t, g, r = limits
    return smallest_epsilon(
        session, plan, targets, start=start, highest=highest, quiet=True, max_groups=g,
        max_rows_per_group=r, max_rows=t, **options,
    )  # fmt: skip


def _plan(
    session: Session,
    query: str | Plan,
    *,
    target: Any,
    epsilon: object,
    delta: Number | None,
    bounds: Any,
    limits: object,
    limits_share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    given: tuple[int | None, int | None, int | None],
    quantile_buckets: int | None,
) -> _Planned:
    """Step 1 of the module's flow: free, nothing read."""
    if epsilon is not None:
        raise InvalidArgumentError(
            f"pass target= or epsilon={epsilon!r}, not both: the target chooses ε"
        )
    if limits_share is not None:
        raise InvalidArgumentError(
            "limits_share is the share of a given epsilon spent on choosing the limits; with "
            "target= the limits step's ε is set by the targets (its threshold is the query's "
            "noise in rows at the smallest limits); drop limits_share",
            cli="--limits-share is a share of a given --epsilon; with --target the limits "
            "step's ε is set by the targets: drop --limits-share",
        )
    checked_request(session, limits, None, given)
    targets = parse_targets(target)
    found = shape(session, query, limits=limits, bounds=bounds, domains=domains)
    assumptions = tuple(check_targets(found.plan, targets))
    options: dict[str, Any] = {
        "delta": delta,
        "bounds": bounds,
        "quantile_buckets": quantile_buckets,
    }
    highest, cap = highest_epsilon(session)
    first, last = found.limits[0], found.limits[-1]
    cheapest = _search(session, found.plan, targets, first, options, highest=highest)
    if cheapest is None:
        raise InvalidArgumentError(
            f"the targets ({'; '.join(map(str, targets))}) need more than {cap} even at the "
            f"smallest limits ({_limits_text(found.mode, first)}); loosen them (nothing was "
            "charged)"
        )
    eps_min = cheapest[1]
    bins = len(found.t_grid) * max(1, len(found.g_grid))
    step_eps = limits_epsilon(_noise(aggregate_of(cheapest[0].plan)), bins, eps_min)
    with quietly():  # ε_min may not run: the query warns where it does
        p = measured(session, found, step_eps, eps_min, delta, bounds, quantile_buckets)
    if p.step_epsilon != step_eps or p.main_epsilon != eps_min:
        raise InternalError("the limits step's or the query's epsilon is not the one decided")
    if session.owner is not None and session.owner.max_epsilon is not None:
        highest = session.owner.max_epsilon - step_eps  # the whole must fit the owner's cap
    dearest: Found | None = cheapest
    if last != first:
        hint = eps_min * Fraction(p.noise[-1] / p.noise[0]) if p.noise[0] > 0 else None
        dearest = (
            _search(session, found.plan, targets, last, options, highest=highest, start=hint)
            if highest > 0
            else None
        )
    return _Planned(p, targets, assumptions, cheapest, dearest, highest, cap, options)


def limits_epsilon(rows: float, bins: int, fallback: Fraction) -> Fraction:
    """ε_L: the least ε (to three significant digits, rounded up) whose limits-step threshold
    ``τ = ⌈ln(B/β)/ε⌉`` over ``bins`` is at most ``rows``, the query's noise in rows at the
    smallest limits and ε_min (:func:`veil.autolimits._noise`); ``fallback`` when the query
    has no such noise (refused by :func:`veil.autolimits.measured`)."""
    if not rows > 0:
        return fallback
    need = math.log(bins / float(BETA)) / rows
    digits = 2 - math.floor(math.log10(need))  # three significant digits
    return Fraction(math.ceil(need * 10**digits)) / Fraction(10) ** digits


def _limits_text(mode: str, limits: tuple[int, int, int]) -> str:
    t, g, r = limits
    return (
        f"max_rows={t}"
        if mode == "auto"
        else f"max_groups={g}, max_rows_per_group={r}, max_rows={t}"
    )


def _check_cheapest(session: Session, planned: _Planned) -> None:
    """Refuse, before the limits step, targets whose cheapest whole cost (ε_L + ε_min) is
    above the owner's cap or the grant."""
    p = planned.prepared
    targets = "; ".join(map(str, planned.targets))
    facts = (
        f"the targets ({targets}) with limits={p.mode!r} need at least {p.total} "
        f"({p.total.precise()} exactly: the limits step ε_L={float(p.step_epsilon):.6g} and the "
        f"query at the smallest limits, ε_min={float(p.main_epsilon):.6g})"
    )
    if session.owner is not None:
        try:
            session.owner.check_cost(p.total)
        except InvalidArgumentError as over:
            raise InvalidArgumentError(f"{facts}: {over} (nothing was charged)") from None
    if not session.ledger.has_grant(session.analyst, session.dataset):
        return  # the first reserve says so (LedgerError), before any data is read
    if not session.ledger.covers(session.analyst, session.dataset, p.total):
        err = BudgetExhaustedError(
            p.total, session.remaining(), analyst=session.analyst, dataset=session.dataset
        )
        said = f"{facts}, but the remaining budget is {err.remaining.precise()}; "
        err.args = (f"{said}loosen the targets or ask for more budget (nothing was charged)",)
        err.cli = (
            f"{said}loosen the --target values or ask an administrator to grant more (veil "
            "budget grant); nothing was charged"
        )
        raise err


def targeted_limits_sql(
    session: Session,
    query: str | Plan,
    *,
    target: Any,
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
    """:meth:`veil.Session.sql` (or :meth:`~veil.Session.run`) with accuracy targets and auto
    limits: the module's four steps. The result's ``cost`` is what was charged now in all
    (ε_L + ε_T, or less from the cache), ``auto_limits`` the :class:`ChosenLimits` with its
    ``targeted`` (:class:`TargetedLimits`, the choice of ε_T), its notes say both."""
    planned = _plan(
        session, query, target=target, epsilon=epsilon, delta=delta, bounds=bounds,
        limits=limits, limits_share=limits_share, domains=domains, given=given,
        quantile_buckets=quantile_buckets,
    )  # fmt: skip
    p = planned.prepared
    if text is None and isinstance(query, str):
        text = query
    _check_cheapest(session, planned)
    before = planned.targeted(session)  # the grant's cover when the request began
    step = session.run(
        p.hist, epsilon=p.step_epsilon, max_groups=1, max_rows_per_group=1, source=source,
        text=f"-- veil limits: {p.what.split(' over ')[0]} for: {text or 'a query plan'}",
    )  # fmt: skip
    # the engine has read data: from here on, everything is a function of the released counts
    c, found, cap = _within_cap(session, planned, [int(s["count"]) for s in step.stats])
    at = (c.max_rows, c.max_groups, c.max_rows_per_group)
    where = at_text(p, at)
    if found is None:
        raise InvalidArgumentError(
            f"the targets ({'; '.join(map(str, planned.targets))}) need more than "
            f"{planned.cap} at the limits chosen ({where}); {_step_kept(step, p)} loosen "
            "the targets"
        )
    explanation, eps, bars = found
    choice = Choice(eps, bars, planned.targets, explanation, planned.assumptions)
    if session.owner is not None:  # ε fits (the search's cap); δ may not
        try:
            session.owner.check_cost(p.step_loss + explanation.cost)
        except InvalidArgumentError as err:
            raise InvalidArgumentError(
                f"{err} — at the limits chosen ({where}); {_step_kept(step, p)} loosen the targets"
            ) from None
    try:
        result = session.run(
            p.plan, epsilon=eps, delta=delta, bounds=bounds, max_groups=c.max_groups,
            max_rows_per_group=c.max_rows_per_group, max_rows=c.max_rows,
            consistent=consistent, source=source, progress=progress, text=text,
            quantile_buckets=quantile_buckets,
        )  # fmt: skip
    except BudgetExhaustedError as err:
        said = (
            f"the targets ({'; '.join(map(str, planned.targets))}) need "
            f"{err.requested} ({err.requested.precise()} exactly) at the limits chosen "
            f"({where}), but the remaining budget is {err.remaining.precise()}; "
            f"{_step_kept(step, p)} "
        )
        err.args = (f"{said}ask for more budget or loosen the targets",)
        err.cli = (
            f"{said}ask an administrator to grant more (veil budget grant) or loosen the "
            "--target values"
        )
        raise
    targeted = replace(before, chosen=at, epsilon=eps, choice=choice, **cap)
    chosen = ChosenLimits(
        c.max_rows, c.max_groups, c.max_rows_per_group, c.dropped, c.bar, c.rows, p.step_loss,
        step.cost, step.cached, max(x[0] for x in p.limits), mode=p.mode, targeted=targeted,
    )  # fmt: skip
    return replace(
        result,
        cost=result.cost + step.cost,
        cached=result.cached and step.cached,
        notes=(chosen.line(), *targeted.lines(), *result.notes),
        auto_limits=chosen,
    )


def _step_kept(step: Result, p: _Prepared) -> str:
    """What the analyst keeps of a limits step already run: its charge and its cached answer."""
    if step.cached:
        return f"the limits step ({p.step_loss}) was answered from the cache, free;"
    return (
        f"the limits step's charge ({step.cost}) stays, and its answer is cached: asking "
        "again costs nothing for it;"
    )


Limits = tuple[int, int, int]


def _within_cap(
    session: Session, planned: _Planned, counts: Sequence[int]
) -> tuple[Picked, Found | None, dict[str, Any]]:
    """The limits the step's noisy ``counts`` choose, held to the module's cap, and the
    targets' search there: (the pick, the search, the cap's fields of
    :class:`TargetedLimits`). Post-processing of the counts and public compilations alone
    (no data read)."""
    p = planned.prepared
    picked = p.choose(counts)
    at: Limits = (picked.max_rows, picked.max_groups, picked.max_rows_per_group)
    found = _at_chosen(session, planned, at)
    tau = threshold(p.step_scale, len(counts))
    sure = p.choose(trusted_counts(counts, tau, len(p.grid)))
    trusted: Limits = (sure.max_rows, sure.max_groups, sure.max_rows_per_group)
    base = found if trusted == at else _at_chosen(session, planned, trusted)
    said: dict[str, Any] = {
        "trusted": trusted, "trusted_epsilon": None if base is None else base[1]
    }  # fmt: skip
    if base is None or (found is not None and found[1] <= COST_CAP * base[1]):
        return picked, found, said  # within the cap (or the cap's own refusal)
    said["capped"] = True
    cap = COST_CAP * base[1]
    if p.mode != AUTO:  # auto_groups: the trusted triple itself
        return p.among(counts, [trusted]), base, said
    # limits="auto": ε is nondecreasing along the candidates' T; the largest T within the cap
    chain = [x for x in p.limits if trusted[0] <= x[0] <= at[0]]
    low, high = 0, len(chain) - 1  # chain[low] fits the cap, chain[high] does not
    while high - low > 1:
        mid = (low + high) // 2
        probe = _at_chosen(session, planned, chain[mid])
        if probe is not None and probe[1] <= cap:
            low = mid
        else:
            high = mid
    allowed = chain[: low + 1]
    picked = p.among(counts, allowed)
    at = (picked.max_rows, picked.max_groups, picked.max_rows_per_group)
    return picked, _at_chosen(session, planned, at), said


def trusted_counts(counts: Sequence[int], tau: int, rows: int) -> list[int]:
    """The counts of the bins (cells) the step supports beyond doubt, the others 0: a count of
    at least 2τ (an empty bin's noise reaches it with probability ≤ (β/B)² … a bin), or of at
    least τ beside another of at least τ (two empty neighbours both passing τ: probability
    ≤ 2β²/B). ``rows``: the cells per row of the histogram (groups outer, rows per unit inner;
    the whole histogram for ``limits="auto"``). An isolated far bin just above τ — what an
    empty bin's noise makes — is dropped; a tail of many thin bins is kept."""
    n = len(counts)

    def seen(i: int) -> bool:
        return 0 <= i < n and counts[i] >= tau

    out = []
    for i, c in enumerate(counts):
        same_row = [j for j in (i - 1, i + 1) if j // rows == i // rows]
        near = [*same_row, i - rows, i + rows]
        out.append(c if c >= 2 * tau or (c >= tau and any(seen(j) for j in near)) else 0)
    return out


def _at_chosen(session: Session, planned: _Planned, at: tuple[int, int, int]) -> Found | None:
    """Step 3: the smallest ε meeting every target at the limits chosen (no data read)."""
    p = planned.prepared
    if at == p.limits[0]:
        return planned.cheapest
    if at == p.limits[-1]:
        return planned.dearest
    k = p.limits.index(at)
    eps_min = planned.cheapest[1]
    hint = eps_min * Fraction(p.noise[k] / p.noise[0]) if p.noise[0] > 0 else None
    top = planned.highest if planned.dearest is None else planned.dearest[1]
    found = _search(session, p.plan, planned.targets, at, planned.options, highest=top, start=hint)
    if found is None and planned.dearest is not None:
        raise InternalError(
            "the targets are met at the largest limits but not at smaller ones: the bars are "
            "not monotone in the limits"
        )
    return found


def targeted_limits_explain(
    session: Session,
    query: str | Plan,
    *,
    target: Any,
    epsilon: object,
    delta: Number | None,
    bounds: Any,
    limits: object,
    limits_share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    given: tuple[int | None, int | None, int | None],
    quantile_buckets: int | None,
) -> Explanation:
    """:meth:`veil.Session.explain` with accuracy targets and auto limits — nothing read,
    nothing charged: the limits step's ε_L, the range [ε_min, ε_max] over the candidates and
    whether the grant covers the cheapest and the dearest (``targeted``, a
    :class:`TargetedLimits`). Refused, free, as the query would be. The explanation shown is
    the query's at the dearest candidate and ε_max, where the targets are met; its ``cost`` is
    the most the request can cost, ε_L + ε_max (ε_L + ε_min when ε_max is above the cap), and
    ``covered`` whether the grant covers that."""
    planned = _plan(
        session, query, target=target, epsilon=epsilon, delta=delta, bounds=bounds,
        limits=limits, limits_share=limits_share, domains=domains, given=given,
        quantile_buckets=quantile_buckets,
    )  # fmt: skip
    p = planned.prepared
    _check_cheapest(session, planned)  # refused as the query would be, free
    top = planned.dearest if planned.dearest is not None else planned.cheapest
    shown, eps, bars = top
    choice = Choice(eps, bars, planned.targets, shown, planned.assumptions)
    targeted = planned.targeted(session, choice=choice)
    dearest = planned.dearest_total
    at = p.limits[-1] if planned.dearest is not None else p.limits[0]
    notes = [
        targeted.range_line(),
        f"whole cost: {p.total} at the cheapest candidate, "
        + (
            f"{dearest} at the dearest"
            if dearest is not None
            else f"more than {planned.cap} for the query at the dearest"
        ),
    ]
    if shown.remaining is not None:
        notes.append(
            f"the remaining {shown.remaining.precise()} "
            + (
                "covers the dearest candidate: the query cannot stop for lack of budget after "
                "the limits step"
                if targeted.covers_dearest
                else "covers the cheapest candidate but not the dearest: if the limits chosen "
                "need more than is left after the limits step, the query stops there (the "
                "step's charge stays and its answer is cached)"
            )
        )
    notes.append(step_note(p))
    notes.append(
        f"the query's ε is at most {COST_CAP} times the targets' ε at the limits the step's "
        "counts support beyond doubt (a bin of at least twice the threshold τ, or of τ "
        "beside another): an isolated empty bin whose noise passes τ cannot make it dearer"
    )
    where = "dearest" if planned.dearest is not None else "cheapest"
    notes += [
        f"target {t} at the {where} candidate: bar ± {bars[t.column]:.6g} (limit ± {t.limit:.6g})"
        for t in planned.targets
    ]
    notes += [f"assumption: {a}" for a in planned.assumptions]
    notes.append(
        f"the query itself costs {shown.cost} at the {where} candidate ({at_text(p, at)}, "
        f"ε={float(eps):.6g}); its error bars are shown there"
    )
    cost = dearest if dearest is not None else p.total
    return replace(
        shown,
        cost=cost,
        covered=(targeted.covers_dearest if dearest is not None else targeted.covers_cheapest),
        notes=(*notes, *shown.notes),
        targeted=targeted,
    )
