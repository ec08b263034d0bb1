"""One quantile's draws for every released group at once: the windows of :func:`row_runs`
and the proposal classes of :func:`sample_runs`, found for all the groups' listed rows
together instead of by some forty numpy calls per group.

Per group the work is :func:`veil.release.quantiles.row_runs`' (its proof note applies as it
is): the two order statistics bounding the window of rows within T of the target rank, found
from a histogram of the cells' top bits and a sort of the rows of the coarse bins that hold
them; the window's cells and counts; its runs (gap, cell, gap, …, with the stretches outside
the window as single *far* runs of the last class); each run's class f = #{k : t_k ≤ s}; and
each class's total length. Here:

- a group small enough to sort whole (or whose window is the whole grid) keeps every row:
  all of those are checked, tagged with their group and widened together, a few numpy calls
  for all of them;
- per larger group, one histogram pass and one mask over its own rows keep the rows of the
  coarse bins holding its window's bounds (the group's own arrays, which the allocator
  recycles: one array of every row cost more in page faults; a sample-based bracket was tried
  and lost — 256 sampled rows place a rank only to ±8 of them, so a narrow bracket missed one
  group in five);
- one sort of the kept rows of every group by (group, cell), whose distinct keys give every
  window's cells and counts, and each bound as a position;
- the runs of every group laid end to end (far left, gap, cell, …, cell, gap, far right), each
  run's class by one binary search in the thresholds, and each (group, class)'s total length
  by one weighted histogram (float sums of lengths below 2^53: exact, as in ``_per_class``).

Then each group, in release order, is drawn by :func:`veil.release.quantiles.draw_classes` from
its class sizes, locating the p-th candidate of a class by a pass over that group's runs only
(``_per_class``' rule). The class sizes are the whole grid's, and the p-th candidate of each
class is the whole grid's, so each group's candidate is the one :func:`choose_quantile_rows`
draws from the same random bytes, reading the same bytes — the same law, draw by draw (tested
against it with seeded and scripted sources). Nothing here reads a random byte before the draws.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from veil.errors import InternalError
from veil.noise._exact import resolve_source
from veil.plan.nodes import Measurement
from veil.random import RandomSource
from veil.release.quantiles import (
    _BAD_CELLS,
    _BIN_BITS,
    _SMALL,
    _WIDE,
    Cells,
    RowCells,
    _factor,
    _gamma,
    _last_threshold,
    _q,
    _targets,
    _thresholds,
    choose_quantile,
    choose_quantile_rows,
    draw_classes,
    far_distance,
)

__all__ = ["choose_quantiles"]

_FEW = 4  # fewer listed groups than this are drawn one by one (nothing to share)


def choose_quantiles(
    m: Measurement, groups: Sequence[Cells], *, source: RandomSource | None = None
) -> list[int]:
    """The candidate index of each group's draw, in order: :func:`choose_quantile_rows` of a
    group listed as rows (:class:`RowCells`), :func:`choose_quantile` of counted cells.

    Contract: the same candidates from the same random bytes as those calls made one after the
    other in this order (the listed groups' windows and classes are found together first,
    which reads no random byte). An invalid cell (outside [0, m.limit)) in any listed group is
    an :class:`InternalError` before any draw.
    """
    src = resolve_source(source)
    listed = [i for i, cells in enumerate(groups) if isinstance(cells, RowCells)]
    rows = [cells for cells in groups if isinstance(cells, RowCells)]
    batch = _Batch.of(m, rows) if len(rows) >= _FEW else None
    slot = {i: k for k, i in enumerate(listed)} if batch is not None else {}
    picks: list[int] = []
    for i, cells in enumerate(groups):
        if batch is not None and i in slot:
            picks.append(0 if m.sensitivity == 0 else batch.draw(slot[i], src))
        elif isinstance(cells, RowCells):
            picks.append(choose_quantile_rows(m, cells, source=src))
        else:
            picks.append(choose_quantile(m, *cells, source=src))
    return picks


@dataclass(frozen=True, eq=False)
class _Batch:
    """Every listed group's runs laid end to end (group g's are ``first[g] … first[g+1] − 1``)
    with their classes, and each group's classes that hold candidates with their sizes
    (:meth:`classes`; ``cap`` the last class)."""

    rows: Sequence[NDArray[Any]]
    start: NDArray[np.int64]
    length: NDArray[np.int64]
    distance: NDArray[np.int64]
    klass: NDArray[np.int64]
    first: list[int]
    far_left: list[bool]
    far_right: list[bool]
    held: list[int]
    sizes: list[int]
    held_at: list[int]
    targets: list[int]
    cap: int
    factor: int
    threshold: int
    gamma: Fraction

    @classmethod
    def of(cls, m: Measurement, groups: Sequence[RowCells]) -> _Batch | None:
        """The batch of ``groups`` (each with ≥ 1 row), or None where ranks could leave int64
        (the groups are then drawn one by one, as Python integers)."""
        q = _q(m)
        factor, limit = _factor(q), m.limit
        rows = [_cells(g.rows) for g in groups]
        n = [int(r.size) for r in rows]
        bits = limit.bit_length()  # a cell < limit < 2^bits
        if not all(n) or factor * (max(n) + 1) >= _WIDE or len(groups) >= 1 << (62 - bits):
            return None
        targets = _targets(m, n)
        threshold = _last_threshold(m.scale, factor, limit)
        w = _windows(rows, targets, threshold, factor, limit)
        runs = _lay_out(w, targets, n, factor, limit, threshold)
        start, length, distance, first, far_left, far_right = runs
        gamma = _gamma(factor, m.scale)
        cap = 64 + limit.bit_length()  # the runs of each group tile the grid: length = limit
        klass = np.searchsorted(_thresholds(gamma, cap)[1], distance, side="right")
        klass = klass.astype(np.int64, copy=False)
        owner = np.repeat(np.arange(len(n), dtype=np.int64), np.diff(first))
        totals = np.bincount(
            owner * (cap + 1) + klass, weights=length, minlength=len(n) * (cap + 1)
        )
        # each group's classes that hold candidates, ascending, and their sizes: group g's
        # are held[held_at[g]:held_at[g + 1]] (most of each group's ~100 classes are empty)
        full = np.flatnonzero(totals)
        held_at = np.searchsorted(full, np.arange(len(n) + 1, dtype=np.int64) * (cap + 1))
        held = (full % (cap + 1)).tolist()
        sizes = totals[full].astype(np.int64).tolist()
        return cls(
            rows, start, length, distance, klass, first, far_left, far_right, held, sizes,
            held_at.tolist(), targets, cap, factor, threshold, gamma,
        )  # fmt: skip

    def classes(self, g: int) -> tuple[list[int], list[int]]:
        """Group g's classes that hold candidates (ascending) and how many each holds."""
        lo, hi = self.held_at[g], self.held_at[g + 1]
        return self.held[lo:hi], self.sizes[lo:hi]

    def draw(self, g: int, source: RandomSource) -> int:
        """Group g's candidate: :func:`draw_classes` over its runs and class sizes."""
        lo, hi = self.first[g], self.first[g + 1]
        start, length, klass = self.start[lo:hi], self.length[lo:hi], self.klass[lo:hi]
        last = hi - lo - 1
        far = {0} if self.far_left[g] else set()
        if self.far_right[g]:
            far.add(last)
        exact = functools.partial(
            far_distance, self.rows[g], self.factor, self.targets[g], self.threshold
        )
        distance = self.distance[lo:hi]

        def locate(j: int, position: int) -> tuple[int, int]:
            # the lengths of class j's runs, running, in grid order (0 for any other run):
            # the first run whose running total passes ``position`` is class j's run holding
            # its position-th candidate, as ``_per_class``' pass over the members finds it
            cum = (length * (klass == j)).cumsum()
            run = int(cum.searchsorted(position, side="right"))
            return run, int(start[run]) + position - (int(cum[run]) - int(length[run]))

        def distance_of(run: int, candidate: int) -> int:
            return exact(candidate) if run in far else int(distance[run])

        held, sizes = self.classes(g)
        return draw_classes(held, sizes, self.cap, locate, distance_of, self.gamma, source)


