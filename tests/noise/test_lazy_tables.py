"""A small batch at a new scale builds no table: its entries are computed as needed
(``samplers._LazyInverter``, ``_LowBins.below_least``). These tests pin that path to the
tables' own: the same entries, and the same values from the same bytes, word by word and draw
by draw, against the full-table inverters and a reference of the sampler as it drew before.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from support import SeededSource
from veil import mechanisms as mech
from veil.noise import samplers
from veil.noise._exact import draw_u32

# direct geometric tables (scale < 16) and the split's high parts (scale in [16, 32))
GEOMETRIC = [
    Fraction(3),
    Fraction(1, 3),
    Fraction(7, 2),
    Fraction(15),
    Fraction(16),
    Fraction(33, 2),
    Fraction(31),
    Fraction(10**6 + 3, 10**5),
    Fraction(2**40 + 1, 2**36),
]
# discrete Laplace magnitudes with a direct table (scale ≤ 16), tails reaching (0, 1) early
LAPLACE = [Fraction(1, 7), Fraction(1, 2), Fraction(2), Fraction(5, 3), Fraction(10), Fraction(16)]


def _lazy(kind: str, scale: Fraction) -> tuple[samplers._LazyInverter, samplers._Inverter]:
    x = 1 / scale
    size = samplers._table_size(x, 1) or 256  # (the split's high parts: scales in [16, 32))
    if kind == "geometric":
        return samplers._lazy_geometric(x, size), samplers._geometric_direct(x, size)
    return samplers._lazy_laplace(x, size), samplers._laplace_magnitude(x, size)


CASES = [("geometric", s) for s in GEOMETRIC] + [("laplace", s) for s in LAPLACE]


@pytest.mark.parametrize(("kind", "scale"), CASES, ids=str)
def test_lazy_entries_are_the_table_entry_by_entry(kind: str, scale: Fraction) -> None:
    lazy, table = _lazy(kind, scale)
    made = lazy._entries  # straight from the powers, without the table to fall back on
    decided = 0
    for k in range(table.size + 1):
        entry = made(k)
        if entry is not None:
            decided += 1
            assert entry == (int(table.lo[k]), int(table.hi[k])), k
        assert lazy.entry(k) == (int(table.lo[k]), int(table.hi[k])), k
    assert decided >= 0.9 * (table.size + 1)  # (an undecided one is read from the table)


def _boundary_words(table: samplers._Inverter, bits: int) -> list[int]:
    """Words at and beside every entry of the table, and words past its end."""
    words = {0, (1 << bits) - 1}
    for k in range(table.size + 1):
        for e in (int(table.lo[k]), int(table.hi[k])):
            words.update(w for w in (e - 2, e - 1, e, e + 1) if 0 <= w < 1 << bits)
    return sorted(words)


@pytest.mark.parametrize(("kind", "scale"), CASES, ids=str)
def test_lazy_inversion_gives_the_tables_values_and_draws_its_bytes(
    kind: str, scale: Fraction
) -> None:
    lazy, table = _lazy(kind, scale)
    bits = 32 if kind == "geometric" else 31
    words = _boundary_words(table, bits)
    rng = np.random.default_rng(5)  # words to invert, not noise: any spread will do
    words += rng.integers(0, 1 << bits, 400).tolist()
    for i, w in enumerate(words):
        by_lazy, by_table = SeededSource(f"w{i}"), SeededSource(f"w{i}")
        v = np.array([w], dtype=np.int64)
        got, want = lazy.invert(v, by_lazy), table.invert(v, by_table)
        assert got.tolist() == want.tolist(), w
        assert by_lazy.bytes_drawn == by_table.bytes_drawn, w
    for n in (2, 5, 8, 9, 40):  # a few words at once, and more than the lazy path takes
        by_lazy, by_table = SeededSource(f"n{n}"), SeededSource(f"n{n}")
        for _ in range(20):
            v = draw_u32(by_lazy, n).astype(np.int64) >> (32 - bits)
            u = draw_u32(by_table, n).astype(np.int64) >> (32 - bits)
            assert np.array_equal(lazy.invert(v, by_lazy), table.invert(u, by_table))
        assert by_lazy.bytes_drawn == by_table.bytes_drawn


def _reference_geometric(x: Fraction, n: int, source: SeededSource) -> np.ndarray:
    """``samplers._geometric`` for a small batch as it drew with whole tables: a direct
    table's inversion, or the split with the low part's table and the high part's table."""
    size = samplers._table_size(x, 1)
    if size is not None:
        return samplers._geometric_direct(x, size).invert(draw_u32(source, n), source)
    m, xq = samplers._split(x, 16)
    low = samplers._low_part(x, m, n, source, samplers._low_part_table(x, m, 8))
    high = samplers._geometric_direct(xq, samplers._table_size(xq, 1) or 256)
    q = high.invert(draw_u32(source, n).astype(np.int64), source)
    return low + (q << m)


