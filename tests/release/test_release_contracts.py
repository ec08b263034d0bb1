"""Contracts of the release's small pieces that a query rarely reaches: the columnar
measurement's invariants (one value per group, immutable, equality by its JSON form), the lazy
rows, the refusals of the exact samplers' preconditions, the quantile helpers for tests and
audits, and how a key that was not UTF-8 is printed.

Each check is of behaviour a caller can see: an internal inconsistency is an InternalError
(never a silently wrong release), a wrong-shaped cached entry is a cache miss, and the audit
helpers give the same scores from a dense vector as from its occupied cells.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest

from release.test_modes import measurement as mode_measurement
from release.test_quantiles import brute_scores
from release.test_quantiles import measurement as quantile_measurement
from support import SeededSource
from veil.errors import InternalError
from veil.release.keys import _printable
from veil.release.measured import Measured
from veil.release.modes import choose_mode, choose_top, mode_weights
from veil.release.quantiles import _rows, cells_of, choose_quantile, quantile_scores
from veil.release.result import Columns

# ── the columnar measurement ──────────────────────────────────────────────────────────────────


def test_a_measurement_column_not_one_value_per_group_is_an_internal_error() -> None:
    with pytest.raises(InternalError, match="one value per group"):
        Measured.of_columns(3, [[1, 2, 3]], {"count": np.array([5, 6], dtype=np.int64)})
    with pytest.raises(InternalError, match="one value per group"):
        Measured.of_columns(2, [[1, 2, 3]], {"count": np.array([5, 6], dtype=np.int64)})


def test_groups_without_statistics_are_empty_dicts_one_per_group() -> None:
    m = Measured.of_columns(3, [["a", "b", "c"]], {})
    assert m.groups == ((("a",), {}), (("b",), {}), (("c",), {}))
    assert Measured.from_json(m.to_json()) == m


def test_groups_lacking_a_statistic_omit_it_and_the_json_keeps_the_gap() -> None:
    m = Measured.of_columns(2, [[0, 1]], {"count": [4, 7], "quantile": [None, 3]})
    assert m.groups == (((0,), {"count": 4}), ((1,), {"count": 7, "quantile": 3}))
    back = Measured.from_json(m.to_json())
    assert back is not None
    assert back.groups == m.groups


def test_a_measurement_is_immutable() -> None:
    m = Measured([((1,), {"count": 3})])
    with pytest.raises(AttributeError, match="immutable"):
        m._size = 5
    with pytest.raises(AttributeError, match="immutable"):
        m.extra = 1  # type: ignore[attr-defined]
    assert m.size == 1
    assert m.groups == (((1,), {"count": 3}),)


def test_equality_is_by_json_form_and_never_with_another_type() -> None:
    by_group = Measured([((1,), {"count": 3}), ((2,), {"count": -1})], private=False)
    by_column = Measured.of_columns(
        2, [np.array([1, 2], dtype=np.int64)], {"count": np.array([3, -1])}, private=False
    )
    assert by_group == by_column
    assert by_group != Measured([((1,), {"count": 3}), ((2,), {"count": 0})], private=False)
    assert by_group != Measured(list(by_group.groups), private=True)  # privacy is part of it
    assert by_group != by_group.to_json()  # a dict is not a measurement
    assert by_group.__eq__(1) is NotImplemented
    with pytest.raises(TypeError):
        hash(by_group)


def test_repr_shows_the_groups_and_whether_the_noise_was_private() -> None:
    m = Measured.of_columns(1, [["x"]], {"count": [2]}, private=False)
    assert repr(m) == "Measured(((('x',), {'count': 2}),), private=False)"


def test_a_cached_entry_of_another_form_or_shape_is_a_miss() -> None:
    good = Measured.of_columns(2, [[1, 2]], {"count": [3, 4]}).to_json()
    assert Measured.from_json(good) is not None
    assert Measured.from_json({**good, "veil_measured": 1}) is None
    assert Measured.from_json({**good, "rows": 3}) is None
    assert Measured.from_json({**good, "stats": {"count": [3]}}) is None
    huge = {**good, "stats": {"count": [1 << 70, None]}}  # beyond int64: Python ints kept
    back = Measured.from_json(huge)
    assert back is not None
    assert back.groups[0][1] == {"count": 1 << 70}
    assert back.groups[1][1] == {}


# ── lazy rows ─────────────────────────────────────────────────────────────────────────────────


def test_columns_build_rows_lazily_and_compare_as_tuples() -> None:
    c = Columns([[1, 2], ["a", "b"]], 2)
    assert c == ((1, "a"), (2, "b"))
    assert c == Columns([[1, 2], ["a", "b"]], 2)
    assert c != Columns([[1, 3], ["a", "b"]], 2)
    assert c.__eq__([(1, "a"), (2, "b")]) is NotImplemented  # a list is not rows
    assert hash(c) == hash(((1, "a"), (2, "b")))
    assert c[1] == (2, "b")
    assert c[:1] == ((1, "a"),)
    assert len(c) == 2
    assert Columns([], 3) == ((), (), ())
    with pytest.raises(ValueError, match="one value per row"):
        Columns([[1, 2], ["a"]], 2)


# ── the samplers' preconditions ───────────────────────────────────────────────────────────────


def test_mode_helpers_refuse_a_measurement_that_is_not_a_mode() -> None:
    q = quantile_measurement(Fraction(1, 2), Fraction(1), 8)
    with pytest.raises(InternalError, match="not a mode measurement"):
        choose_top(q, [1], [2], source=SeededSource("t"))
    with pytest.raises(InternalError, match="not a mode measurement"):
        mode_weights(q, [0] * 8)


def test_mode_weights_need_one_count_per_candidate() -> None:
    m = mode_measurement(Fraction(1), 4)
    with pytest.raises(InternalError, match="one count per candidate"):
        mode_weights(m, [1, 2, 3])
    weights = mode_weights(m, [0, 0, 5, 0])
    assert len(weights) == 4
    assert max(weights) == weights[2]


def test_top_picks_never_exceed_the_candidates() -> None:
    m = dataclasses.replace(mode_measurement(Fraction(1), 3), picks=4)
    with pytest.raises(InternalError, match="more picks than candidates"):
        choose_top(m, [0, 1], [3, 1], source=SeededSource("t"))


def test_zero_sensitivity_selects_without_drawing() -> None:
    """A measurement no row can move (Δ = 0) picks the first candidate(s) and draws nothing:
    the source is never read."""

    class Untouchable(SeededSource):
        def random_bytes(self, n: int) -> bytes:  # pragma: no cover - a failure path
            raise AssertionError("a zero-sensitivity selection read randomness")

    src = Untouchable("z")
    mode = dataclasses.replace(mode_measurement(Fraction(1), 5), sensitivity=Fraction(0))
    assert choose_mode(mode, [3], [9], source=src) == 0
    top = dataclasses.replace(mode, picks=3)
    # the first three candidates left, in order, encoded as Σ j_r · size^r
    assert choose_top(top, [3, 4], [9, 8], source=src) == 0 + 1 * 5 + 2 * 5**2
    quantile = dataclasses.replace(
        quantile_measurement(Fraction(1, 2), Fraction(1), 6), sensitivity=Fraction(0)
    )
    assert choose_quantile(quantile, [4], [10], source=src) == 0


# ── quantile helpers for tests and audits ─────────────────────────────────────────────────────


def test_quantile_scores_agree_from_a_mapping_a_pair_and_a_dense_vector() -> None:
    m = quantile_measurement(Fraction(1, 3), Fraction(1), 9)
    values = [1, 1, 2, 5, 5, 5, 8]
    dense = [values.count(j) for j in range(9)]
    cells, counts = cells_of(dense)
    assert cells == [1, 2, 5, 8]
    assert counts == [2, 1, 3, 1]
    from_pair = quantile_scores(m, (cells, counts))
    from_mapping = quantile_scores(m, dict(zip(cells, counts, strict=True)))
    assert from_pair == from_mapping == brute_scores(m, values)


def test_quantile_scores_refuse_a_grid_too_large_to_list() -> None:
    m = quantile_measurement(Fraction(1, 2), Fraction(1), (1 << 20) + 1)
    with pytest.raises(InternalError, match="lists every candidate"):
        quantile_scores(m, {0: 1})


def test_rows_of_a_grouping_set_slice_filter_or_empty() -> None:
    table = pa.table({"a": [1, 2, 3, 4, 5]})
    none = pa.chunked_array([[False] * 5])
    assert _rows(table, none).num_rows == 0
    together = pa.chunked_array([[False, True, True, False, False]])
    assert _rows(table, together).column("a").to_pylist() == [2, 3]
    apart = pa.chunked_array([[True, False, False, True, False]])
    assert _rows(table, apart).column("a").to_pylist() == [1, 4]


# ── keys that were not UTF-8 ──────────────────────────────────────────────────────────────────


def test_a_key_decoded_with_surrogates_prints_its_bytes_escaped() -> None:
    raw = b"caf\xe9"  # Latin-1 bytes read as text with surrogateescape
    text = raw.decode("utf-8", "surrogateescape")
    assert _printable(text) == "caf\\xe9"
    assert _printable("café") == "café"
    assert _printable("plain") == "plain"
