"""Error bars of AVG, VARIANCE and STDDEV for all groups at once (not privacy-critical).

Post-processing of public parameters and released values, like :mod:`veil.noise.errorbars`,
whose combination bars these build on; the same contract: the returned half-width ``t``
satisfies ``P(|error| ≤ t) ≥ level`` for the error it describes.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

from veil.noise.errorbars import (
    Noise,
    checked_level,
    combination_halfwidths,
    single_halfwidth,
)

__all__ = ["avg_halfwidths", "stddev_halfwidths", "variance_halfwidths"]

_AVG_CELLS = 1000  # the AVG bar's grid of |m|: a thousandth of the bounds' reach


_AVG_TABLES: dict[tuple[object, ...], NDArray[np.float64]] = {}


def _avg_table(
    sum_noise: tuple[str, Fraction],
    count_noise: tuple[str, Fraction],
    step: float,
    reach: float,
    level: float,
    cells: NDArray[np.intp],
) -> NDArray[np.float64]:
    """T_0…T_1000 (NaN where not computed): T_j bounds |step·Z_S − μ·Z_N| at ``level`` for
    every |μ| ≤ M_j = j·reach/1000 (computed at μ = M_j). The table of one noise law is cached
    and grown by the ``cells`` it lacks, in one batch: each printout of an AVG computes only the
    cells its groups' bars can reach, and only once per law."""
    key = (sum_noise, count_noise, step, reach, level)
    have = _AVG_TABLES.get(key)
    if have is None:
        have = np.full(_AVG_CELLS + 1, np.nan)
    missing = cells[np.isnan(have[cells])]
    if len(missing):
        have = have.copy()
        grid = _avg_grid(reach)[missing]
        have[missing] = combination_halfwidths([(step, *sum_noise), (grid, *count_noise)], level)
        if len(_AVG_TABLES) > 64:
            _AVG_TABLES.clear()
        _AVG_TABLES[key] = have
    return have


def _range_max(
    table: NDArray[np.float64], lo: NDArray[np.intp], hi: NDArray[np.intp]
) -> NDArray[np.float64]:
    """max(table[lo..hi]) elementwise (lo ≤ hi), by a sparse table of maxima over 2^k cells."""
    levels = [table]  # levels[j][i] = max(table[i : i + 2^j])
    while (1 << len(levels)) <= len(table):
        prev, half = levels[-1], 1 << (len(levels) - 1)
        levels.append(np.maximum(prev[:-half], prev[half:]))
    k = np.floor(np.log2(hi - lo + 1)).astype(np.intp)
    out = np.empty(lo.shape)
    for j, lv in enumerate(levels):
        at = k == j
        if at.any():
            out[at] = np.maximum(lv[lo[at]], lv[hi[at] - (1 << j) + 1])
    return out


def _avg_grid(reach: float) -> NDArray[np.float64]:
    grid = np.linspace(0.0, reach, _AVG_CELLS + 1)
    grid[-1] = reach
    return grid


