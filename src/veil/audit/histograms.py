"""The two output distributions of a neighbouring pair, binned: the audits' picture.

One :class:`Histogram` per pair (a mechanism audit) or per neighbour's worst cell (a query
audit), over shared bins of the pooled central 98 % (outputs beyond it fall in the end bins;
a cell not released, NaN, is counted apart). It is drawn as text bars in the terminal
(:meth:`Histogram.lines`) and, with the ``plot`` extra, as a PNG (:mod:`veil.audit.plot`).
An audit reads raw data by design (it is for the data owner), so its pictures are not private.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["Histogram", "histogram"]

BINS = 12
WIDTH = 20  # characters of the longest text bar


@dataclass(frozen=True)
class Histogram:
    """Shares of the outputs on each side falling in each bin (``edges`` has one more entry
    than each share vector), and the share not released (NaN) on each side."""

    edges: tuple[float, ...]
    first: tuple[float, ...]
    second: tuple[float, ...]
    first_missing: float = 0.0
    second_missing: float = 0.0

    def lines(self, first: str = "first input", second: str = "second input") -> tuple[str, ...]:
        """Text bars: ``#`` for the first side, ``=`` for the second, scaled to the tallest."""
        top = max(max(self.first, default=0.0), max(self.second, default=0.0), 1e-12)
        rows = [f"  histogram (# {first}, = {second}):"]
        for lo, a, b in zip(self.edges, self.first, self.second, strict=False):
            bar_a, bar_b = "#" * round(WIDTH * a / top), "=" * round(WIDTH * b / top)
            rows.append(f"  {lo:>10.4g} |{bar_a:<{WIDTH}}|{bar_b:<{WIDTH}}|")
        if self.first_missing or self.second_missing:
            rows.append(
                f"  not released: {self.first_missing:.3f} ({first}), "
                f"{self.second_missing:.3f} ({second})"
            )
        return tuple(rows)

    def to_json(self) -> dict[str, Any]:
        return {
            "edges": list(self.edges),
            "first": list(self.first),
            "second": list(self.second),
            "first_not_released": self.first_missing,
            "second_not_released": self.second_missing,
        }


def histogram(
    x: Sequence[float] | NDArray[np.float64],
    y: Sequence[float] | NDArray[np.float64],
    bins: int = BINS,
) -> Histogram | None:
    """Both sides binned over shared bins of the central 98 % of their pooled finite values
    (values beyond fall in the end bins; integer outputs in bins of whole integers, at most
    ``bins`` of them); None when neither side has a finite value."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    fa, fb = a[np.isfinite(a)], b[np.isfinite(b)]
    pooled = np.concatenate([fa, fb])
    if pooled.size == 0:
        return None
    lo, hi = (float(v) for v in np.quantile(pooled, [0.01, 0.99]))
    if np.all(pooled == np.round(pooled)) and hi - lo < 2.0**52:
        # integer outputs: bins of a whole number of integers, edges half-way between them,
        # so no bin holds one more possible value than its neighbour (no aliasing stripes)
        first, last = math.floor(lo), math.ceil(hi)
        width = max(1, math.ceil((last - first + 1) / bins))
        count = math.ceil((last - first + 1) / width)
        edges = first - 0.5 + width * np.arange(count + 1, dtype=float)
        lo, hi = float(edges[0]), float(edges[-1])
    else:
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        edges = np.linspace(lo, hi, bins + 1)
    ha = np.histogram(np.clip(fa, lo, hi), edges)[0] / max(len(a), 1)
    hb = np.histogram(np.clip(fb, lo, hi), edges)[0] / max(len(b), 1)
    return Histogram(
        tuple(float(e) for e in edges),
        tuple(float(v) for v in ha),
        tuple(float(v) for v in hb),
        1 - len(fa) / max(len(a), 1),
        1 - len(fb) / max(len(b), 1),
    )
