"""The public guarantee of an exponential-mechanism choice by counts (MODE): a margin in
counts that wins with probability ≥ level, a function of the temperature and the number of
candidates alone.

Proof note. With temperature T, candidate j is chosen with probability
exp(c_j/T)/Σ_i exp(c_i/T). If c_* ≥ c_j + m for every j ≠ *, then
P(j) ≤ exp((c_j − c_*)/T) ≤ exp(−m/T), so P(not *) ≤ (K − 1)·exp(−m/T) = 1 − level for
m = T·ln((K − 1)/(1 − level)) (McSherry & Talwar 2007; Dwork & Roth 2014, Thm 3.11).
"""

from __future__ import annotations

import math
from fractions import Fraction

from veil.errors import InternalError

__all__ = ["mode_margin"]


def mode_margin(scale: Fraction, candidates: int, level: float) -> float:
    """m = T·ln((K − 1)/(1 − level)): a candidate whose count exceeds every other's by ≥ m is
    chosen with probability ≥ ``level`` (0 with a single candidate)."""
    if not 0 < level < 1:
        raise InternalError(f"a confidence level must lie in (0, 1), got {level}")
    if candidates <= 1:
        return 0.0
    return float(scale) * math.log((candidates - 1) / (1 - level))
