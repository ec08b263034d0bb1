"""Rank guarantees of the exponential-mechanism quantiles (``veil.release.quantiles``): public
functions of the mechanism's temperature ``scale`` and its number of candidates ``limit``.

Proof note. Scores are minus rank distances, some candidate has distance 0 (the candidates'
rank intervals tile [0, n]), so the normaliser Σ exp(u/scale) is ≥ 1 and
P(distance > r) ≤ limit·exp(−r/scale) (McSherry & Talwar 2007; Dwork & Roth 2014, Thm 3.11).

Why not over the runs of equal score that exist (issue 40: on continuous data the bound is
6–9 times the error). On n distinct values spread over 2^32 cells each rank distance holds
about limit/n cells on either side, so the error is about scale·ln(2/(1 − level)), not
scale·ln(limit/(1 − level)). But the cells per distance are the data's gaps: a bound that
counts them reads private data, and a public bound must hold for every dataset — and this
one is attained: put the rows of ranks 0 … τ + r in the first cell and the rest in the
last, and the limit − 1 cells after the first all sit at distance r + 1 against one at 0, so
P(distance > r) = (limit − 1)·e^{−(r+1)/scale} / (1 + (limit − 1)·e^{−(r+1)/scale}). A
bound as tight as the error on continuous data needs a public assumption about the gaps, or
a smaller grid (``quantile_buckets``, which coarsens values).
"""

from __future__ import annotations

import math
from fractions import Fraction

from veil.errors import InternalError

__all__ = ["EXTREME_MISS", "extreme_rank", "rank_halfwidth"]

EXTREME_MISS = Fraction(1, 20)
"""β: MIN (MAX) aims far enough in that it falls below (above) the data with probability ≤ β."""


def extreme_rank(scale: Fraction, limit: int) -> Fraction:
    """k: the rank MIN (MAX) aims at from its end — the least multiple of 1/2 (the extremes'
    scores are in half ranks) with ``(limit − 1)·exp(−k/scale) ≤ β/(1 − β)``, β =
    :data:`EXTREME_MISS`: the closest to the extreme the noise allows while a release outside
    the data keeps probability ≤ β for every dataset of n ≥ 2k rows.

    Proof note. Sufficient: at least one cell holds data, so at most U ≤ limit − 1 candidates
    lie outside it, each at rank distance ≥ k from the target; the cell covering the target
    scores 0, so P(outside) ≤ U·e^{−k/s}/(1 + U·e^{−k/s}) ≤ β. Necessary: with every row in
    the lowest cell, MAX's U = limit − 1 cells above it sit at distance exactly k and the
    data's one cell at 0 — the bound is met with equality, so any k on the half-rank grid
    below this one releases above the maximum with probability > β
    (``tests/release/test_extreme_rank.py`` computes it exactly). (It used to be
    ⌈s·ln(limit/β)⌉, up to half a rank more.) The maximum itself is out of reach of any
    ε-DP release over this grid: a pure-DP quantile needs rank error of order
    log(cells)/ε (Beimel, Nissim & Stemmer 2013)."""
    outside = max(limit - 1, 1)
    beta = float(EXTREME_MISS)
    need = float(scale) * math.log(outside * (1 - beta) / beta)
    halves = max(1, math.ceil(2 * need * (1 + 1e-12)))  # rounding only ever raises k
    return Fraction(halves, 2)


def rank_halfwidth(scale: Fraction, limit: int, level: float) -> float:
    """r = scale·ln(limit/(1 − level)): P(rank distance of the release > r) < 1 − level."""
    if not 0 < level < 1:
        raise InternalError(f"a confidence level must lie in (0, 1), got {level}")
    return float(scale) * math.log(limit / (1 - level))
