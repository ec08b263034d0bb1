"""A workload: several queries with accuracy targets under one budget (APEx, Ge et al. 2019).

Sequential composition charges the sum of the queries' ε, and each query's bars depend on its own
ε only, nonincreasing (see :mod:`veil.accuracy.search`). Hence:

(a) *least total ε meeting every target*: each query needs at least its own ε*_q, so the sum
    Σ ε*_q is a lower bound on any split that meets every target, and the split ε_q = ε*_q
    attains it — optimal up to the per-query search tolerance.
(b) *given a total, minimise the largest relative miss* (bar / target): scale every target by one
    factor f; ε*_q(f) is nonincreasing in f, so the smallest f with Σ ε*_q(f) ≤ total is found
    by bisection. Any split whose largest ratio is f' meets every target scaled by f', so
    costs ≥ Σ ε*_q(f'): f' ≥ f*. The split is optimal up to the bisection tolerance.

δ is not split: each query uses the δ it would use anyway (none with public keys).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from veil.accuracy.search import Choice, check_targets, choose_epsilon
from veil.accuracy.targets import Target, parse_targets
from veil.errors import InvalidArgumentError, UserError
from veil.plan.nodes import as_fraction

if TYPE_CHECKING:
    from veil.session import Session

__all__ = ["Planned", "WorkItem", "plan_workload"]


@dataclass(frozen=True)
class WorkItem:
    """One query of a workload and its targets (as :func:`choose_epsilon` takes them);
    ``level``: that of a text target stating none; ``options``: this query's options of
    :meth:`Session.explain` (``bounds=`` say), over the workload's."""

    sql: str
    target: Any
    references: dict[str, float] | None = None
    min_group_size: int | None = None
    level: float = 0.95
    options: dict[str, Any] | None = None


@dataclass(frozen=True)
class Planned:
    """The split: one choice per query, the total ε, and the factor targets were scaled by
    (1: every target met; > 1: the largest relative miss under a fixed total). ``asked``: each
    query's targets as stated (a choice's own targets are the scaled ones)."""

    choices: tuple[Choice, ...]
    total: Fraction
    factor: float
    asked: tuple[tuple[Target, ...], ...] = ()

    def table(self) -> str:
        """The split as text: each query's ε, each target against its expected bar, the total."""
        lines = []
        for i, c in enumerate(self.choices, 1):
            lines.append(f"query {i}: epsilon {float(c.epsilon):.6g}")
            lines += [f"  {t}: expected ± {c.bars[t.column]:.6g}" for t in c.targets]
        lines.append(f"total epsilon {float(self.total):.6g}")
        if self.factor > 1:
            lines.append(f"largest relative miss: targets × {self.factor:.4g}")
        return "\n".join(lines)


def _scaled(targets: tuple[Target, ...], f: float) -> tuple[Target, ...]:
    return tuple(
        replace(t, halfwidth=t.halfwidth * f)
        if t.halfwidth is not None
        else replace(t, relative=(t.relative or 0) * f)
        for t in targets
    )


def plan_workload(
    session: Session,
    items: Sequence[WorkItem],
    *,
    total: Any = None,
    tolerance: float = 0.01,
    **options: Any,
) -> Planned:
    """Split ε over ``items`` — (a) without ``total``: meet every target at the least total;
    (b) with ``total``: minimise the largest relative miss within it. Reads no data, charges
    nothing; see the module docstring for why the split is optimal."""
    if not items:
        raise InvalidArgumentError("an empty workload; pass at least one WorkItem(sql, target)")
    parsed = [
        parse_targets(
            w.target, references=w.references, min_group_size=w.min_group_size, level=w.level
        )
        for w in items
    ]
    asked = tuple(parsed)
    for w, t in zip(items, parsed, strict=True):  # a query or target wrong in itself: say so
        opts = {**options, **(w.options or {})}
        check_targets(
            session.plan(
                w.sql,
                bounds=opts.get("bounds"),
                domains=opts.get("domains"),
                weights=opts.get("weights"),
            ),
            t,
        )

    last: dict[int, tuple[float, Fraction]] = {}  # query → (factor, ε) of its last search

    def split(f: float, cap: Fraction | None = None) -> tuple[Choice, ...] | None:
        """Each query at its smallest ε meeting its targets scaled by ``f``; None as soon as
        the sum passes ``cap``."""
        out = []
        for i, (w, t) in enumerate(zip(items, parsed, strict=True)):
            # a public hint where the search begins: bars shrink about as 1/ε
            hint = None if i not in last else last[i][1] * Fraction(last[i][0] / f)
            c = choose_epsilon(
                session, w.sql, _scaled(t, f), start=hint, **{**options, **(w.options or {})}
            )
            last[i] = (f, c.epsilon)
            out.append(c)
            if cap is not None and _sum(tuple(out)) > cap:
                return None
        return tuple(out)

    if total is None:
        best = split(1.0)
        assert best is not None  # no cap: every query is chosen
        return Planned(best, _sum(best), 1.0, asked)
    cap = as_fraction(total, "total")
    if cap <= 0:
        raise InvalidArgumentError(f"total={total!r} must be a positive ε")

    def fits(f: float) -> tuple[Choice, ...] | None:
        try:  # a query beyond the remaining budget or ε = 10⁴ does not fit either
            return split(f, cap)
        except UserError:
            return None

    try:
        first = split(1.0)
    except UserError:
        first = None
    if first is not None and _sum(first) <= cap:
        return Planned(first, _sum(first), 1.0, asked)
    # the bracket [lo, hi] (lo does not fit, hi does) from the guess Σ ε*_q / total (exact if
    # every bar were c/ε), by steps growing from 2 %; then a geometric bisection
    lo = 1.0
    hi = 2.0 if first is None else max(1.0 + tolerance, float(_sum(first) / cap))
    step = 1.02
    found = fits(hi)
    if found is not None:
        while hi / step > lo:
            trial = fits(hi / step)
            if trial is None:
                lo = hi / step
                break
            hi, found, step = hi / step, trial, step * step
    else:
        while found is None:
            lo, hi, step = hi, hi * step, step * step
            if hi > 2**40:
                raise InvalidArgumentError(
                    f"total={total!r} cannot meet any scaling of the targets"
                )
            found = fits(hi)
    while hi > lo * (1 + tolerance):
        mid = math.sqrt(lo * hi)
        trial = fits(mid)
        if trial is not None:
            hi, found = mid, trial
        else:
            lo = mid
    return Planned(found, _sum(found), hi, asked)


def _sum(choices: tuple[Choice, ...]) -> Fraction:
    return sum((c.epsilon for c in choices), Fraction(0))
