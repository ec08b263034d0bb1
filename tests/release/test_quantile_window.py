"""The quantile draw from a group's listed rows (``RowCells``, DuckDB's fine grids): it sorts
only a window of rows around the target rank, and must draw exactly what the whole grid's runs
draw — the same candidate from the same random bytes, every time, including the (in practice
never seen) proposals outside the window, which are forced here with scripted bytes."""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest

from release.test_quantiles import measurement
from support import SeededSource
from veil.errors import InternalError
from veil.plan import Measurement
from veil.release.quantiles import (
    RowCells,
    Runs,
    _last_threshold,
    _per_class_unimodal,
    choose_quantile,
    choose_quantile_rows,
    quantile_runs,
    row_runs,
    sample_runs,
)


def data(kind: str, n: int, limit: int, rng: np.random.Generator) -> np.ndarray:
    match kind:
        case "uniform":  # mostly distinct cells
            values = rng.integers(0, limit, n)
        case "tied":  # a handful of values, each held by many rows
            values = rng.choice(rng.integers(0, limit, 6), n) if n else np.zeros(0)
        case "narrow":  # a bell much narrower than the grid: wide empty stretches at both ends
            values = np.clip(rng.normal(limit / 3, limit / 200 + 1, n), 0, limit - 1)
        case _:  # lognormal, clipped at the top: a tail of rows on the last cell
            values = np.minimum(rng.lognormal(np.log(limit / 50 + 1), 1.5, n), limit - 1)
    return np.asarray(values, dtype=np.int64)


def class_sizes(runs: Runs, m: Measurement) -> tuple[list[int], int]:
    """Each proposal class's total length as ``sample_runs`` finds it, and the last class."""
    cap = 64 + m.limit.bit_length()
    found = _per_class_unimodal(runs, 1 / (runs.factor * m.scale), cap)
    assert found is not None  # a quantile's runs (windowed or not) are unimodal
    return found[0], cap


QS = [Fraction(0), Fraction(1, 10), Fraction(1, 3), Fraction(1, 2), Fraction(9, 10), Fraction(1)]
EPSILONS = [Fraction(1, 100), Fraction(1, 10), Fraction(1), Fraction(8)]


@pytest.mark.parametrize("kind", ["uniform", "tied", "narrow", "skewed"])
@pytest.mark.parametrize("q", QS, ids=str)
def test_the_window_draws_what_the_whole_grid_draws(kind: str, q: Fraction) -> None:
    rng = np.random.default_rng(abs(hash((kind, str(q)))) % 2**32)
    windowed = 0
    for trial in range(24):
        limit = [1 << 32, 1 << 20, 70_001, 1 << 40][trial % 4]
        n = [0, 1, 2, 50, 3_000, 20_000][trial % 6]
        m = measurement(q, EPSILONS[trial % 4], limit, rows=1 + trial % 3)
        rows = RowCells(data(kind, n, limit, rng))
        window, whole = row_runs(m, rows), quantile_runs(m, *rows.pair)
        windowed += bool(window.far)
        assert int(window.length.sum()) == limit  # the runs tile the grid
        a, b = SeededSource(f"{kind}{q}{trial}"), SeededSource(f"{kind}{q}{trial}")
        got = [sample_runs(window, m.scale, a) for _ in range(25)]
        assert got == [sample_runs(whole, m.scale, b) for _ in range(25)]
        assert a.bytes_drawn == b.bytes_drawn  # and the same number of bytes read
    assert windowed >= 6  # most large groups leave stretches out of the window


def test_a_window_has_the_whole_grids_class_sizes_and_far_fewer_runs() -> None:
    rng = np.random.default_rng(3)
    m = measurement(Fraction(1, 2), Fraction(1), 1 << 32)
    rows = RowCells(data("skewed", 40_000, 1 << 32, rng))
    window, whole = row_runs(m, rows), quantile_runs(m, *rows.pair)
    assert class_sizes(window, m) == class_sizes(whole, m)
    assert window.far == (0, window.start.size - 1)
    assert window.start.size < 1_000 < 40_000 < whole.start.size


def test_every_candidate_outside_the_window_gets_its_exact_distance_of_at_least_t() -> None:
    rng = np.random.default_rng(4)
    for q in (Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(1)):
        m = measurement(q, Fraction(1, 2), 1 << 32, rows=2)
        rows = RowCells(data("uniform", 5_000, 1 << 32, rng))
        window, whole = row_runs(m, rows), quantile_runs(m, *rows.pair)
        threshold = _last_threshold(m.scale, window.factor, m.limit)
        assert window.far
        for run in window.far:
            first, size = int(window.start[run]), int(window.length[run])
            points = {first, first + size - 1, *rng.integers(first, first + size, 100).tolist()}
            points |= {int(c) for c in rows.rows if first <= c < first + size}  # occupied cells
            for p in sorted(points)[:400]:
                at = int(np.searchsorted(whole.start, p, side="right")) - 1
                assert window.distance_of(run, p) == int(whole.distance[at]) >= threshold