@pytest.mark.parametrize(
    "scale",
    [Fraction(5), Fraction(40), Fraction(1000, 3), Fraction(2**30 + 7, 3), Fraction(10**12)],
    ids=str,
)
def test_small_geometric_batches_draw_what_whole_tables_drew(scale: Fraction) -> None:
    x = 1 / scale
    for n in (1, 3, 8, 30):
        by_lazy, by_table = SeededSource(f"g{scale}{n}"), SeededSource(f"g{scale}{n}")
        for _ in range(60):
            want = _reference_geometric(x, n, by_table)
            assert np.array_equal(samplers._geometric(x, n, by_lazy), want)
        assert by_lazy.bytes_drawn == by_table.bytes_drawn


def test_the_least_bound_is_below_every_split_low_parts_least_bracket() -> None:
    rng = np.random.default_rng(11)  # scales to try, not noise
    checked = 0
    for _ in range(300):
        scale = Fraction(int(rng.integers(1, 10**9)), int(rng.integers(1, 1000))) + 17
        x = 1 / scale
        if samplers._table_size(x, 1) is not None:
            continue
        m, _ = samplers._split(x, 16)
        bins = samplers._LowBins(x, m, 8)
        assert 0 < bins.below_least <= bins.least
        checked += 1
    assert checked > 200
    edge = samplers._LowBins(Fraction(1, 2**10), 6, 8)  # x·2^m = 1/16: the bound is tight
    assert edge.least - 2 <= edge.below_least <= edge.least
    tilted = samplers._LowBins(Fraction(1, 2**10), 12, 8)  # x·2^m = 4: no such bound
    assert tilted.below_least == 0


@pytest.mark.parametrize("mechanism", ["laplace", "discrete_laplace"])
def test_scalar_releases_at_new_epsilons_repeat_at_the_same_epsilon(mechanism: str) -> None:
    # the plan made at a new ε (entries computed as needed) and the plan remembered for it
    # (entries then held) draw the same values from the same bytes
    for i in range(60):
        eps = Fraction(1, 2) + Fraction(i, 997)
        value = 3 if mechanism == "discrete_laplace" else 3.7
        first = getattr(mech, mechanism)(value, sensitivity=1, epsilon=eps, source=SeededSource(i))
        again = getattr(mech, mechanism)(value, sensitivity=1, epsilon=eps, source=SeededSource(i))
        assert first.value == again.value


@pytest.mark.parametrize(("kind", "scale"), CASES, ids=str)
def test_the_screens_estimates_lie_within_two_of_every_entry(kind: str, scale: Fraction) -> None:
    lazy, table = _lazy(kind, scale)
    survival = lazy._survival
    assert survival is not None
    for k in range(table.size + 1):
        estimate = survival(k)
        assert int(table.lo[k]) >= estimate * (1 - 2.0**-30) - 2, k
        assert int(table.hi[k]) <= estimate * (1 + 2.0**-30) + 2, k
    rng = np.random.default_rng(9)  # words, not noise
    bits = 32 if kind == "geometric" else 31
    screened = 0
    for word in rng.integers(0, 1 << bits, 2000).tolist():
        m = min(int((lazy._c - math.log(word + 0.5)) * lazy._inv_x), table.size - 1)
        if lazy._screened(word, max(m, 0)):
            screened += 1
            assert int(table.lo[max(m, 0)]) > word >= int(table.hi[max(m, 0) + 1])
    assert screened >= 1990  # all but the words next to an entry (or past the table)