@dataclass(frozen=True, eq=False)
class _Windows:
    """Per group its window [begin, stop) of the grid and the rows below it, and the windows'
    distinct cells with their counts end to end (group g's ``cells[at[g]:at[g + 1]]``)."""

    begin: list[int]
    stop: list[int]
    below: list[int]
    cells: NDArray[np.int64]
    counts: NDArray[np.int64]
    at: NDArray[np.int64]


def _windows(
    rows: Sequence[NDArray[Any]],
    targets: Sequence[int],
    threshold: int,
    factor: int,
    limit: int,
) -> _Windows:
    """Each group's window (``row_runs``' steps for every group: see the module docstring)."""
    groups = len(rows)
    n = [int(v.size) for v in rows]
    bits = limit.bit_length()
    shift = max(bits - _BIN_BITS, 0)
    bins = ((limit - 1) >> shift) + 1
    # the window's ranks r_lo = ⌊(τF − T)/F⌋ (−1: none below) and r_hi = ⌈(τF + T)/F⌉ (> n:
    # none above), as row_runs has them, in Python integers (T may be 2^63 − 1)
    low = [(t - threshold) // factor if t >= threshold else -1 for t in targets]
    high = [
        min(-((threshold + t) // -factor), size + 1) for t, size in zip(targets, n, strict=True)
    ]
    # per group, the rows of the coarse bins (a cell's top 12 bits) holding x_(r_lo+1) and
    # x_(r_hi), tagged with the group: a pass over the group's rows (its own arrays, which
    # the allocator recycles: one array of every row would cost more in page faults)
    near: list[NDArray[np.int64]] = []
    below = [0] * groups
    # the groups that keep every row (sorted below): checked, tagged and widened together
    whole = [g for g in range(groups) if n[g] <= _SMALL or (low[g] < 0 and high[g] > n[g])]
    if whole:
        every = np.concatenate([rows[g] for g in whole])
        if int(every.min()) < 0 or int(every.max()) >= limit:
            raise InternalError(_BAD_CELLS)
        tagged = every.astype(np.int64)  # (a copy of its own)
        tagged += np.repeat(np.array(whole, dtype=np.int64) << bits, [n[g] for g in whole])
        near.append(tagged)
    ragged = bins << shift > limit  # the last coarse bin reaches past the grid
    for g, v in enumerate(rows):
        if n[g] <= _SMALL or (low[g] < 0 and high[g] > n[g]):
            continue  # (kept whole above)
        tag = g << bits
        top = v >> shift
        counts = _histogram(top, bins)  # (checks the cells: no pass of min and max)
        if counts.size > bins or (ragged and counts[-1] and int(v.max()) >= limit):
            raise InternalError(_BAD_CELLS)
        ends = np.cumsum(counts)
        first = int(np.searchsorted(ends, low[g], side="right")) if low[g] >= 0 else 0
        last = (
            int(np.searchsorted(ends, high[g] - 1, side="right")) if high[g] <= n[g] else bins - 1
        )
        below[g] = int(ends[first - 1]) if first else 0
        kept = v[(top >= first) & (top <= last)].astype(np.int64)
        kept += tag
        near.append(kept)
    order = np.concatenate(near) if len(near) > 1 else near[0]  # (arrays of this call's own)
    order.sort()  # (group, cell) ascending
    tops = np.arange(groups, dtype=np.int64) << bits
    seg = np.searchsorted(order, tops).tolist()
    mask = (1 << bits) - 1
    # x_(r_lo+1) and x_(r_hi) by position in the sorted rows (the grid's ends where none)
    begin = [
        int(order[seg[g] + low[g] - below[g]]) & mask if low[g] >= 0 else 0 for g in range(groups)
    ]
    stop = [
        (int(order[seg[g] + high[g] - 1 - below[g]]) & mask) + 1 if high[g] <= n[g] else limit
        for g in range(groups)
    ]
    # each window's rows: a stretch of the sorted rows; its distinct cells and their counts
    lo = np.searchsorted(order, tops + np.array(begin, dtype=np.int64))
    hi = np.searchsorted(order, tops + np.array(stop, dtype=np.int64))
    stretch = (hi - lo).astype(np.int64)
    pick = np.arange(int(stretch.sum()), dtype=np.int64) + np.repeat(lo - _starts(stretch), stretch)
    inside = order[pick]
    new = np.flatnonzero(inside[1:] != inside[:-1]) + 1  # group bits differ across groups
    heads = np.concatenate(([0], new)).astype(np.int64)
    counts = np.diff(np.append(heads, inside.size))
    cells = inside[heads]
    at = np.searchsorted(cells, np.append(tops, groups << bits))
    base = [below[g] + int(lo[g]) - seg[g] for g in range(groups)]
    return _Windows(begin, stop, base, cells & mask, counts, at)


def _cells(rows: NDArray[Any]) -> NDArray[Any]:
    """A group's cells as one flat array: uint32 ones as they are (half the bytes to pass
    over; each pass here widens only the few rows it keeps), any other as int64."""
    flat = np.asarray(rows).reshape(-1)
    return flat if flat.dtype == np.uint32 else flat.astype(np.int64, copy=False)


def _histogram(top: NDArray[Any], bins: int) -> NDArray[np.int64]:
    """Rows per coarse bin (at least ``bins`` of them; more if a cell lies past the grid); a
    negative cell (which numpy refuses to count) is an :class:`InternalError`."""
    try:
        return np.bincount(top, minlength=bins)
    except ValueError:
        raise InternalError(_BAD_CELLS) from None


def _starts(sizes: NDArray[np.int64]) -> NDArray[np.int64]:
    """Where each of consecutive stretches of ``sizes`` begins: 0, s0, s0 + s1, …"""
    out = np.zeros(sizes.size, dtype=np.int64)
    np.cumsum(sizes[:-1], out=out[1:])
    return out


_Layout = tuple[
    NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], list[int], list[bool], list[bool]
]


def _lay_out(
    w: _Windows, targets: Sequence[int], n: Sequence[int], factor: int, limit: int, threshold: int
) -> _Layout:
    """Every group's runs end to end — far left (when the window begins past 0), gap, cell, …,
    cell, gap, far right (when it ends before the grid's end) — as ``row_runs`` builds one
    group's: start, length, scaled distance; where each group's runs begin (and the end);
    which groups have a far left and a far right run."""
    groups = len(n)
    per = np.diff(w.at)  # cells per window (≥ 1: a window holds x_(r_lo+1) … x_(r_hi))
    if int(per.min()) < 1:
        raise InternalError("a quantile window without a row; this is a bug")
    left = [b > 0 for b in w.begin]
    right = [s < limit for s in w.stop]
    runs = 2 * per + 1 + np.array(left, dtype=np.int64) + np.array(right, dtype=np.int64)
    first = np.append(_starts(runs), int(runs.sum()))
    total = int(first[-1])
    start = np.empty(total, dtype=np.int64)
    length = np.empty(total, dtype=np.int64)
    distance = np.empty(total, dtype=np.int64)
    cells, counts = w.cells, w.counts
    count = cells.size
    lead = np.asarray(w.at[:-1])  # each group's first cell
    # cell i of group g sits at first[g] + left[g] + 1 + 2·(i − lead[g]); its gap just before
    slot = np.repeat(first[:-1] + np.array(left, dtype=np.int64) + 1 - 2 * lead, per)
    slot += 2 * np.arange(count, dtype=np.int64)
    # scaled ranks before and after each cell, minus the target: F·(rows below) − τF
    rank = np.cumsum(counts)
    rank -= np.repeat(rank[lead] - counts[lead], per)  # rows of the window up to each cell
    offset = [factor * w.below[g] - targets[g] for g in range(groups)]
    after = factor * rank + np.repeat(np.array(offset, dtype=np.int64), per)
    before = after - factor * counts
    start[slot], length[slot] = cells, 1
    distance[slot] = np.maximum(np.maximum(-after, before), 0)
    gap = np.empty(count, dtype=np.int64)  # each gap before a cell begins after the cell before
    gap[1:] = cells[:-1] + 1
    gap[lead] = w.begin
    start[slot - 1], length[slot - 1], distance[slot - 1] = gap, cells - gap, np.abs(before)
    tail = w.at[1:] - 1  # each group's last cell: the last gap follows it
    end = slot[tail] + 1
    start[end] = cells[tail] + 1
    length[end] = np.array(w.stop, dtype=np.int64) - start[end]
    distance[end] = np.abs(after[tail])
    stand_in = [max(threshold, factor * size) for size in n]  # ≥ T and ≥ every distance
    for g in range(groups):
        if left[g]:
            at = int(first[g])
            start[at], length[at], distance[at] = 0, w.begin[g], stand_in[g]
        if right[g]:
            at = int(first[g + 1]) - 1
            start[at], length[at], distance[at] = w.stop[g], limit - w.stop[g], stand_in[g]
    return start, length, distance, first.tolist(), left, right
