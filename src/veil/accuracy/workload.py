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
            session.plan(w.sql, bounds=opts.get("bounds"), domains=opts.get("domains")), t
        )

    def split(f: float) -> tuple[Choice, ...]:
        return tuple(
            choose_epsilon(session, w.sql, _scaled(t, f), **{**options, **(w.options or {})})
            for w, t in zip(items, parsed, strict=True)
        )

    if total is None:
        best = split(1.0)
        return Planned(best, _sum(best), 1.0, asked)
    cap = as_fraction(total, "total")
    if cap <= 0:
        raise InvalidArgumentError(f"total={total!r} must be a positive ε")

    def fits(f: float) -> tuple[Choice, ...] | None:
        try:  # a query beyond the remaining budget or ε = 10⁴ does not fit either
            trial = split(f)
        except UserError:
            return None
        return trial if _sum(trial) <= cap else None

    found = fits(1.0)
    if found is not None:
        return Planned(found, _sum(found), 1.0, asked)
    lo, hi = 1.0, 2.0
    while (found := fits(hi)) is None:  # bracket: a factor whose split fits
        lo, hi = hi, hi * 2
        if hi > 2**40:
            raise InvalidArgumentError(f"total={total!r} cannot meet any scaling of the targets")
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
