"""A small result of a statement DuckDB ran, read as Python rows into the Arrow schema its first
run gave, instead of DuckDB's Arrow read (a second statement over the result's rows).

Only a statement whose every column DuckDB's Python values fill exactly qualifies
(:func:`readable`): integers up to HUGEINT, DECIMAL(p, 0), VARCHAR, BOOLEAN and DOUBLE; any
other type (lists, dates and times, scaled decimals, blobs, UHUGEINT, …) and every result of
``SMALL`` rows or more is read by DuckDB's Arrow read, the rows already fetched converted to
the schema it returned. A HUGEINT past 38 digits is written as DuckDB's Arrow read writes it,
its 128 bits in a ``decimal128(38, 0)``, so no value fails here that reads there.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

__all__ = ["SMALL", "fetched", "readable"]

SMALL = 1024  # rows read as Python values at most; a larger result is read as Arrow

_INTEGERS = frozenset(
    ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT",
     "UTINYINT", "USMALLINT", "UINTEGER", "UBIGINT")
)  # fmt: skip
_PLAIN = frozenset(("VARCHAR", "BOOLEAN", "DOUBLE"))
_DIGITS = 10**38  # a decimal128(38, 0) holds |v| < 10^38 as pyarrow converts a value
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def readable(types: Sequence[object], schema: pa.Schema) -> pa.Schema | None:
    """``schema`` (the Arrow schema of a result whose DuckDB column types are ``types``) when
    every column qualifies for :func:`fetched`, else None."""
    if len(types) != len(schema):
        return None
    for kind in types:
        name = str(kind)
        if name in _INTEGERS or name in _PLAIN:
            continue
        if name.startswith("DECIMAL(") and name.endswith(",0)"):
            continue
        return None
    return schema


def fetched(
    con: duckdb.DuckDBPyConnection, schema: pa.Schema, arrow: Callable[[], pa.Table]
) -> pa.Table:
    """The rows of the result ``con`` holds open, as an Arrow table of ``schema`` (the schema
    :func:`readable` kept for the same statement in the same catalog state): at most ``SMALL``
    rows as Python values; past that, the rest by ``arrow()`` (DuckDB's Arrow read of what is
    left), the first rows converted to its schema."""
    rows = con.fetchmany(SMALL)
    if len(rows) < SMALL:
        return _table(rows, schema)
    rest = arrow()
    return pa.concat_tables([_table(rows, rest.schema), rest])


def _table(rows: list[tuple[Any, ...]], schema: pa.Schema) -> pa.Table:
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    arrays = [_array(c, f.type) for c, f in zip(columns, schema, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)


def _array(values: Sequence[Any], kind: pa.DataType) -> pa.Array:
    # Python ints that all fit in 64 bits (a HUGEINT sum, most often): each decimal's 128
    # bits written from an int64 array (low word, then the sign extended) — pyarrow makes a
    # decimal from each int ten times slower; 19 digits hold every int64
    if (
        pa.types.is_decimal128(kind)
        and kind.scale == 0
        and kind.precision >= 19
        and all(type(v) is int and _INT64_MIN <= v <= _INT64_MAX for v in values if v is not None)
    ):
        return _decimals(values, kind)
    if pa.types.is_decimal128(kind) and any(
        v is not None and not -_DIGITS < v < _DIGITS for v in values
    ):  # a HUGEINT past 38 digits: its two's-complement bits, as DuckDB's Arrow read
        data = b"".join((0 if v is None else int(v)).to_bytes(16, "little", signed=True)
                        for v in values)  # fmt: skip
        nulls = sum(v is None for v in values)
        valid = pa.array([v is not None for v in values]).buffers()[1] if nulls else None
        return pa.Array.from_buffers(kind, len(values), [valid, pa.py_buffer(data)], nulls)
    return pa.array(values, type=kind)


def _decimals(values: Sequence[int | None], kind: pa.DataType) -> pa.Array:
    """A ``decimal128(p, 0)`` array (p ≥ 19) of ints within int64, NULL for None: each value's
    16 little-endian bytes are its two's complement, the int64 then its sign word."""
    nulls = sum(v is None for v in values)
    low = np.array([0 if v is None else v for v in values] if nulls else values, dtype=np.int64)
    words = np.empty((low.size, 2), dtype="<i8")  # Arrow's decimals are little-endian
    words[:, 0] = low
    words[:, 1] = low >> 63
    valid = pa.array([v is not None for v in values]).buffers()[1] if nulls else None
    return pa.Array.from_buffers(kind, low.size, [valid, pa.py_buffer(words)], nulls)
