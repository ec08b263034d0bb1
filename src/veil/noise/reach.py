"""How one privacy unit's rows can spread over the groups of an aggregation, after
contribution bounding: the numbers every privacy map of :mod:`veil.noise.families` scales by.

The proof that these are the worst cases is in :mod:`veil.compile.statistics` (which builds a
:class:`Reach` from an aggregation's limits); ``tests/compile/test_reach.py`` checks it by
brute force over every allocation on small cases.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from veil.errors import InternalError

__all__ = ["Reach"]


@dataclass(frozen=True)
class Reach:
    """How one unit's rows can spread over groups after bounding, for one statistic: at most
    ``groups`` groups, at most ``rows`` in one group, at most ``total`` in all, and
    ``squares`` = the largest Σ_g c_g² over every feasible allocation (c_g rows in group g).

    Contract (:meth:`of`; proof in :mod:`veil.compile.statistics`): for every allocation of
    limits (G, R, T) — 0 ≤ c_g ≤ R, at most G groups with c_g > 0, Σ c_g ≤ T — Σ c_g ≤
    ``total`` and Σ c_g² ≤ ``squares``, each attained by some allocation.
    """

    groups: int
    rows: int
    total: int
    squares: int

    @staticmethod
    def of(groups: int, rows: int, total: int | None = None) -> Reach:
        """The reach of limits G (groups), R (rows per group) and T (rows in all; None: no
        total bound): G' = min(G, T), R' = min(R, T), total = min(T, G·R), and ``squares``
        from the greedy allocation — q = ⌊total/R'⌋ groups of R' rows and one of the rest."""
        if min(groups, rows, 1 if total is None else total) < 1:
            raise InternalError(f"contribution limits must be ≥ 1: {groups}, {rows}, {total}")
        t = groups * rows if total is None else min(total, groups * rows)
        g, r = min(groups, t), min(rows, t)
        q, rest = divmod(t, r)
        return Reach(groups=g, rows=r, total=t, squares=q * r * r + rest * rest)

    @property
    def spread(self) -> Fraction:
        """max Σ_g c_g/R': how many groups' worth of a per-group ε a unit can use."""
        return Fraction(self.total, self.rows)

    @property
    def spread_squared(self) -> Fraction:
        """max Σ_g (c_g/R')²: the same for a per-group ρ."""
        return Fraction(self.squares, self.rows * self.rows)
