"""One quantile's draws for many listed groups at once (``choose_quantiles``): the windows and
proposal classes of every group are found together, and each group must still draw exactly
what ``choose_quantile_rows`` draws for it alone — the same candidate from the same random
bytes, group after group, including the proposals outside a window (forced here with scripted
bytes), groups given as counted cells between listed ones, and the fallbacks."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import veil
import veil.release.quantile_groups as groups_module
from release.test_quantile_window import (
    EPSILONS,
    QS,
    Scripted,
    class_sizes,
    data,
    last_class_prefix,
)
from release.test_quantiles import measurement
from support import SeededSource
from veil.errors import InternalError
from veil.plan import Measurement
from veil.random import ReadAhead, SystemSource
from veil.release.quantile_groups import _Batch, choose_quantiles
from veil.release.quantiles import (
    Cells,
    RowCells,
    choose_quantile,
    choose_quantile_rows,
    quantile_runs,
)


def one_by_one(m: Measurement, groups: list[Cells], source: Any) -> list[int]:
    """What the draws were before: each group on its own, in order."""
    return [
        choose_quantile_rows(m, g, source=source)
        if isinstance(g, RowCells)
        else choose_quantile(m, *g, source=source)
        for g in groups
    ]


def batch(m: Measurement, groups: list[RowCells]) -> _Batch:
    found = _Batch.of(m, groups)
    assert found is not None
    return found


@pytest.mark.parametrize("kind", ["uniform", "tied", "narrow", "skewed"])
@pytest.mark.parametrize("q", QS, ids=str)
def test_every_group_draws_what_it_draws_alone(kind: str, q: Fraction) -> None:
    rng = np.random.default_rng(abs(hash((kind, str(q), "groups"))) % 2**32)
    for trial in range(8):
        limit = [1 << 32, 1 << 20, 70_001, 1 << 40][trial % 4]
        m = measurement(q, EPSILONS[trial % 4], limit, rows=1 + trial % 3)
        sizes = rng.choice([1, 2, 50, 3_000, 20_000], size=int(rng.integers(4, 12)))
        groups: list[Cells] = [RowCells(data(kind, int(n), limit, rng)) for n in sizes]
        groups.insert(1, ((), ()))  # a released group without a row, between listed ones
        groups.insert(3, RowCells(data(kind, 40, limit, rng)).pair)  # counted cells
        a, b = SeededSource(f"{kind}{q}{trial}"), SeededSource(f"{kind}{q}{trial}")
        for _ in range(3):
            assert choose_quantiles(m, groups, source=a) == one_by_one(m, groups, b)
            assert a.bytes_drawn == b.bytes_drawn  # and the same bytes read, group by group


@pytest.mark.parametrize("q", [Fraction(0), Fraction(1, 2), Fraction(1)], ids=str)
def test_32_bit_cells_draw_what_64_bit_ones_draw(q: Fraction) -> None:
    """DuckDB lists a grid of at most 2^32 cells as uint32: the same groups' cells as int64
    give the same candidates from the same bytes, batched or one by one, the grid's last
    cell (2^32 − 1) included."""
    rng = np.random.default_rng(12)
    m = measurement(q, Fraction(1, 2), 1 << 32, rows=2)
    wide = [data(kind, n, 1 << 32, rng) for kind, n in
            (("skewed", 20_000), ("narrow", 9_000), ("tied", 3_000), ("uniform", 40))]  # fmt: skip
    wide[0][:50] = (1 << 32) - 1  # rows at the upper bound: the last cell
    narrow: list[Cells] = [RowCells(w.astype(np.uint32)) for w in wide]
    sixty_four: list[Cells] = [RowCells(w) for w in wide]
    a, b, c = SeededSource("32"), SeededSource("32"), SeededSource("32")
    for _ in range(3):
        got = choose_quantiles(m, narrow, source=a)
        assert got == choose_quantiles(m, sixty_four, source=b) == one_by_one(m, narrow, c)
        assert a.bytes_drawn == b.bytes_drawn == c.bytes_drawn


def test_each_groups_classes_are_its_whole_grids() -> None:
    rng = np.random.default_rng(11)
    for q in (Fraction(0), Fraction(1, 2), Fraction(9, 10), Fraction(1)):
        m = measurement(q, Fraction(1), 1 << 32, rows=2)
        shapes = (("skewed", 40_000), ("narrow", 5_000), ("tied", 3_000), ("uniform", 7))
        rows = [RowCells(data(kind, n, 1 << 32, rng)) for kind, n in shapes]
        found = batch(m, rows)
        for g, r in enumerate(rows):
            sizes, cap = class_sizes(quantile_runs(m, *r.pair), m)
            held = [j for j, size in enumerate(sizes) if size]
            assert found.classes(g) == (held, [sizes[j] for j in held])
            assert found.cap == cap == len(sizes) - 1
            lo, hi = found.first[g], found.first[g + 1]
            assert int(found.length[lo:hi].sum()) == m.limit  # each group's runs tile the grid
        if 0 < q < 1:  # a large group's window leaves both ends out (MIN's holds the start)
            assert (found.far_left[0], found.far_right[0]) == (True, True)
        assert (found.far_left[3], found.far_right[3]) == (False, False)  # 7 rows: whole grid


@pytest.mark.parametrize("end", ["left", "right"])
def test_a_proposal_outside_a_window_is_decided_on_its_exact_distance(
    end: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first group's first proposal is scripted to the first (left) or the last (right)
    candidate of its last class — a stretch its window left out — so the acceptance reads
    that candidate's exact distance from the group's rows; every draw matches one by one."""
    rng = np.random.default_rng(5)
    m = measurement(Fraction(1, 2), Fraction(1), 1 << 32)
    rows = [RowCells(data("narrow", 5_000, 1 << 32, rng)) for _ in range(5)]
    prefix = last_class_prefix(quantile_runs(m, *rows[0].pair), m, end)
    asked: list[int] = []
    exact = groups_module.far_distance

    def spy(rows: Any, factor: int, target: int, threshold: int, at: int) -> int:
        asked.append(at)
        return exact(rows, factor, target, threshold, at)

    monkeypatch.setattr(groups_module, "far_distance", spy)
    a, b = Scripted(prefix, "forced"), Scripted(prefix, "forced")
    got = choose_quantiles(m, list(rows), source=a)
    assert asked[0] == ((1 << 32) - 1 if end == "right" else 0)
    assert got == one_by_one(m, list(rows), b)
    assert a.bytes_drawn == b.bytes_drawn


