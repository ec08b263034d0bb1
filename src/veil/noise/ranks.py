"""Rank guarantees of the exponential-mechanism quantiles (``veil.release.quantiles``): public
functions of the mechanism's temperature ``scale`` and its number of candidates ``limit``.

Proof note. Scores are minus rank distances, some candidate has distance 0 (the candidates'
rank intervals tile [0, n]), so the normaliser Σ exp(u/scale) is ≥ 1 and
P(distance > r) ≤ limit·exp(−r/scale) (McSherry & Talwar 2007; Dwork & Roth 2014, Thm 3.11).
"""

from __future__ import annotations

import math
from fractions import Fraction

from veil.errors import InternalError

__all__ = ["EXTREME_MISS", "extreme_rank", "rank_halfwidth"]

EXTREME_MISS = Fraction(1, 20)
"""β: MIN (MAX) aims far enough in that it falls below (above) the data with probability ≤ β."""


def extreme_rank(scale: Fraction, limit: int) -> int:
    """k = ⌈scale·ln(limit/β)⌉: the rank MIN (MAX) aims at from its end. A candidate outside
    the data is at distance ≥ k when n ≥ 2k, so by the tail bound all ≤ ``limit`` of them
    together are drawn with probability ≤ limit·exp(−k/scale) ≤ β."""
    return max(1, math.ceil(float(scale) * math.log(limit / float(EXTREME_MISS))))


def rank_halfwidth(scale: Fraction, limit: int, level: float) -> float:
    """r = scale·ln(limit/(1 − level)): P(rank distance of the release > r) < 1 − level."""
    if not 0 < level < 1:
        raise InternalError(f"a confidence level must lie in (0, 1), got {level}")
    return float(scale) * math.log(limit / (1 - level))
