"""Quantiles by the exponential mechanism over a bounded, discretised domain.

The domain [lower, upper] is cut into ``limit`` buckets of width ``step``; the candidates are
the ``limit + 1`` bucket edges c_j = lower + j·step. With rank_j = Σ_{i<j} count_i (rows below
c_j, from exact per-bucket counts computed in SQL) and n = Σ count_i, candidate j scores
u_j = −|rank_j − q·n|. Adding or removing one row changes every u_j by at most max(q, 1 − q),
so a unit with ≤ R rows in the group changes it by at most Δ = R·max(q, 1 − q) (the
measurement's ``sensitivity``). Choosing j with probability ∝ exp(ε_g·u_j/(2Δ)) is ε_g-DP
(McSherry & Talwar 2007); MIN and MAX are the 0- and 1-quantiles (they lean toward the bounds
when data are sparse).

For an integer column (``discrete`` measurements) the candidates are the integers of the
bounds themselves, v_j = lower + j, scored by their mid-rank: u_j = −|(#{x < v_j} + #{x ≤
v_j})/2 − q·n|. One row moves the mid-rank by 0, 1/2 or 1 and q·n by q, so the sensitivity is
the same R·max(q, 1 − q).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction

from veil.errors import InternalError
from veil.noise.mechanisms import exponential
from veil.plan.nodes import Measurement
from veil.random import RandomSource

__all__ = ["choose_quantile", "quantile_scores"]


def quantile_scores(
    counts: Sequence[int], q: Fraction, *, discrete: bool = False
) -> list[Fraction]:
    """The exact scores of the candidates: −|rank_j − q·n| for the ``len(counts) + 1`` bucket
    edges, or −|mid-rank_j − q·n| for the ``len(counts)`` integer values when ``discrete``."""
    n = sum(counts)
    target = q * n
    scores: list[Fraction] = []
    rank = 0
    if discrete:
        for c in counts:
            scores.append(-abs(Fraction(2 * rank + c, 2) - target))
            rank += c
        return scores
    for c in [*counts, 0]:
        scores.append(-abs(rank - target))
        rank += c
    return scores


def choose_quantile(
    m: Measurement, counts: Sequence[int], *, source: RandomSource | None = None
) -> int:
    """The index j of the released candidate edge (value ``m.centre + j·m.step``).

    Precondition: ``m`` is a compiled quantile measurement and ``counts`` its ``m.limit``
    exact bucket counts for one group. The per-group ε is ``2·sensitivity/scale``.
    """
    if m.quantile is None or len(counts) != m.limit:
        raise InternalError("choose_quantile needs a quantile measurement and one count per bucket")
    scores = quantile_scores(counts, m.quantile, discrete=m.discrete)
    if m.sensitivity == 0:
        return 0
    eps_g = 2 * m.sensitivity / m.scale
    index: int = exponential(scores, sensitivity=m.sensitivity, epsilon=eps_g, source=source)
    return index
