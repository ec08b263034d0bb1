"""Arrow columns to numpy arrays and back without importing pandas.

pyarrow's own conversions (``Array.to_numpy``, ``pa.array``, ``pa.scalar``, a Python value
passed to a kernel) import pandas on their first use — pyarrow asks it whether a value is one
of its own and for its missing-value singletons — which costs a quarter of a small query's
time in a fresh process (the command line's). The engine's exact statistics and group keys
are fixed-width integers and booleans: these functions read and build them from their buffers
instead, with the same values as pyarrow's conversions (pinned by tests against them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

__all__ = ["bools", "int64_array", "integers", "nulls", "text_scalar"]


def _chunks(values: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(values.chunks) if isinstance(values, pa.ChunkedArray) else [values]


def _bits(buffer: pa.Buffer, offset: int, length: int) -> NDArray[np.bool_]:
    """``length`` bits of an Arrow bitmap from bit ``offset`` (least significant bit first)."""
    start, stop = offset // 8, (offset + length + 7) // 8
    octets = np.frombuffer(buffer, dtype=np.uint8)[start:stop]
    skip = offset - 8 * start
    return np.unpackbits(octets, bitorder="little")[skip : skip + length].astype(bool)


def _joined(parts: list[NDArray[Any]], dtype: type) -> NDArray[Any]:
    if not parts:
        return np.zeros(0, dtype=dtype)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def nulls(values: pa.Array | pa.ChunkedArray) -> NDArray[np.bool_]:
    """Per value, whether it is NULL (as ``values.is_null()``), from the validity bitmaps."""
    parts = []
    for chunk in _chunks(values):
        validity = chunk.buffers()[0] if chunk.null_count else None
        if validity is None:
            parts.append(np.zeros(len(chunk), dtype=bool))
        else:
            parts.append(~_bits(validity, chunk.offset, len(chunk)))
    return _joined(parts, np.bool_)


def integers(values: pa.Array | pa.ChunkedArray) -> NDArray[np.int64]:
    """An integer column as an int64 array, a NULL read as 0 (as ``fill_null(0)``).

    Precondition: every value is in int64's range (a uint64 value of 2^63 or more raises
    ``OverflowError``: it has no int64 form)."""
    kind = values.type
    if not pa.types.is_integer(kind):
        raise TypeError(f"integers() reads integer columns, not {kind}")
    code = "i" if pa.types.is_signed_integer(kind) else "u"
    dtype = np.dtype(f"<{code}{kind.bit_width // 8}")
    parts = []
    for chunk in _chunks(values):
        raw = np.frombuffer(chunk.buffers()[1], dtype=dtype)[
            chunk.offset : chunk.offset + len(chunk)
        ]
        if dtype == np.dtype("<u8") and raw.size and int(raw.max()) >= 1 << 63:
            raise OverflowError("an unsigned 64-bit value of 2^63 or more has no int64 form")
        out = raw.astype(np.int64)  # a copy: the caller may write to it
        if chunk.null_count:
            out[~_bits(chunk.buffers()[0], chunk.offset, len(chunk))] = 0
        parts.append(out)
    return _joined(parts, np.int64)


def bools(values: pa.Array | pa.ChunkedArray) -> NDArray[np.bool_]:
    """A boolean column as a bool array, a NULL read as False (as ``fill_null(False)``)."""
    if not pa.types.is_boolean(values.type):
        raise TypeError(f"bools() reads boolean columns, not {values.type}")
    parts = []
    for chunk in _chunks(values):
        truth = _bits(chunk.buffers()[1], chunk.offset, len(chunk))
        if chunk.null_count:
            truth &= _bits(chunk.buffers()[0], chunk.offset, len(chunk))
        parts.append(truth)
    return _joined(parts, np.bool_)


def int64_array(values: NDArray[Any]) -> pa.Array:
    """An int64 numpy array as an Arrow int64 array without NULLs (as ``pa.array``)."""
    data = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), data.size, [None, pa.py_buffer(data)])


def text_scalar(value: str) -> pa.Scalar[Any]:
    """``value`` as an Arrow large string scalar (as ``pa.scalar(value, pa.large_string())``)."""
    data = value.encode()
    offsets = np.array([0, len(data)], dtype=np.int64)
    one = pa.Array.from_buffers(
        pa.large_string(), 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    return one[0]