def avg_halfwidths(
    sum_noise: Noise,
    count_noise: Noise,
    *,
    step: float,
    centre: float,
    lower: float,
    upper: float,
    counts: ArrayLike,
    sums: ArrayLike,
    level: float = 0.95,
) -> NDArray[np.float64]:
    """The AVG bars of all groups: ``counts`` the noisy counts n̂, ``sums`` the noisy centred
    sums Ŝ (grid units), released AVG = clamp(centre + step·Ŝ/max(n̂, 1), lower, upper).

    Contract: with m = true mean − centre (|m| ≤ reach = max(|lower − c|, |upper − c|)) and n̂
    ≥ 1, the unclamped error is exactly e = (step·Z_S − m·Z_N)/n̂. Let T_j bound
    |step·Z_S − μ·Z_N| at ``level`` for every |μ| ≤ M_j = j·reach/1000 (computed at μ = M_j:
    the coverage of the fast path is nonincreasing in the count's coefficient), capped by the
    union bound U (which holds for every |μ| ≤ reach). On the event A = {|step·Z_S − m·Z_N| ≤
    T_{cell(|m|)}} (P(A) ≥ level; cell(v) = the j with v ∈ (M_{j−1}, M_j], cell(0) = 0), x =
    |m̂ − m| = |e| satisfies x ≤ T_{cell(|m|)}/n̂ ≤ U/n̂, and |m| ∈ [|m̂| − x, |m̂| + x]. Split x
    ≥ 0 into pieces P_j = {x : cell(min(|m̂| + x, reach)) = j}; on P_j ∩ [0, U/n̂], cell(|m|)
    lies in [cell(max(0, |m̂| − min(sup P_j, U/n̂))), j], so x ≤ W_j/n̂ with W_j the maximum of
    T over those cells. Hence x lies in X = ∪_j {x ∈ P_j : x ≤ W_j/n̂}, and the bar is sup X
    (found exactly piece by piece; no monotonicity of T, slope or fixed point is needed). Only
    the cells of those ranges are computed, once per noise law (``_avg_table``). W_j never
    exceeds the running maximum T_0…T_j, so the bar is never wider than that of the prefix
    table (which needed every cell up to |m̂| + U/n̂). Clamping moves the value toward the
    truth; the bar is capped at upper − lower, which it is when n̂ < max(1, 4 × the count's
    own bar) (too uncertain a ratio), as before.
    """
    lv = checked_level(level)
    n = np.asarray(counts, dtype=np.float64)
    s_units = np.asarray(sums, dtype=np.float64)
    full = float(upper) - float(lower)
    out = np.full(n.shape, full)
    t_count = single_halfwidth(count_noise.mechanism, Fraction(count_noise.scale), lv)
    ok = (n >= 1) & (n >= 4 * t_count)
    reach = max(abs(float(lower) - float(centre)), abs(float(upper) - float(centre)))
    if not ok.any() or full <= 0:
        return out if full > 0 else np.zeros(n.shape)
    sm = (sum_noise.mechanism, Fraction(sum_noise.scale))
    cm = (count_noise.mechanism, Fraction(count_noise.scale))
    # U bounds |step·Z_S − μ·Z_N| for every |μ| ≤ reach (each noise at 1 − (1 − level)/2):
    # cells may use min(T_j, U), so sup X ≤ U/n̂ and only the cells up to there are needed
    half = 1 - (1 - lv) / 2
    union = float(step) * single_halfwidth(*sm, half) + reach * single_halfwidth(*cm, half)
    nn = n[ok][:, None]
    m_hat = np.abs(float(step) * s_units[ok] / n[ok])[:, None]
    far = union / nn  # sup X ≤ U/n̂
    grid = _avg_grid(reach)
    top = float(np.max(m_hat + far))
    cells = min(_AVG_CELLS, int(np.searchsorted(grid, min(top, reach), side="left")) + 1)
    last = cells == _AVG_CELLS  # the last cell also holds every x beyond the reach
    # piece j ≥ 1 holds the x with |m̂| + x ∈ (M_{j−1}, M_j]: x ∈ (max(0, M_{j−1} − |m̂|),
    # M_j − |m̂|]; rows: groups, columns: pieces 1…cells
    lo_x = np.maximum(grid[None, :cells] - m_hat, 0.0)
    hi_x = grid[None, 1 : cells + 1] - m_hat
    if last:
        hi_x[:, -1] = np.inf
    # on piece j the true |m| lies in [|m̂| − x, |m̂| + x] ⊆ [|m̂| − min(hi_x, U/n̂), M_j]
    # (x ≤ U/n̂ in X): its cells run from `low` to j; only pieces that start below U/n̂ and
    # end above 0 can hold a point of X
    rows, pieces = np.nonzero((hi_x >= 0) & (lo_x <= far))
    floor = np.maximum(m_hat[rows, 0] - np.minimum(hi_x[rows, pieces], far[rows, 0]), 0.0)
    starts = np.minimum(np.searchsorted(grid, floor, side="left"), cells)
    ends = pieces + 1
    # the cells some piece's range covers: +1 where a range starts, −1 after it ends
    edges = np.bincount(starts, minlength=_AVG_CELLS + 2)
    edges -= np.bincount(ends + 1, minlength=_AVG_CELLS + 2)
    needed = np.flatnonzero(np.cumsum(edges)[: _AVG_CELLS + 1] > 0)
    table = np.minimum(_avg_table(sm, cm, float(step), reach, lv, needed), union)
    cap = np.zeros(hi_x.shape)
    cap[rows, pieces] = _range_max(table, starts, ends) / nn[rows, 0]
    reachable = np.zeros(hi_x.shape, dtype=bool)
    reachable[rows, pieces] = True
    hit = reachable & (lo_x <= cap)
    best = np.where(hit, np.minimum(hi_x, cap), 0.0).max(axis=1)
    out[ok] = np.minimum(best, full)
    return out


def variance_halfwidths(
    squares_noise: Noise,
    sum_noise: Noise,
    count_noise: Noise,
    *,
    a_q: ArrayLike,
    a_s: ArrayLike,
    a_n: ArrayLike,
    second: ArrayLike,
    level: float = 0.95,
) -> NDArray[np.float64]:
    """The delta-method VARIANCE bars of all groups: the quantile of a_Q·Z_Q + a_S·Z_S + a_N·Z_N
    per group (contract of :func:`combination_halfwidths`) plus ``second``·t_S², t_S the sum
    noise's own quantile (the one-signed second-order term: second = (step)²/(n·d))."""
    lv = checked_level(level)
    sm, qm, cm = sum_noise, squares_noise, count_noise
    hv = combination_halfwidths(
        [
            (a_q, qm.mechanism, qm.scale),
            (a_s, sm.mechanism, sm.scale),
            (a_n, cm.mechanism, cm.scale),
        ],
        lv,
    )
    t_s = single_halfwidth(sm.mechanism, Fraction(sm.scale), lv)
    return np.asarray(hv + np.asarray(second, dtype=np.float64) * t_s * t_s, dtype=np.float64)


def stddev_halfwidths(variances: ArrayLike, bars: ArrayLike) -> NDArray[np.float64]:
    """The variance's interval [v − h, v + h] (clipped at 0) mapped through sqrt, around √v."""
    v = np.asarray(variances, dtype=np.float64)
    h = np.asarray(bars, dtype=np.float64)
    sd = np.sqrt(v)
    return np.asarray(np.maximum(sd - np.sqrt(np.maximum(v - h, 0.0)), np.sqrt(v + h) - sd))
