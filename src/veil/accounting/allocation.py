"""Budget allocation policies, each explicit and exact.

- :func:`even_split` — k queries share a budget evenly (ε_i = ε/k);
- :func:`split_budget` — weights, so that important queries get more;
- :func:`fraction_of_remaining` — a fixed fraction of what remains (never runs out, shrinks
  geometrically);
- :func:`fraction_of_total` — a fixed fraction of the total while it lasts (the seeds' "20 % each
  time", which is exhausted after 1/fraction queries; offered explicitly, never a default).

Every split is exact: the parts compose (sequentially) back to exactly the total.

>>> [str(b) for b in split_budget(Budget(epsilon=1), [3, 1])]
['ε=0.75', 'ε=0.25']
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from veil.accounting.budget import Budget, Number, exact
from veil.errors import InvalidArgumentError

__all__ = ["even_split", "fraction_of_remaining", "fraction_of_total", "split_budget"]


def split_budget(total: Budget, weights: Sequence[Number]) -> list[Budget]:
    """``total`` split in proportion to positive ``weights``; the parts add up to ``total``.

    Each component (ε, δ or ρ) is multiplied by ``w_i / Σw`` exactly, so sequential
    composition of the parts is exactly ``total``.
    """
    if isinstance(weights, str | bytes) or not isinstance(weights, Sequence) or not weights:
        raise InvalidArgumentError(
            f"weights must be a non-empty list of positive numbers, got {weights!r}"
        )
    ws = [exact(w, f"weights[{i}]") for i, w in enumerate(weights)]
    for i, w in enumerate(ws):
        if w <= 0:
            raise InvalidArgumentError(f"weights must be > 0, got weights[{i}]={weights[i]!r}")
    whole = sum(ws, Fraction(0))
    return [total * (w / whole) for w in ws]


def even_split(total: Budget, k: int) -> list[Budget]:
    """``total`` shared evenly by ``k`` queries (sequential composition: ε_i = ε/k)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidArgumentError(f"k must be a positive number of queries, got {k!r}")
    return split_budget(total, [1] * k)


def _fraction(fraction: Number) -> Fraction:
    f = exact(fraction, "fraction")
    if not 0 < f <= 1:
        raise InvalidArgumentError(f"fraction must lie in (0, 1], got {fraction!r}")
    return f


def fraction_of_remaining(remaining: Budget, fraction: Number) -> Budget:
    """``fraction`` of what remains: budgets shrink geometrically and never run out."""
    return remaining * _fraction(fraction)


def fraction_of_total(total: Budget, remaining: Budget, fraction: Number) -> Budget:
    """``fraction`` of the total, or all that remains if less (the seeds' fixed 20 % policy).

    With fraction 1/5 the budget is gone after five queries; that is the policy, stated.
    """
    share = total * _fraction(fraction)
    if remaining.kind != share.kind and not remaining.is_zero():
        raise InvalidArgumentError(
            f"total {total} and remaining {remaining} must be budgets of the same kind"
        )
    if share <= remaining:
        return share
    return remaining
