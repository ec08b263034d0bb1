"""Accuracy versus ε: the data-independent error bar of each targeted column at several ε."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from veil.accounting.budget import Number
from veil.accuracy.search import check_targets, target_bars
from veil.accuracy.targets import Target
from veil.errors import InvalidArgumentError
from veil.plan.nodes import as_fraction

if TYPE_CHECKING:
    from veil.plan.nodes import Plan
    from veil.session import Session

__all__ = ["Curve", "accuracy_curve"]


@dataclass(frozen=True)
class Curve:
    """``bars[i][column]``: the bar of ``column`` at ``epsilons[i]`` (at each column's level)."""

    epsilons: tuple[Fraction, ...]
    columns: tuple[str, ...]
    bars: tuple[dict[str, float], ...]

    def table(self) -> str:
        """The curve as a text table, one row per ε."""
        head = ["epsilon", *self.columns]
        rows = [
            [f"{float(e):.6g}", *(f"± {b[c]:.6g}" for c in self.columns)]
            for e, b in zip(self.epsilons, self.bars, strict=True)
        ]
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        return "\n".join(
            "  ".join(x.rjust(w) for x, w in zip(r, widths, strict=True)) for r in [head, *rows]
        )


def accuracy_curve(
    session: Session,
    query: str | Plan,
    columns: Sequence[str | Target],
    epsilons: Sequence[Number],
    **options: Any,
) -> Curve:
    """The bars of ``columns`` (names: 95 % absolute bars; or :class:`Target` objects for a level
    and AVG's ``min_group_size``) at each of ``epsilons``; reads no data, charges nothing."""
    if not epsilons:
        raise InvalidArgumentError("no epsilon given; pass epsilons=[0.1, 0.5, 1] (say)")
    eps = tuple(sorted(as_fraction(e, "epsilon") for e in epsilons))
    if eps[0] <= 0:
        raise InvalidArgumentError(f"epsilon {float(eps[0]):g} must be positive")
    targets = tuple(c if isinstance(c, Target) else Target(c, halfwidth=1.0) for c in columns)
    domains = options.pop("domains", None)
    plan = (
        query
        if not isinstance(query, str)
        else session.plan(
            query, bounds=options.get("bounds"), domains=domains, weights=options.get("weights")
        )
    )
    check_targets(plan, targets)
    bars = tuple(target_bars(session.explain(plan, epsilon=e, **options), targets) for e in eps)
    return Curve(eps, tuple(t.column for t in targets), bars)