def test_a_cell_outside_the_grid_is_a_bug_found_before_any_draw() -> None:
    m = measurement(Fraction(1, 2), Fraction(1), 1 << 20)
    good = [RowCells(np.arange(3_000, dtype=np.int64)) for _ in range(4)]
    for bad in ([-1, 3], [3, 1 << 20]):
        source = SeededSource("bad")
        groups: list[Cells] = [*good, RowCells(np.array(bad, dtype=np.int64))]
        with pytest.raises(InternalError, match="inside the grid"):
            choose_quantiles(m, groups, source=source)
        assert source.bytes_drawn == 0


@pytest.mark.parametrize("limit", [1 << 20, 70_001])  # (70,001: a last coarse bin past the grid)
@pytest.mark.parametrize("bad", [-1, "limit", "bin"])
def test_a_large_groups_cell_outside_the_grid_is_found_by_its_histogram(
    limit: int, bad: object
) -> None:
    """A group too large to sort whole is checked by its coarse histogram (a negative cell,
    a bin past the grid's) and, where the last bin reaches past the grid, its maximum."""
    m = measurement(Fraction(1, 2), Fraction(1), limit)
    rng = np.random.default_rng(9)
    rows = [RowCells(rng.integers(0, limit, 20_000)) for _ in range(5)]
    value = {"limit": limit, "bin": 1 << limit.bit_length()}.get(str(bad), -1)
    broken = rows[2].rows.copy()
    broken[7_777] = value
    rows[2] = RowCells(broken)
    source = SeededSource("bad")
    with pytest.raises(InternalError, match="inside the grid"):
        choose_quantiles(m, list(rows), source=source)
    assert source.bytes_drawn == 0


