"""The public grids and the choices of ``limits="auto"`` and ``limits="auto_groups"``
(:mod:`veil.autolimits`, whose docstring holds the design, the contract and the sensitivity
proof): pure functions of the caps and of the released noisy counts — post-processing only,
total (any integer counts give a candidate), floats allowed (nothing here touches the data).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from veil.autobounds_choice import _variance, threshold
from veil.errors import InternalError

__all__ = [
    "Choice",
    "Picked",
    "candidates",
    "choose_joint",
    "choose_limit",
    "fine_candidates",
    "histogram_edges",
    "joint_candidates",
    "midpoints",
    "powers",
]

_TOP = Fraction(2) ** 62  # no unit has more rows: the last bin's closed upper edge


# -- the public grids -----------------------------------------------------------------------
def candidates(cap: int) -> tuple[int, ...]:
    """The candidate bounds 1, 2, 3, 4, 6, 8, 12, … up to ``cap`` (``cap`` itself included)."""
    if cap < 1:
        raise InternalError(f"a cap of {cap} rows")
    out = {1}
    p = 2
    while p <= cap:
        out.add(p)
        if p + p // 2 <= cap:
            out.add(p + p // 2)
        p *= 2
    out.add(cap)
    return tuple(sorted(out))


def fine_candidates(cap: int) -> tuple[int, ...]:
    """``limits="auto"``'s candidates: 1, 2, 3, then four a doubling — 2^k·(1, 5/4, 3/2, 7/4):
    4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, … — up to ``cap`` (included). A step of at
    most a quarter: where 20 rows per unit is right, :func:`candidates` offers 16 (a quarter of
    the rows dropped) or 24 (a fifth more noise). More bins raise the step's threshold
    τ = ⌈s·ln(B/β)⌉ — 36 bins over 1 … 1024 against 20: ln(36/β)/ln(20/β) = 1.10 — and thin
    them: every integer to 32 (52 bins) left units of 20 rows in bins of their own but hid a
    tail of 150 units a bin below τ = 153 (3,000 units of 1–20 rows, a target of ±400 on their
    count: 15 chosen where 20 was right)."""
    if cap < 1:
        raise InternalError(f"a cap of {cap} rows")
    out = {t for t in (1, 2, 3) if t <= cap}
    p = 4
    while p <= cap:
        out.update(t for t in (p, p * 5 // 4, p * 3 // 2, p * 7 // 4) if t <= cap)
        p *= 2
    out.add(cap)
    return tuple(sorted(out))


def powers(cap: int) -> tuple[int, ...]:
    """1, 2, 4, 8, … up to ``cap`` (``cap`` itself included): the coarser grid of G and R."""
    if cap < 1:
        raise InternalError(f"a cap of {cap}")
    return tuple(sorted({1 << i for i in range(cap.bit_length()) if 1 << i <= cap} | {cap}))


def histogram_edges(grid: Sequence[int]) -> tuple[Fraction, ...]:
    """The bins of a per-unit histogram: ``[c_i, c_{i+1})`` for the candidates and a last bin
    ``[cap, 2^62]`` holding every larger count."""
    return (*(Fraction(c) for c in grid), _TOP)


def midpoints(grid: Sequence[int]) -> tuple[Fraction, ...]:
    """A representative count per bin: the midpoint of its integers; the cap for the last."""
    mids = [Fraction(a + b - 1, 2) for a, b in itertools.pairwise(grid)]
    return (*mids, Fraction(grid[-1]))


def joint_candidates(g_cap: int, r_cap: int, t_cap: int) -> tuple[tuple[int, int, int], ...]:
    """The ``(T, G, R)`` candidates of ``limits="auto_groups"``, each in its normal form
    ``G ≤ T``, ``R ≤ T``, ``T ≤ G·R`` (the same bounding and the same reach as the triple it
    stands for, so each is compiled once): T on :func:`candidates`, G and R on
    :func:`powers`, within the caps. ``(T, T, T)`` for every T of :func:`candidates` (lowered
    to the caps) is among them — ``limits="auto"``'s own grid, :func:`fine_candidates`, is
    finer."""
    out = set()
    for t in candidates(t_cap):
        for g in (*powers(g_cap), t):
            for r in (*powers(r_cap), t):
                g_, r_ = min(g, g_cap, t), min(r, r_cap, t)
                out.add((min(t, g_ * r_), g_, r_))
    return tuple(sorted(out))


# -- the choices (post-processing) ----------------------------------------------------------
@dataclass(frozen=True)
class Choice:
    """The post-processed choice from one noisy histogram (``limits="auto"``)."""

    limit: int
    dropped: float  # D(T) / noisy total rows, clipped to [0, 1]
    bar: float  # its ≈95 % half-width
    rows: float  # the noisy total of rows
    errors: tuple[tuple[int, float, float], ...]  # (T, D(T), N(T)) per candidate


@dataclass(frozen=True)
class Picked:
    """What either mode chose: the limits ``(T, G, R)`` the query runs with, the expected
    share of rows dropped and its ≈95 % half-width, the noisy total of rows."""

    max_rows: int
    max_groups: int
    max_rows_per_group: int
    dropped: float
    bar: float
    rows: float


def choose_limit(
    grid: Sequence[int],
    counts: Sequence[int],
    noise: Sequence[float],
    scale: Fraction,
    allowed: Collection[int] | None = None,
) -> Choice:
    """T minimising ``D(T) + noise[T]`` from noisy ``counts`` (one per bin of
    :func:`histogram_edges`), among the candidates in ``allowed`` (default all of them);
    post-processing only, total: any integers give a candidate."""
    if len(counts) != len(grid) or len(noise) != len(grid) or not grid:
        raise InternalError(f"{len(counts)} counts, {len(noise)} noises for {len(grid)} bins")
    if allowed is not None and not set(allowed) & set(grid):
        raise InternalError(f"no candidate among {sorted(allowed)} on the grid")
    tau = threshold(scale, len(counts))
    n = [c if c >= tau else 0 for c in counts]  # an empty far bin's noise weighs like data
    mids = midpoints(grid)
    errors = []
    for t, cost in zip(grid, noise, strict=True):
        d = float(sum(c * max(Fraction(0), m - t) for c, m in zip(n, mids, strict=True)))
        errors.append((t, d, cost))
    best = min(
        (e for e in errors if allowed is None or e[0] in allowed), key=lambda e: (e[1] + e[2], e[0])
    )
    total = float(sum(c * m for c, m in zip(n, mids, strict=True)))
    t = best[0]
    weights = [float(max(Fraction(0), m - t)) if c else 0.0 for c, m in zip(n, mids, strict=True)]
    spread = 1.96 * math.sqrt(_variance(scale) * sum(w * w for w in weights))
    share = min(1.0, best[1] / total) if total > 0 else 0.0
    bar = min(1.0, spread / total) if total > 0 else 0.0
    return Choice(t, share, bar, total, tuple(errors))


def choose_joint(
    g_grid: Sequence[int],
    t_grid: Sequence[int],
    counts: Sequence[int],
    scale: Fraction,
    limits: Sequence[tuple[int, int, int]],
    noise: Sequence[float],
    allowed: Collection[tuple[int, int, int]] | None = None,
) -> Picked:
    """``(T, G, R)`` among ``limits`` (those in ``allowed``, default all) minimising
    ``D(T, G, R) + noise[k]``.

    ``counts``: the noisy joint histogram, one count per cell, groups outer — cell ``(i, j)``
    holds the units with a number of distinct groups in bin i of ``g_grid`` and a number of rows
    in bin j of ``t_grid`` (the bins of :func:`histogram_edges`). A count below
    ``τ = ⌈s·ln(B/β)⌉`` (B the cells) is taken as 0, as in :func:`choose_limit`. With ``g``,
    ``t`` the cells' midpoints (:func:`midpoints`; ``g`` at most ``t``: a unit has at most as
    many groups as rows), a unit of the cell is taken to have ``g`` groups of ``t/g`` rows, so
    it keeps ``k = min(T, min(G, g)·min(R, t/g))`` rows and ``D = Σ n·(t − k)`` — exactly
    :func:`choose_limit`'s ``D(T)`` where G and R do not bind, an under-estimate where R binds
    on a unit whose groups differ in size. The smallest ``(T, G·R, G)`` wins ties. Total: any
    integers give one of ``limits``."""
    cells = len(g_grid) * len(t_grid)
    if len(counts) != cells or len(noise) != len(limits) or not limits:
        raise InternalError(f"{len(counts)} counts for {cells} cells, {len(noise)} noises")
    tau = threshold(scale, cells)
    n = np.array([float(c) if c >= tau else 0.0 for c in counts])
    t = np.tile(np.array([float(m) for m in midpoints(t_grid)]), len(g_grid))
    g = np.minimum(np.repeat(np.array([float(m) for m in midpoints(g_grid)]), len(t_grid)), t)
    lim = np.array(limits, dtype=float)  # (T, G, R) per candidate
    kept = np.minimum(
        lim[:, :1], np.minimum(lim[:, 1:2], g) * np.minimum(lim[:, 2:3], t / g)
    )  # candidates × cells
    dropped = np.maximum(t - kept, 0.0) @ n
    if allowed is not None and not set(allowed) & set(limits):
        raise InternalError(f"no candidate among {sorted(allowed)}")
    order = sorted(
        (k for k in range(len(limits)) if allowed is None or limits[k] in allowed),
        key=lambda k: (
            float(dropped[k]) + noise[k],
            limits[k][0],
            limits[k][1] * limits[k][2],
            limits[k][1],
        ),
    )
    best = order[0]
    total = float(t @ n)
    weights = np.where(n != 0, np.maximum(t - kept[best], 0.0), 0.0)
    spread = 1.96 * math.sqrt(_variance(scale) * float(weights @ weights))
    share = min(1.0, max(0.0, float(dropped[best]) / total)) if total > 0 else 0.0
    bar = min(1.0, spread / total) if total > 0 else 0.0
    tt, gg, rr = limits[best]
    return Picked(tt, gg, rr, share, bar, total)
