"""Quantiles by the exponential mechanism over a fixed fine grid, scored by rank intervals.

**Candidates.** The bounds [lower, upper] are cut into ``limit`` cells of width ``step``
(``limit`` = ``quantile_buckets``, 2^32 by default, for a continuous column; the integers
lower, …, upper themselves for an integer column). A row of value x falls in cell
b(x) = clamp(floor((clamp(x) − lower)/step), 0, limit − 1), computed in SQL, and candidate j
releases the value lower + j·step. The candidate set and the released values depend on the
plan alone, never on the data.

**Scores.** Candidate j covers the rank interval [lt_j, le_j] = [#{b(x) < j}, #{b(x) ≤ j}];
its score is minus the distance from the target rank τ to that interval,
u_j = −max(lt_j − τ, τ − le_j, 0). For 0 < q < 1, τ = q·n. So every candidate of a tie (a
banded column: the LFS ``AGE`` takes six values) whose interval holds q·n scores 0, and the
empty cells of a gap between two values score the distance of the gap's single rank, never
the rank "below" them only. MIN and MAX (q = 0, 1) aim at the rank τ = min(k, n/2) from
their end, k the least half rank with (limit − 1)·e^{−k/scale} ≤ β/(1 − β), β = 1/20
(:func:`extreme_rank`, public, with its proof that no smaller k keeps the guarantee): the
0-quantile's score −#{x < c} is flat on [lower, min], so it released a value anywhere below
the true minimum on sparse data (PUMS age: 15 against 18); aiming k ranks in puts the
release below the true minimum with probability ≤ β when n ≥ 2k.

**Sensitivity** (proof note). Adding one row moves lt_j and le_j by 0 or 1 each, and τ by q
(resp. by 0 or 1/2 for the extreme ranks, since min(k, n/2) is 1/2-Lipschitz in n). So
lt_j − τ moves by at most max(q, 1 − q) (resp. 1) and so does τ − le_j; a maximum of
functions moves by at most the largest of their moves. A unit with ≤ R rows in the group
therefore moves every score by at most Δ = R·max(q, 1 − q) (Δ = R for q ∈ {0, 1}), the
measurement's ``sensitivity`` (``veil.compile.statistics``). Choosing j with probability
∝ exp(ε_g·u_j/(2Δ)) = exp(u_j/scale) over the fixed grid is ε_g-DP (McSherry & Talwar 2007,
Thm 6): the data-dependent runs below only group candidates of equal score, they do not
change the candidate set.

**Exact, vectorised sampling.** Scores are integers in units of 1/F (F = q's denominator,
or 2 for the extreme ranks); the grid is handled as *runs* of consecutive candidates with
one score (an occupied cell, or a gap between occupied cells), at most 2·(occupied cells) + 1
of them, built with numpy. A candidate x of integer distance s(x) is proposed with
probability ∝ 2^−f(x), f(x) = min(⌊s(x)·γ·c⌋, cap), γ = 1/(F·scale), c a rational lower
bound of log2 e (so 2^−f(x) ≥ exp(−γ·s(x))); the proposal is exact (integer weights, one
uniform big integer) and f is found by comparing s with exact integer thresholds in bulk. It
is accepted with probability exp(−γ·s(x))·2^f(x) ≤ 1, decided exactly on a lazily refined
uniform (``veil.noise._exact``). An accepted x therefore has probability ∝ exp(−γ·s(x)) =
exp(u_x/scale) exactly; each trial accepts with probability ≳ 1/2. No float decides an
outcome and no work is done per candidate. The runs' distances fall and then rise along
the grid (ranks grow with the cell), so each class is one range of runs on either side of
the nearest run, found by binary search (:func:`sample_runs`), not by a pass over the runs.
A group whose rows arrive as a list (DuckDB's fine grids, :class:`RowCells`) is not sorted
whole: every candidate further than the last class's threshold from the target is in the last
class whatever its exact distance, so only a window of rows around the target rank is sorted
(found by selection in linear time) and the stretches outside stay single runs whose exact
distances are counted only if one of their candidates is proposed (:func:`row_runs`, with
its proof note) — the same class sizes, hence the same candidate from the same draws. A
release finds every listed group's window and classes at once
(:mod:`veil.release.quantile_groups`), and draws each with :func:`draw_classes`.

**Confidence** (:func:`rank_halfwidth`). Some candidate covers τ (the intervals [lt_j, le_j]
tile [0, n]), so the normaliser is ≥ 1 and P(distance > r) < limit·exp(−r/scale) = 1 − level
for r = scale·ln(limit/(1 − level)): with probability ≥ level the released value lies between
the true order statistics of ranks τ − r and τ + r. The bound depends on the plan alone.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from veil.compile.lower import BUCKET_COLUMN, BUCKET_COUNT_COLUMN, COUNT_COLUMN, Lowered
from veil.errors import InternalError
from veil.noise._exact import LazyUniform, draw_word, exp_neg_bounds, resolve_source
from veil.noise.ranks import EXTREME_MISS, extreme_rank, rank_halfwidth
from veil.plan.nodes import Measurement
from veil.random import RandomSource

__all__ = [
    "EXTREME_MISS",
    "Cells",
    "RowCells",
    "Runs",
    "choose_quantile",
    "choose_quantile_rows",
    "extreme_rank",
    "quantile_runs",
    "quantile_scores",
    "rank_halfwidth",
    "row_runs",
    "score_change",
    "split_together",
]

_LOG2E_LOW = Fraction(14426950408889634, 10**16)  # < log2(e) = 1.44269504088896340735…
_BAD_CELLS = "quantile cells must be distinct, inside the grid, with counts ≥ 1"
_WIDE = 1 << 62  # scaled ranks at or above this are kept as Python integers (no overflow)
_BIN_BITS = 12  # row_runs narrows its selection to coarse bins of a cell's top 12 bits
_SMALL = 2048  # row_runs sorts a group of at most this many rows whole


def _q(m: Measurement) -> Fraction:
    if m.statistic != "quantile" or m.quantile is None:
        raise InternalError(f"{m.name!r} is not a quantile measurement")
    return m.quantile


def _factor(q: Fraction) -> int:
    return 2 if q in (0, 1) else q.denominator


def _target(m: Measurement, n: int) -> int:
    """F·τ: the target rank in units of 1/F (see the module docstring)."""
    q = _q(m)
    if q in (0, 1):
        near = min(int(2 * extreme_rank(m.scale, m.limit)), n)  # 2·min(k, n/2)
        return near if q == 0 else 2 * n - near
    return q.numerator * n


def _targets(m: Measurement, sizes: Sequence[int]) -> list[int]:
    """:func:`_target` of each group size (the quantile's checks and ranks made once)."""
    q = _q(m)
    if q in (0, 1):
        k2 = int(2 * extreme_rank(m.scale, m.limit))  # (one k for every group)
        near = [min(k2, n) for n in sizes]
        return near if q == 0 else [2 * n - t for n, t in zip(sizes, near, strict=True)]
    return [q.numerator * n for n in sizes]


@dataclass(frozen=True)
class Runs:
    """The grid as runs of equal score: candidates ``start[i] … start[i] + length[i] − 1``
    all at (scaled) distance ``distance[i]`` from the target; distance/``factor`` is in ranks."""

    start: NDArray[np.int64]
    length: NDArray[np.int64]
    distance: NDArray[Any]
    factor: int
    unimodal: bool = False
    """True when ``distance`` falls and then rises along the grid (a quantile's runs: ranks
    grow with the cell, so the distance to the target does); :func:`sample_runs` then finds
    each class's runs by binary search instead of a pass over every run."""
    far: tuple[int, ...] = ()
    """Runs that stand for a stretch of the grid left out of a window (:func:`row_runs`): each
    candidate in them is at a distance of at least the last class's threshold, so its class is
    known without its distance, and ``distance`` holds a stand-in; :attr:`exact` gives a
    candidate's own distance when one of them is proposed."""
    exact: Callable[[int], int] | None = None
    """The scaled distance of one candidate of a ``far`` run, computed from the group's rows."""

    def distance_of(self, run: int, candidate: int) -> int:
        """The exact scaled distance of ``candidate``, which lies in ``run``."""
        if run in self.far:
            if self.exact is None:
                raise InternalError("a windowed quantile run without its exact distances")
            return self.exact(candidate)
        return int(self.distance[run])


def quantile_runs(m: Measurement, buckets: Any, counts: Any) -> Runs:
    """The runs of one group from its occupied cells ``buckets`` and their row ``counts``.

    Precondition: ``buckets`` are distinct integers in [0, m.limit) and ``counts`` ≥ 1 (the
    engine's exact GROUP BY); anything else is an :class:`InternalError`.
    """
    q = _q(m)
    b = np.asarray(buckets, dtype=np.int64).reshape(-1)
    c = np.asarray(counts, dtype=np.int64).reshape(-1)
    if b.shape != c.shape:
        raise InternalError("one count per occupied quantile cell")
    cells = b.size
    if cells > 1 and not bool(np.all(b[1:] > b[:-1])):  # ascending and distinct: one pass
        order = np.argsort(b, kind="stable")
        b, c = b[order], c[order]
        if bool(np.any(b[1:] == b[:-1])):
            raise InternalError(_BAD_CELLS)
    top = int(c.max()) if cells else 0
    if cells and (b[0] < 0 or b[-1] >= m.limit or int(c.min()) <= 0):
        raise InternalError(_BAD_CELLS)
    # exact: in int64 when no partial sum can reach 2^63, else as Python integers
    n = int(c.sum()) if cells * top < _WIDE else sum(c.tolist())
    factor, target = _factor(q), _target(m, n)
    wide = factor * (n + 1) >= _WIDE or target >= _WIDE
    return _runs(b, c, 0, target, factor, (0, m.limit), wide=wide)


def _runs(
    b: NDArray[np.int64],
    c: NDArray[np.int64],
    base: int,
    target: Any,
    factor: int,
    span: tuple[int, int],
    *,
    wide: bool = False,
) -> Runs:
    """The runs of the stretch ``span`` = [begin, end) of the grid holding the occupied cells
    ``b`` (ascending, distinct, inside the span) with counts ``c``, ``base`` rows lying below
    the stretch: gap, cell, gap, …, cell, gap (a gap may be empty), scored against the scaled
    ``target``. The whole grid is the span (0, limit) with base 0."""
    cells = b.size
    dtype: Any = object if wide else np.int64
    # ranks before and after each cell: base, base + c0, base + c0 + c1, … (scaled by the
    # factor)
    ranks = np.zeros(cells + 1, dtype=dtype)
    np.cumsum(c.astype(dtype) if wide else c, out=ranks[1:])
    if base:
        ranks += base
    ranks *= factor
    # runs in grid order: gap 0, cell 0, gap 1, …, cell M−1, gap M (a gap may be empty:
    # length 0, never drawn); a gap's candidates all cover the one rank below it
    begin, end = span
    start = np.empty(2 * cells + 1, dtype=np.int64)
    start[0] = begin
    start[1::2] = b
    start[2::2] = b
    start[2::2] += 1
    length = np.ones(2 * cells + 1, dtype=np.int64)
    length[0:-1:2] = b  # a gap ends where the next cell (or the stretch) begins
    length[-1] = end
    length[0::2] -= start[0::2]
    distance = np.empty(2 * cells + 1, dtype=dtype)
    gaps = ranks
    gaps -= target  # (rank − target, in place)
    np.abs(gaps, out=distance[0::2])
    # a cell covers [rank before it, rank after it]: 0 if the target is inside
    inside = distance[1::2]
    np.negative(gaps[1:], out=inside)
    np.maximum(inside, gaps[:-1], out=inside)
    np.maximum(inside, 0, out=inside)
    return Runs(start, length, distance, factor, unimodal=True)


def _below(bound: int, source: RandomSource) -> int:
    """An exactly uniform integer in [0, bound) (rejection on whole bytes)."""
    bits = bound.bit_length()
    mask = (1 << bits) - 1
    while True:
        x = int.from_bytes(source.random_bytes((bits + 7) // 8), "little") & mask
        if x < bound:
            return x


@functools.lru_cache(maxsize=256)
def _thresholds(gamma: Fraction, cap: int) -> tuple[NDArray[Any], NDArray[np.int64]]:
    """The exact integer thresholds t_k = ⌈k/(γ·c)⌉, k = 1 … cap, as Python integers and
    clipped to int64 — computed once per (γ, cap), i.e. once per measurement and grid, not
    once per group (the arrays are never written to)."""
    inv = 1 / (gamma * _LOG2E_LOW)
    exact = [math.ceil(k * inv) for k in range(1, cap + 1)]
    clipped = np.array([min(t, (1 << 63) - 1) for t in exact], dtype=np.int64)
    clipped.flags.writeable = False
    return np.array(exact, dtype=object), clipped


def _classes(runs: Runs, gamma: Fraction, cap: int) -> NDArray[np.int64]:
    """f = min(⌊s·γ·c⌋, cap) per run, by exact integer thresholds t_k = ⌈k/(γ·c)⌉."""
    exact, clipped = _thresholds(gamma, cap)
    if runs.distance.dtype == object:
        return np.searchsorted(exact, runs.distance, side="right")
    return np.searchsorted(clipped, runs.distance, side="right").astype(np.int64, copy=False)


def _acceptance(gamma: Fraction, s: int, shift: int) -> Callable[[int], tuple[int, int]]:
    """Bounds of 2^p·exp(−γ·s)·2^shift (≤ 2^p): the acceptance threshold of a proposal at
    scaled distance ``s`` in class ``shift``."""
    n, d = gamma.numerator, gamma.denominator
    return lambda prec: _exp_bounds(n, d, s, prec + shift)


@functools.lru_cache(maxsize=4096)
def _exp_bounds(n: int, d: int, s: int, prec: int) -> tuple[int, int]:
    """``exp_neg_bounds(γ·s, prec)`` for γ = n/d, remembered: a pure function of its
    arguments, and the proposals of one measurement's groups share few (γ, s, class) — the 50
    per-state medians of bench_peers made 365 acceptance tests on 12 of them. Keyed by γ's
    numerator and denominator: hashing a Fraction costs more than the lookup."""
    return exp_neg_bounds(Fraction(n * s, d), prec)


_Classes = tuple[list[int], Callable[[int, int], tuple[int, int]]]
"""Per class j = 0 … cap its total length, and ``locate(j, p)``: the run holding the class's
p-th candidate in grid order, and that candidate."""


def _per_class(runs: Runs, gamma: Fraction, cap: int) -> _Classes:
    """Each class's total length and its runs, by a pass over every run (any distances)."""
    f = _classes(runs, gamma, cap)
    # lengths per class: float sums of integers < 2^53 (≤ limit ≤ 2^40 in all) are exact
    per_class = np.bincount(f, weights=runs.length, minlength=cap + 1).astype(np.int64)

    def locate(j: int, position: int) -> tuple[int, int]:
        members = np.flatnonzero(f == j)  # the runs of class j, in grid order
        cum = np.cumsum(runs.length[members])
        i = int(np.searchsorted(cum, position, side="right"))
        run = int(members[i])
        return run, int(runs.start[run]) + position - (int(cum[i]) - int(runs.length[run]))

    return per_class.tolist(), locate


def _per_class_unimodal(runs: Runs, gamma: Fraction, cap: int) -> _Classes | None:
    """:func:`_per_class` for distances that fall and then rise along the grid, by binary
    search: the classes are monotone in the distance, so each class is one range of runs on
    either side of the nearest one, and a range's length is the difference of its runs'
    starts (the runs tile the grid in order). None when the distances are not int64 or not
    unimodal (never for :func:`quantile_runs`' runs; the caller then makes the full pass)."""
    d = runs.distance
    if d.dtype != np.int64 or d.size < 2:
        return None
    low = int(np.argmin(d))  # first nearest run: d falls on [0, low], rises on [low, end)
    left, right = d[:low], d[low:]
    if not (bool(np.all(left[1:] <= left[:-1])) and bool(np.all(right[1:] >= right[:-1]))):
        return None
    _, t = _thresholds(gamma, cap)  # t_k = ⌈k/(γ·c)⌉, k = 1 … cap; f(s) = #{k : t_k ≤ s}
    # right side: runs low + [below[j], below[j + 1]) have class j (below[k] = #{s < t_k})
    below = np.empty(cap + 2, dtype=np.int64)
    below[0], below[-1] = 0, right.size
    below[1:-1] = np.searchsorted(right, t, side="left")
    # left side, in grid order: runs [above[j + 1], above[j]) have class j (above[k] =
    # #{s ≥ t_k}: a prefix, since s falls)
    above = np.empty(cap + 2, dtype=np.int64)
    above[0], above[-1] = low, 0
    above[1:-1] = low - np.searchsorted(left[::-1], t, side="left")
    # the grid position where run r begins, r = 0 … runs (the last: the grid's end)
    begin = np.append(runs.start, runs.start[-1] + runs.length[-1])
    left_from, left_to = begin[above[1:]], begin[above[:-1]]
    right_from, right_to = begin[low + below[:-1]], begin[low + below[1:]]
    left_size = left_to - left_from
    sizes = (left_size + (right_to - right_from)).tolist()

    def locate(j: int, position: int) -> tuple[int, int]:
        inside = int(left_size[j])
        where = (
            int(left_from[j]) + position
            if position < inside
            else int(right_from[j]) + position - inside
        )
        return int(np.searchsorted(runs.start, where, side="right")) - 1, where

    return sizes, locate


def sample_runs(runs: Runs, scale: Fraction, source: RandomSource) -> int:
    """A candidate index drawn with probability exactly ∝ exp(−distance/(factor·scale)).

    Contract: see the module docstring (proposal 2^−f, exact acceptance exp(−γs)·2^f). The
    classes f are found by a pass over every run, or by binary search when ``runs.unimodal``
    (the same sizes and the same candidate for the same draws: the same law, draw by draw).
    """
    gamma = _gamma(runs.factor, scale)
    total_len = int(runs.length.sum())
    cap = 64 + total_len.bit_length()
    classes = _per_class_unimodal(runs, gamma, cap) if runs.unimodal else None
    per_class, locate = classes if classes is not None else _per_class(runs, gamma, cap)
    held = [j for j, size in enumerate(per_class) if size]
    sizes = [per_class[j] for j in held]
    return draw_classes(held, sizes, cap, locate, runs.distance_of, gamma, source)


@functools.lru_cache(maxsize=256)
def _gamma(factor: int, scale: Fraction) -> Fraction:
    """γ = 1/(F·scale), once per measurement (a Fraction division is not free)."""
    return 1 / (factor * scale)


def draw_classes(
    held: Sequence[int],
    sizes: Sequence[int],
    cap: int,
    locate: Callable[[int, int], tuple[int, int]],
    distance_of: Callable[[int, int], int],
    gamma: Fraction,
    source: RandomSource,
) -> int:
    """The draw of :func:`sample_runs` once the classes are known: the classes j = 0 … cap
    that hold candidates, ``held`` (ascending), and how many each holds, ``sizes`` (≥ 1; every
    other class is empty); ``locate(j, p)`` the run holding class j's p-th candidate in grid
    order and that candidate, ``distance_of(run, candidate)`` its exact scaled distance. A
    class is proposed with probability ∝ size·2^−j, a candidate uniformly inside it, accepted
    with probability exp(−γ·s)·2^j (≤ 1 since j ≤ s·γ·c): the candidate drawn has probability
    ∝ exp(−γ·s) exactly (see the module docstring)."""
    # the classes' weights size·2^(cap − j), in class order: an empty class has weight 0 and
    # is never chosen, so leaving it out chooses as the whole list would (most of the ~100
    # classes are empty)
    weights = [size << (cap - j) for j, size in zip(held, sizes, strict=True)]
    total = sum(weights)
    while True:
        u = _below(total, source)
        k = 0
        while u >= weights[k]:
            u -= weights[k]
            k += 1
        j = held[k]
        run, candidate = locate(j, u >> (cap - j))  # uniform on the class's candidates
        s = distance_of(run, candidate)
        trial = LazyUniform(draw_word(source), 32, source)
        if trial.below(_acceptance(gamma, s, j)):
            return candidate


def choose_quantile(
    m: Measurement, buckets: Any, counts: Any, *, source: RandomSource | None = None
) -> int:
    """The index j of the released candidate (value ``m.centre + j·m.step``).

    Precondition: ``m`` is a compiled quantile measurement; ``buckets``/``counts`` are one
    group's occupied cells and their exact row counts (:func:`quantile_runs`). Postcondition:
    j is drawn with probability ∝ exp(u_j/m.scale), which is ε_g-DP for ε_g = 2Δ/scale.
    """
    runs = quantile_runs(m, buckets, counts)
    if m.sensitivity == 0:
        return 0
    return sample_runs(runs, m.scale, resolve_source(source))


@dataclass(frozen=True, eq=False)
class RowCells:
    """One group's quantile cells as the engine listed them: one cell per bounded row, in no
    order (DuckDB's ``ARRAY_AGG``, :attr:`veil.compile.lower.Lowered.listed`).

    Iterating gives the (cells ascending, counts) pair every other reader of a group's cells
    takes (``bucket_counts``' form); :func:`choose_quantile_rows` draws from the rows as they
    are, without sorting them all.
    """

    rows: NDArray[Any]
    """The cells, int64 or uint32 (a grid of at most 2^32 cells, as DuckDB lists them)."""

    @functools.cached_property
    def pair(self) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The occupied cells, ascending, and their row counts."""
        cells, counts = np.unique(self.rows, return_counts=True)
        return cells.astype(np.int64, copy=False), counts.astype(np.int64, copy=False)

    def __iter__(self) -> Iterator[NDArray[np.int64]]:
        return iter(self.pair)

    def __len__(self) -> int:
        return 2


Cells = tuple[Any, Any] | RowCells
"""One group's quantile (or mode) cells: occupied cells and their exact row counts
(``bucket_counts``), or the listed rows' cells (:class:`RowCells`, which reads as that pair)."""


def row_runs(m: Measurement, rows: RowCells) -> Runs:
    """The runs of one group from its rows' cells, drawing exactly as
    :func:`quantile_runs` of the same cells and counts does — the same class sizes and, from
    the same random bytes, the same candidate — while sorting only a window of them.

    **The window** (proof note). With the class thresholds t_k of :func:`sample_runs`
    (γ = 1/(F·scale), cap = 64 + bits(limit)), a candidate of scaled distance s ≥ T = t_cap
    is in the last class whatever s is. Let x_(1) ≤ … ≤ x_(n) be the rows' cells, r_lo =
    ⌊(τF − T)/F⌋ and r_hi = ⌈(τF + T)/F⌉ (τF the scaled target). A candidate c < x_(r_lo+1)
    has le_c = #{x ≤ c} ≤ r_lo, so s_c ≥ τF − F·le_c ≥ T (a cell's distance is at least
    τF − F·le, a gap's at rank le equals it); a candidate c > x_(r_hi) has lt_c = #{x < c} ≥
    r_hi, so s_c ≥ F·lt_c − τF ≥ T. Every candidate outside [x_(r_lo+1), x_(r_hi)] is
    therefore in the last class, and the runs inside are exactly the whole grid's runs there
    (their ranks offset by the rows below the window). Two order statistics found by
    selection (a histogram of the cells' top bits picks the coarse bins holding them, then
    ``np.partition`` of those bins' rows: linear time) and one sort of the window's few rows
    replace a sort of every row. Each stretch outside becomes one run whose ``distance`` is a
    stand-in (≥ T and ≥ its neighbours', so the runs stay unimodal) and whose candidates'
    exact distances are counted from the rows when one is proposed (:attr:`Runs.exact`: the
    acceptance needs s itself). The runs tile the grid in the same order, so the class sizes
    and the grid position of the p-th candidate of each class are the whole grid's.

    Precondition: ``rows`` are integers in [0, m.limit) (anything else is an
    :class:`InternalError`).
    """
    q = _q(m)
    v = np.asarray(rows.rows, dtype=np.int64).reshape(-1)
    n = v.size
    if n and (int(v.min()) < 0 or int(v.max()) >= m.limit):
        raise InternalError(_BAD_CELLS)
    factor, target = _factor(q), _target(m, n)
    threshold = _last_threshold(m.scale, factor, m.limit)
    low = (target - threshold) // factor if target >= threshold else -1  # r_lo
    high = -((threshold + target) // -factor)  # r_hi = ⌈(τF + T)/F⌉
    if factor * (n + 1) >= _WIDE or n <= _SMALL or (low < 0 and high > n):
        # nothing outside the window (or wide ranks, or so few rows that one sort of them
        # costs less than selecting a window)
        return quantile_runs(m, *rows.pair)
    # the two order statistics, by selection among the rows of the coarse bins (the cell's
    # top 12 bits) that hold them: rows of a lower bin are below x_(r_lo+1), of a higher one
    # above x_(r_hi)
    shift = max(m.limit.bit_length() - _BIN_BITS, 0)
    top = v >> shift
    ends = np.cumsum(np.bincount(top))  # rows in bins 0 … b
    first = int(np.searchsorted(ends, low, side="right")) if low >= 0 else 0
    last = int(np.searchsorted(ends, high - 1, side="right")) if high <= n else ends.size - 1
    below = int(ends[first - 1]) if first else 0
    near = v[(top >= first) & (top <= last)]
    part = np.partition(near, [k - below for k in (low, high - 1) if 0 <= k < n])
    begin = int(part[low - below]) if low >= 0 else 0
    end = int(part[high - 1 - below]) + 1 if high <= n else m.limit
    # rows: the window's cells and counts, then the rows below it
    inside = near[(near >= begin) & (near < end)]
    base = below + int(np.count_nonzero(near < begin))
    cells, counts = np.unique(inside, return_counts=True)
    window = _runs(cells, counts.astype(np.int64), base, target, factor, (begin, end))
    stand_in = max(threshold, factor * n)  # ≥ T, and ≥ every distance (each ≤ F·n)
    start, length, distance = [window.start], [window.length], [window.distance]
    far: list[int] = []
    if begin > 0:
        start.insert(0, np.zeros(1, dtype=np.int64))
        length.insert(0, np.array([begin], dtype=np.int64))
        distance.insert(0, np.array([stand_in], dtype=np.int64))
        far.append(0)
    if end < m.limit:
        far.append(sum(a.size for a in start))
        start.append(np.array([end], dtype=np.int64))
        length.append(np.array([m.limit - end], dtype=np.int64))
        distance.append(np.array([stand_in], dtype=np.int64))

    return Runs(
        np.concatenate(start),
        np.concatenate(length),
        np.concatenate(distance),
        factor,
        unimodal=True,
        far=tuple(far),
        exact=functools.partial(far_distance, v, factor, target, threshold),
    )


def far_distance(rows: NDArray[Any], factor: int, target: int, threshold: int, at: int) -> int:
    """The exact scaled distance of candidate ``at`` from the group's ``rows`` (cells, in any
    order), which lies outside the group's window: counted from the rows, and ≥ ``threshold``
    (T) by the window's proof note, else an :class:`InternalError`."""
    lt = int(np.count_nonzero(rows < at))
    le = lt + int(np.count_nonzero(rows == at))
    if le == lt:  # a gap: its candidates cover the one rank lt
        s = abs(factor * lt - target)
    else:  # an occupied cell covers [lt, le]
        s = max(factor * lt - target, target - factor * le, 0)
    if s < threshold:  # the window holds every candidate nearer than T
        raise InternalError("a quantile candidate outside its window is nearer than T")
    return s


@functools.lru_cache(maxsize=256)
def _last_threshold(scale: Fraction, factor: int, limit: int) -> int:
    """T = t_cap of :func:`sample_runs` for a grid of ``limit`` candidates (clipped to int64):
    a candidate at scaled distance ≥ T is in the last class (once per measurement)."""
    gamma, cap = 1 / (factor * scale), 64 + limit.bit_length()
    return int(_thresholds(gamma, cap)[1][cap - 1])


def choose_quantile_rows(
    m: Measurement, rows: RowCells, *, source: RandomSource | None = None
) -> int:
    """:func:`choose_quantile` of a group's listed rows (:class:`RowCells`): the same law, and
    the same candidate from the same random bytes (:func:`row_runs`)."""
    runs = row_runs(m, rows)
    if m.sensitivity == 0:
        return 0
    return sample_runs(runs, m.scale, resolve_source(source))


def quantile_scores(m: Measurement, cells: Mapping[int, int] | Cells) -> list[Fraction]:
    """The exact score u_j (in ranks) of every candidate, from a group's cell counts — for
    tests and audits of small grids (one Fraction per candidate: ``m.limit`` must be small)."""
    if m.limit > 1 << 20:
        raise InternalError("quantile_scores lists every candidate; use score_change")
    runs = quantile_runs(m, *_cells(cells))
    out: list[Fraction] = []
    for length, s in zip(runs.length.tolist(), runs.distance.tolist(), strict=True):
        out += [-Fraction(int(s), runs.factor)] * int(length)
    return out


def _distance_at(runs: Runs, points: NDArray[np.int64]) -> NDArray[Any]:
    """The scaled distance of each candidate in ``points`` (the last run starting at or before
    it: an empty run shares its start with the next one)."""
    return runs.distance[np.searchsorted(runs.start, points, side="right") - 1]


def _cells(cells: Mapping[int, int] | Cells) -> tuple[Any, Any]:
    if isinstance(cells, Mapping):
        return list(cells), list(cells.values())
    if isinstance(cells, RowCells):
        return cells.pair
    return cells


def score_change(
    m: Measurement, a: Mapping[int, int] | Cells, b: Mapping[int, int] | Cells
) -> Fraction:
    """max_j |u_j(a) − u_j(b)| over the whole grid for one group's cells on two datasets (a
    count map, or the (cells, counts) pair of ``bucket_counts``) — what the sensitivity
    bounds. Scores are constant on every run of either side, so comparing them at the union
    of both sides' run starts covers every candidate (vectorised, any grid size)."""
    ra, rb = quantile_runs(m, *_cells(a)), quantile_runs(m, *_cells(b))
    points = np.union1d(ra.start, rb.start)
    points = points[points < m.limit]
    change = np.abs(_distance_at(ra, points) - _distance_at(rb, points))
    return Fraction(int(change.max()), ra.factor)


def cells_of(counts: Sequence[int]) -> tuple[list[int], list[int]]:
    """The occupied cells and counts of a dense count vector (tests, small grids)."""
    cells = [i for i, c in enumerate(counts) if c]
    return cells, [counts[i] for i in cells]


def _rows(table: pa.Table, mask: pa.ChunkedArray) -> pa.Table:
    """The rows of ``table`` where ``mask`` is true, in order: a zero-copy slice when they are
    consecutive (DuckDB returns each grouping set's rows together), else a filtered copy."""
    count = pc.sum(mask).as_py() or 0
    if not count:
        return table.slice(0, 0)
    first = pc.index(mask, True).as_py()
    if pc.all(mask.slice(first, count)).as_py():
        return table.slice(first, count)
    return table.filter(mask)


def split_together(lowered: Lowered, table: pa.Table) -> tuple[pa.Table, dict[str, pa.Table]]:
    """``lowered.together``'s output as ``main``'s table and each quantile's cell table
    (keys, ``__b``, ``__c``), as the separate statements return them (see
    :class:`veil.compile.lower.Lowered`). Vectorised (Arrow slices or filters); total: every row the
    statement can return lands in exactly one of the tables or, for a NULL cell of a grouping
    set (never: a quantile's cell is a clamped integer) or a mode's rows outside its
    candidates (the cell −1, which its own statement leaves out), in none; a ``listed``
    column's lists stay one list per group, beside its ``main`` row's keys (:func:`_listed`).
    Measurements that share a column (``Lowered.cells``) get the same table."""
    # (quantiles with the same cells share one column: each column is read once, and its
    # quantiles get the same table)
    names = list(dict.fromkeys(column for _, column in lowered.cells))
    if not names:
        raise InternalError("splitting a statement that carries no quantile cells")
    scalar = [n for n in names if n not in lowered.listed]
    valid = {n: pc.is_valid(table.column(n)) for n in scalar}
    rows = table
    if scalar:  # main's rows: every scalar cell column NULL
        none = pc.invert(valid[scalar[0]])
        for n in scalar[1:]:
            none = pc.and_(none, pc.invert(valid[n]))
        rows = _rows(table, none)
    main = rows.drop_columns(names)
    by_column: dict[str, pa.Table] = {}
    for column in names:
        if column in lowered.listed:
            by_column[column] = _listed(lowered, rows, column)
    if not scalar:
        return main, {name: by_column[column] for name, column in lowered.cells}
    # the cells' keys as dictionary codes (equal keys, equal codes: what bucket_counts groups
    # by), encoded once rather than a copy of every cell's key per quantile
    coded = table.select([*lowered.keys, *scalar, COUNT_COLUMN])
    for i, key in enumerate(lowered.keys):
        column = coded.column(i)
        if not pa.types.is_dictionary(column.type):
            encoded = pc.dictionary_encode(column.combine_chunks(), null_encoding="encode")
            coded = coded.set_column(i, key, encoded)
    for column in scalar:
        kept = valid[column]
        if column in lowered.modes:  # a mode's rows outside its candidates: the cell −1
            kept = pc.and_kleene(kept, pc.greater_equal(table.column(column), 0))  # (no NULL)
        part = _rows(coded, kept).select([*lowered.keys, column, COUNT_COLUMN])
        by_column[column] = part.rename_columns([*lowered.keys, BUCKET_COLUMN, BUCKET_COUNT_COLUMN])
    return main, {name: by_column[column] for name, column in lowered.cells}


def _listed(lowered: Lowered, rows: pa.Table, column: str) -> pa.Table:
    """The cell table (keys, ``__b``) of ``main``'s ``rows`` whose ``column`` holds each
    group's list of cells: one row per group with a list — its keys as ``main`` has them and
    its list as it is (``bucket_counts`` reads each as a group's :class:`RowCells`, no cell
    copied or keyed one by one); a NULL list (no row) has no cell."""
    kept = rows.select([*lowered.keys, column])
    if kept.column(column).null_count:  # (a filter copies every list: only when needed)
        kept = kept.filter(pc.is_valid(kept.column(column)))
    return kept.rename_columns([*lowered.keys, BUCKET_COLUMN])