def test_no_sensitivity_draws_nothing_and_few_groups_are_drawn_alone() -> None:
    rng = np.random.default_rng(8)
    m = measurement(Fraction(1, 2), Fraction(1, 2), 1 << 32)
    rows: list[Cells] = [RowCells(data("skewed", 4_000, 1 << 32, rng)) for _ in range(6)]
    zero = dataclasses.replace(m, sensitivity=Fraction(0))
    source = SeededSource("zero")
    assert choose_quantiles(zero, rows, source=source) == [0] * 6
    assert source.bytes_drawn == 0
    for few in (rows[:1], rows[:3]):  # below the batch's size: one by one, the same draws
        a, b = SeededSource("few"), SeededSource("few")
        assert choose_quantiles(m, few, source=a) == one_by_one(m, few, b)


def test_ranks_that_could_leave_int64_fall_back_to_one_by_one() -> None:
    """A group so large that F·(n + 1) reaches 2^62 is not batched (its ranks are Python
    integers, as in ``row_runs``); an empty listed group is not either."""
    m = measurement(Fraction(1, 1 << 40), Fraction(1), 1 << 20)  # F = 2^40
    huge = RowCells(np.broadcast_to(np.int64(7), (1 << 22,)))  # a view: no memory per row
    small = [RowCells(np.arange(100, dtype=np.int64)) for _ in range(4)]
    assert _Batch.of(m, [*small, huge]) is None
    assert _Batch.of(m, [*small, RowCells(np.zeros(0, dtype=np.int64))]) is None
    assert _Batch.of(m, small) is not None


def test_read_ahead_bytes_draw_what_the_source_draws() -> None:
    """The draws read their bytes through ``ReadAhead`` (the system source, in a release):
    the same candidates as from the source itself, chunk ends falling inside draws."""
    rng = np.random.default_rng(21)
    m = measurement(Fraction(1, 2), Fraction(1, 3), 1 << 32)
    groups: list[Cells] = [RowCells(data("skewed", int(n), 1 << 32, rng))
                           for n in rng.integers(1, 400, 300)]  # fmt: skip
    direct = choose_quantiles(m, groups, source=SeededSource("ahead"))
    assert choose_quantiles(m, groups, source=ReadAhead(SeededSource("ahead"))) == direct


class _CountingSystem(SystemSource):
    """The operating system's source, counting the calls made to it."""

    def __init__(self) -> None:
        self.calls = 0

    def random_bytes(self, n: int) -> bytes:
        self.calls += 1
        return super().random_bytes(n)


def test_a_release_reads_the_system_source_a_chunk_at_a_time() -> None:
    """300 groups' medians in a real session: the quantile draws (two or more reads each)
    come from a few chunks of the system source, not a system call per read."""
    groups = 300
    table = pa.table({
        "uid": np.arange(3 * groups),
        "g": np.repeat(np.arange(groups), 3),
        "x": np.arange(3 * groups, dtype=np.float64) % 97,
    })  # fmt: skip
    session = veil.Session.local(
        tables={"t": table}, privacy_unit="uid", budget=veil.Budget(epsilon=10)
    )
    source = _CountingSystem()
    result = session.sql(
        "SELECT g, MEDIAN(x) AS m FROM t GROUP BY g",
        epsilon=1,
        bounds={"x": (0, 100)},
        domains={"g": list(range(groups))},
        source=source,
    )
    assert len(result.rows) == groups
    assert all(0 <= row[1] <= 100 for row in result.rows)
    assert source.calls < 20  # was more than 2 × 300


@pytest.mark.parametrize("q", [Fraction(0), Fraction(1, 3), Fraction(1)], ids=str)
def test_the_targets_of_many_groups_are_each_groups_target(q: Fraction) -> None:
    """MIN and MAX aim at 2·min(k, n/2) from their end, k computed once for every group."""
    from veil.release.quantiles import _target, _targets

    m = measurement(q, Fraction(1, 7), 1 << 32)
    sizes = [1, 2, 3, 7, 40, 41, 1_000, 123_456, 10**9]
    assert _targets(m, sizes) == [_target(m, n) for n in sizes]
