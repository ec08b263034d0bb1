"""Pandas-free Arrow ↔ numpy conversions give pyarrow's own values (``veil.release.arrays``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from veil.release.arrays import bools, int64_array, integers, nulls, text_scalar

INTEGER_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint32()]


def _chunked(values: list[object], kind: pa.DataType) -> pa.ChunkedArray:
    """``values`` in three chunks, each a slice at an odd offset of a larger array, so that
    offsets that are not a multiple of 8 (bitmaps) nor 0 (values) are read."""
    parts = []
    step = max(1, len(values) // 3 + 1)
    for start in range(0, len(values), step):
        part = values[start : start + step]
        padded = pa.array([None] * 3 + part + [None] * 2, type=kind)
        parts.append(padded.slice(3, len(part)))
    return pa.chunked_array(parts, type=kind)


@pytest.mark.parametrize("kind", INTEGER_TYPES, ids=str)
def test_integers_reads_each_width_as_fill_null_zero_does(kind: pa.DataType) -> None:
    rng = np.random.default_rng(7)
    info = np.iinfo(kind.to_pandas_dtype())
    raw = rng.integers(info.min, int(info.max) + 1, 41, dtype=np.int64).tolist()
    values = [None if i % 5 == 2 else v for i, v in enumerate(raw)]
    column = _chunked(values, kind)
    expected = np.asarray(column.fill_null(0).to_numpy(), dtype=np.int64)
    got = integers(column)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(nulls(column), column.is_null().to_numpy(zero_copy_only=False))
    single = column.chunk(1)
    np.testing.assert_array_equal(integers(single), single.fill_null(0).to_numpy())


def test_integers_refuses_unsigned_values_beyond_int64() -> None:
    column = pa.array([1, 2**63], type=pa.uint64())
    with pytest.raises(OverflowError, match="no int64 form"):
        integers(column)
    np.testing.assert_array_equal(integers(column.slice(0, 1)), [1])


def test_integers_refuses_a_column_that_is_not_integer() -> None:
    with pytest.raises(TypeError, match="integer columns, not double"):
        integers(pa.array([1.5]))


def test_bools_read_as_fill_null_false_does() -> None:
    values = [True, None, False, True, True, None, False, True, False, True, True, None] * 3
    column = _chunked(values, pa.bool_())
    expected = column.fill_null(False).to_numpy(zero_copy_only=False)
    np.testing.assert_array_equal(bools(column), expected)
    np.testing.assert_array_equal(nulls(column), column.is_null().to_numpy(zero_copy_only=False))
    with pytest.raises(TypeError, match="boolean columns, not int64"):
        bools(pa.array([1]))


def test_an_empty_column_gives_an_empty_array() -> None:
    empty = pa.chunked_array([], type=pa.int64())
    assert integers(empty).shape == (0,)
    assert integers(empty).dtype == np.int64
    assert nulls(empty).shape == (0,)
    assert bools(pa.chunked_array([], type=pa.bool_())).shape == (0,)


def test_int64_array_equals_pa_array() -> None:
    order = np.array([3, -1, 2**62, 0], dtype=np.int64)
    assert int64_array(order).equals(pa.array(order))
    strided = np.arange(10, dtype=np.int64)[::3]
    assert int64_array(strided).equals(pa.array(strided))
    assert int64_array(np.zeros(0, dtype=np.int64)).equals(pa.array([], type=pa.int64()))


@pytest.mark.parametrize("text", ["", "'", "(", ", ", "None", "é∑ 😀"])
def test_text_scalar_equals_pa_scalar(text: str) -> None:
    made = text_scalar(text)
    assert made.equals(pa.scalar(text, pa.large_string()))
    assert made.as_py() == text
