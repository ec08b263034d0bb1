"""Contribution limits and clamping bounds both chosen under DP in one query (issue 17).

``limits="auto"`` (or ``"auto_groups"``) with ``bounds="auto"`` (or ``{"income": "auto"}``,
``{"income": {"auto": KEY}}``) runs three DP steps in sequence, each an ordinary veil query
with its own ledger charge and answer cache:

1. **the limits step** at ``ε·limits_share`` (:mod:`veil.autolimits`: a noisy histogram of
   rows per unit, each unit bounded to one row — it reads no clamped value, so it needs no
   bounds); the limits ``(T, G, R)`` are chosen from its noisy counts (post-processing),
   weighing rows dropped against the query's noise at each candidate, that noise taken from
   the main query compiled at placeholder bounds (the declared range, else [0, 1]): the noise
   in rows of a sum does not depend on the bounds' scale (its scale and a row's largest
   contribution both grow with the bounds);
2. **the bounds steps** at ``ε·bounds_share`` in all (``ε·bounds_share/k`` per auto column,
   :mod:`veil.autobounds`), each a noisy histogram under the limits chosen in 1;
3. **the query** at ``ε·(1 − limits_share − bounds_share)`` (and the query's δ) under both.

The query is SQL text, a builder query or a plan (:meth:`veil.Session.run`): the same three
steps, charges and fingerprints for the same question. Accuracy targets (``target=`` instead
of ε) are refused here, free: :mod:`veil.autolimits_target` and :mod:`veil.autobounds_target`
take them with one of the two automatic.

Contract. Preconditions: those of both modules, and ``limits_share + bounds_share < 1``.
Postconditions: step 1 is ``ε·limits_share``-DP (:mod:`veil.autolimits`' proof); each bounds
step, for *any* fixed limits, is ``ε·bounds_share/k``-DP (:mod:`veil.autobounds`: its
sensitivity follows from the limits it runs under, and its noise is calibrated to them), so
run under limits chosen by a DP step it is the adaptive composition of the two; the query is
``(ε·(1 − limits_share − bounds_share), δ)``-DP for any fixed limits and bounds. By adaptive
sequential composition the whole is ``(ε, δ)``-DP, and the three charges add to ε exactly
(exact fractions). Every candidate's bounds steps and the main query at every candidate are
compiled before the first reservation, so every refusal is free and decided without data;
after the limits step is read the choices are post-processing and total, and each later step
was compiled already at the limits it runs with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from veil.accounting.budget import Budget, Number
from veil.autobounds import (
    _check_covered,
    _Limits,
    _run_step,
    _Step,
    _steps,
    audit_text,
    check_share,
    placeholders,
    plan_of,
)
from veil.autobounds import _prepare as _prepare_bounds
from veil.autobounds import step_note as bounds_note
from veil.autolimits import ChosenLimits, _checked, at_text
from veil.autolimits import _prepare as _prepare_limits
from veil.autolimits import _Prepared as _PreparedLimits
from veil.autolimits import step_note as limits_note
from veil.errors import InternalError, InvalidArgumentError
from veil.plan.nodes import Plan
from veil.plan.tree import aggregate_of

if TYPE_CHECKING:
    from veil.random import RandomSource
    from veil.release.explain import Explanation
    from veil.release.result import Result
    from veil.session import Session

__all__ = ["auto_both_explain", "auto_both_sql"]


@dataclass(frozen=True)
class _Both:
    """Everything decidable without data: the limits step and its candidates, the bounds
    steps compiled at every candidate, the placeholder bounds and the whole cost."""

    limits: _PreparedLimits
    steps: Mapping[tuple[int, int, int], list[_Step]]  # (T, G, R) → its bounds steps
    given: dict[str, Any]
    pairs: dict[str, Any]
    placeholder: str
    bounds_epsilon: Fraction
    bounds_loss: Budget
    total: Budget


def _prepare(
    session: Session,
    query: str | Plan,
    *,
    epsilon: object,
    delta: Number | None,
    bounds: object,
    bounds_share: Number | None,
    limits: object,
    limits_share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    given: tuple[int | None, int | None, int | None],
    quantile_buckets: int | None,
) -> _Both:
    given_limits = given  # the limits given with the call: refused (the choice makes them)
    lpart, eps = _checked(session, limits, limits_share, epsilon, given_limits)
    bpart = check_share(bounds_share)
    if lpart + bpart >= 1:
        shown = f"limits_share={float(lpart):g} and bounds_share={float(bpart):g}"
        raise InvalidArgumentError(
            f"{shown} leave nothing of epsilon for the query itself (they must add to less "
            "than 1); e.g. limits_share=0.1, bounds_share=0.1",
            cli=f"--limits-share {float(lpart):g} and --bounds-share {float(bpart):g} must add "
            "to less than 1; e.g. --limits-share 0.1 --bounds-share 0.1",
        )
    # the bounds request at the session's limits: its refusals, the columns, the placeholders
    # (ε·(1 − l) with share b/(1 − l): its steps get ε·b in all, the query ε·(1 − l − b))
    rest = eps * (1 - lpart)
    b = _prepare_bounds(
        session, query, epsilon=rest, delta=delta, bounds=bounds, share=bpart / (1 - lpart),
        domains=domains, limits=_Limits(None, None, None), quantile_buckets=quantile_buckets,
    )  # fmt: skip
    if b.step_epsilon * len(b.steps) != eps * bpart:
        raise InternalError("the bounds steps' share of epsilon is not the one declared")
    main = plan_of(session, query, b.pairs, domains)
    p = _prepare_limits(
        session, main, epsilon=eps, delta=delta, bounds=b.pairs, limits=limits,
        share=lpart, domains=domains, given=given_limits, quantile_buckets=quantile_buckets,
        bounds_part=bpart,
    )  # fmt: skip
    if p.main_epsilon != eps * (1 - lpart - bpart):
        raise InternalError("the query's share of epsilon is not the one declared")
    agg = aggregate_of(b.plan)
    columns = [s.column for s in b.steps]
    by = {s.column: s.key for s in b.steps if s.key is not None}
    loss = b.steps[0].loss
    for s in b.steps[1:]:
        loss = loss + s.loss
    steps: dict[tuple[int, int, int], list[_Step]] = {}
    for t, g, r in p.limits:  # compiled at every candidate, so none can fail after the read
        at = _steps(session, agg, columns, b.step_epsilon, _Limits(g, r, t), by=by)
        if [s.loss for s in at] != [s.loss for s in b.steps]:
            raise InternalError("a bounds step's loss depends on the limits")
        steps[(t, g, r)] = at
    return _Both(p, steps, b.given, b.pairs, placeholders(b), b.step_epsilon, loss, p.total + loss)


def auto_both_sql(
    session: Session,
    query: str | Plan,
    *,
    epsilon: object,
    delta: Number | None,
    bounds: object,
    bounds_share: Number | None,
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
    """:meth:`veil.Session.sql` (or :meth:`~veil.Session.run` on a plan) with auto limits and
    auto bounds: refuse what is decidable first (free), then the limits step, the bounds steps
    under the limits chosen, and the query under both (a plan and the SQL of the same
    question: the same steps, charges and cached answers). The result's ``cost`` is what was
    charged now in all, ``auto_limits`` and ``auto_bounds`` the choices, its notes say both
    and their expected bias."""
    both = _prepare(
        session, query, epsilon=epsilon, delta=delta, bounds=bounds,
        bounds_share=bounds_share, limits=limits, limits_share=limits_share, domains=domains,
        given=given, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    p = both.limits
    _check_covered(session, both.total)
    shown = audit_text(query, text)
    if text is None and isinstance(query, str):
        text = query
    step = session.run(
        p.hist, epsilon=p.step_epsilon, max_groups=1, max_rows_per_group=1, source=source,
        text=f"-- veil limits: {p.what.split(' over ')[0]} for: {shown}",
    )  # fmt: skip
    # the engine has read data: from here every step was compiled already (the path is total)
    c = p.choose([int(s["count"]) for s in step.stats])
    at = _Limits(c.max_groups, c.max_rows_per_group, c.max_rows)
    steps = both.steps[(c.max_rows, c.max_groups, c.max_rows_per_group)]
    chosen = [_run_step(session, s, at, source, both.bounds_epsilon, shown) for s in steps]
    pairs = {**both.given, **{b.column: b.value for b in chosen}}
    result = session.run(
        plan_of(session, query, pairs, domains), epsilon=p.main_epsilon, delta=delta,
        bounds=pairs, max_groups=c.max_groups, max_rows_per_group=c.max_rows_per_group,
        max_rows=c.max_rows, consistent=consistent, source=source, progress=progress,
        text=text, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    limits_chosen = ChosenLimits(
        c.max_rows, c.max_groups, c.max_rows_per_group, c.dropped, c.bar, c.rows, p.step_loss,
        step.cost, step.cached, max(x[0] for x in p.limits), mode=p.mode,
    )  # fmt: skip
    cost = result.cost + step.cost
    for b in chosen:
        cost = cost + b.cost
    return replace(
        result,
        cost=cost,
        cached=result.cached and step.cached and all(b.cached for b in chosen),
        notes=(limits_chosen.line(), *(b.line() for b in chosen), *result.notes),
        auto_limits=limits_chosen,
        auto_bounds=tuple(chosen),
    )


def auto_both_explain(
    session: Session,
    query: str | Plan,
    *,
    epsilon: object,
    delta: Number | None,
    bounds: object,
    bounds_share: Number | None,
    limits: object,
    limits_share: Number | None,
    domains: Mapping[str, Sequence[Any]] | None,
    given: tuple[int | None, int | None, int | None],
    quantile_buckets: int | None,
) -> Explanation:
    """:meth:`veil.Session.explain` with auto limits and auto bounds: the whole cost (the
    three steps), whether the grant covers it, each step's cost — nothing read, nothing
    charged. The error bars are the query's at the noisiest candidate limits and the
    placeholder bounds."""
    notes: list[str] = []
    if epsilon is None:
        epsilon = 1
        notes.append("no epsilon given: costs and error bars are shown for epsilon=1")
    both = _prepare(
        session, query, epsilon=epsilon, delta=delta, bounds=bounds,
        bounds_share=bounds_share, limits=limits, limits_share=limits_share, domains=domains,
        given=given, quantile_buckets=quantile_buckets,
    )  # fmt: skip
    p = both.limits
    if session.owner is not None:
        session.owner.check_cost(both.total)
    k = max(range(len(p.limits)), key=lambda i: (p.noise[i], p.limits[i]))
    t, g, r = p.limits[k]
    explanation = session.explain(
        query, epsilon=p.main_epsilon, delta=delta, bounds=both.pairs, max_groups=g,
        max_rows_per_group=r, max_rows=t, domains=domains, quantile_buckets=quantile_buckets,
        weights=False,  # unweighted, as the query runs (veil.autobounds.plan_of)
    )  # fmt: skip
    notes.append(limits_note(p))
    first = next(iter(both.steps.values()))
    for i, step in enumerate(first):
        taus = sorted({at[i].tau for at in both.steps.values()})
        shown = f"{taus[0]}" if len(taus) == 1 else f"{taus[0]}–{taus[-1]} (by the limits)"
        notes.append(bounds_note(step, shown) + ", run under the limits chosen")
    notes.append(
        f"the query itself costs {explanation.cost}; its error bars are shown at the noisiest "
        f"candidate, {at_text(p, p.limits[k])}, and placeholder bounds {both.placeholder}; "
        "they depend on the limits and bounds chosen"
    )
    covered = explanation.covered
    if explanation.remaining is not None:
        covered = session.ledger.covers(session.analyst, session.dataset, both.total)
    return replace(
        explanation, cost=both.total, covered=covered, notes=(*notes, *explanation.notes)
    )
