"""Consistent non-negative group counts (optional post-processing).

Clamping each noisy count at 0 biases the group total upward. :func:`consistent_counts`
instead finds the shift λ with Σ max(n̂_i − λ, 0) = max(Σ n̂_i, 0) — the Euclidean projection of
the noisy counts onto non-negative vectors with the same total (the simplex projection of
Held et al. 1974 / Duchi et al. 2008) — and rounds by largest remainders, so the released
counts are non-negative integers that add up exactly to the (clamped) noisy grand total.
Post-processing of released values only: it costs nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["consistent_counts"]


def consistent_counts(noisy: Sequence[int]) -> list[int]:
    """Non-negative integers summing to max(Σ noisy, 0), as close to ``noisy`` as possible."""
    if not noisy:
        return []
    total = max(sum(noisy), 0)
    if total == 0:
        return [0] * len(noisy)
    values = sorted((float(v) for v in noisy), reverse=True)
    lam, running = 0.0, 0.0
    for k, v in enumerate(values, start=1):
        running += v
        candidate = (running - total) / k
        if k == len(values) or values[k] <= candidate:
            lam = candidate
            break
    shifted = [max(float(v) - lam, 0.0) for v in noisy]
    floors = [math.floor(x) for x in shifted]
    missing = total - sum(floors)
    order = sorted(range(len(noisy)), key=lambda i: (floors[i] - shifted[i], i))
    for i in order[:missing]:
        floors[i] += 1
    return floors