def test_a_candidate_inside_the_window_asked_for_as_outside_is_a_bug() -> None:
    rng = np.random.default_rng(7)
    m = measurement(Fraction(1, 2), Fraction(1), 1 << 32)
    rows = RowCells(data("uniform", 5_000, 1 << 32, rng))
    window = row_runs(m, rows)
    assert window.exact is not None
    assert window.far
    middle = int(np.sort(rows.rows)[2_500])  # the target rank's cell: distance 0 < T
    with pytest.raises(InternalError, match="nearer than T"):
        window.exact(middle)


class Scripted:
    """Random bytes that begin with a chosen prefix, then a seeded stream."""

    def __init__(self, prefix: bytes, seed: str) -> None:
        self.prefix, self.rest, self.bytes_drawn = prefix, SeededSource(seed), 0

    def random_bytes(self, n: int) -> bytes:
        self.bytes_drawn += n
        head, self.prefix = self.prefix[:n], self.prefix[n:]
        return head + self.rest.random_bytes(n - len(head))


def last_class_prefix(runs: Runs, m: Measurement, end: str) -> bytes:
    """The first random bytes of a draw from ``runs`` that propose the first (``left``) or
    the last (``right``) candidate of the last class."""
    per_class, cap = class_sizes(runs, m)
    weights = [per_class[j] << (cap - j) for j in range(cap + 1)]
    total = sum(weights)
    u = total - 1 if end == "right" else total - weights[cap]
    return u.to_bytes((total.bit_length() + 7) // 8, "little")


@pytest.mark.parametrize("end", ["left", "right"])
def test_a_proposal_outside_the_window_is_decided_on_its_exact_distance(end: str) -> None:
    """The proposal's first uniform integer is scripted to the first (left) or the last
    (right) candidate of the last class — a stretch the window left out — so the acceptance
    must read that candidate's exact distance; the draws then match the whole grid's."""
    rng = np.random.default_rng(5)
    m = measurement(Fraction(1, 2), Fraction(1), 1 << 32)
    rows = RowCells(data("narrow", 5_000, 1 << 32, rng))
    window, whole = row_runs(m, rows), quantile_runs(m, *rows.pair)
    prefix = last_class_prefix(window, m, end)
    calls: list[int] = []
    exact = window.exact
    assert exact is not None
    spy = Runs(
        window.start, window.length, window.distance, window.factor, unimodal=True,
        far=window.far, exact=lambda c: calls.append(c) or exact(c),
    )  # fmt: skip
    a, b = Scripted(prefix, "forced"), Scripted(prefix, "forced")
    got = [sample_runs(spy, m.scale, a) for _ in range(5)]
    assert calls[0] == ((1 << 32) - 1 if end == "right" else 0)
    assert got == [sample_runs(whole, m.scale, b) for _ in range(5)]
    assert a.bytes_drawn == b.bytes_drawn


def test_choose_quantile_rows_is_choose_quantile_of_the_counted_rows() -> None:
    rng = np.random.default_rng(6)
    m = measurement(Fraction(9, 10), Fraction(1, 2), 1 << 32)
    rows = RowCells(data("skewed", 8_000, 1 << 32, rng))
    a, b = SeededSource("rows"), SeededSource("rows")
    got = [choose_quantile_rows(m, rows, source=a) for _ in range(30)]
    assert got == [choose_quantile(m, *rows.pair, source=b) for _ in range(30)]
    zero = dataclasses.replace(m, sensitivity=Fraction(0))
    before = a.bytes_drawn
    assert choose_quantile_rows(zero, rows, source=a) == 0  # no sensitivity: nothing drawn
    assert a.bytes_drawn == before


def test_row_cells_read_as_the_counted_pair() -> None:
    rows = RowCells(np.array([7, 3, 7, 9, 7], dtype=np.int64))
    cells, counts = rows
    assert (cells.tolist(), counts.tolist()) == ([3, 7, 9], [1, 3, 1])
    assert len(rows) == 2


def test_rows_a_correct_lowering_cannot_return_are_a_bug() -> None:
    m = measurement(Fraction(1, 2), Fraction(1), 1 << 20)
    for bad in ([-1, 3], [3, 1 << 20]):
        with pytest.raises(InternalError, match="inside the grid"):
            row_runs(m, RowCells(np.array(bad, dtype=np.int64)))
    far_only = Runs(
        np.array([0]), np.array([4]), np.array([9]), 1, far=(0,)
    )  # a stand-in without its exact distances
    with pytest.raises(InternalError, match="without its exact distances"):
        far_only.distance_of(0, 2)


def test_a_group_whose_window_holds_every_row_takes_the_whole_grid() -> None:
    """Few rows (or a scale so large that every rank is near the target): nothing lies
    outside the window, so the whole grid's runs are built, as for counted cells."""
    for m, n in ((measurement(Fraction(1, 2), Fraction(1), 1 << 32), 40),
                 (measurement(Fraction(1, 2), Fraction(1, 1000), 101), 3_000)):  # fmt: skip
        rows = RowCells(np.arange(n, dtype=np.int64) % m.limit)
        got, whole = row_runs(m, rows), quantile_runs(m, *rows.pair)
        assert not got.far
        assert pa.array(got.start).equals(pa.array(whole.start))
        assert pa.array(got.distance).equals(pa.array(whole.distance))
