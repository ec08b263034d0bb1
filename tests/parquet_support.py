"""Parquet files as writers that do not validate write them (import as ``parquet_support``).

pyarrow checks what it writes; Spark, Hive and Java writers do not, and a person's file can be
written by anything. These helpers write what such writers can:

* :func:`unchecked_strings` — a STRING column holding bytes that are not UTF-8 (a binary array
  viewed as strings: pyarrow writes it as is);
* :func:`raw_decimals` — a DECIMAL(p, s) column whose stored integers lie beyond p digits
  (built from its buffers: pyarrow checks neither on building nor on writing);
* :func:`write_int96` — an INT96 timestamp column of any 12 bytes (pyarrow writes INT96 only
  from in-range timestamps): a FIXED_LEN_BYTE_ARRAY(12) column written plainly, its physical
  type then changed to INT96 in the footer (both store 12 bytes a value, the same way).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

_FLBA, _INT96 = 7, 3  # Parquet's physical type numbers


def unchecked_strings(values: Sequence[bytes | None]) -> pa.Array:
    """A ``string`` array holding ``values`` byte for byte (not necessarily UTF-8)."""
    return pa.array(list(values), pa.binary()).view(pa.string())


def raw_decimals(precision: int, scale: int, stored: Sequence[int]) -> pa.Array:
    """A ``decimal128(precision, scale)`` array of the stored integers ``stored``, which may
    lie beyond ``precision`` digits (anything in 128 bits)."""
    data = b"".join(v.to_bytes(16, "little", signed=True) for v in stored)
    return pa.Array.from_buffers(
        pa.decimal128(precision, scale), len(stored), [None, pa.py_buffer(data)]
    )


def int96(day: int, nanos: int) -> bytes:
    """An INT96 timestamp: nanoseconds of the day (int64) then the Julian day (int32)."""
    return struct.pack("<qi", nanos, day)


def write_int96(path: Path, columns: dict[str, pa.Array], name: str, raws: Sequence[bytes]) -> None:
    """Write ``columns`` plus an INT96 column ``name`` of ``raws`` (12 bytes each) to ``path``."""
    table = pa.table({**columns, name: pa.array(list(raws), pa.binary(12))})
    pq.write_table(table, path, use_dictionary=False, write_statistics=False, store_schema=False)
    data = bytearray(path.read_bytes())
    length = struct.unpack("<I", data[-8:-4])[0]
    start = len(data) - 8 - length
    footer = bytes(data[start:-8])
    if not 0 < len(name) < 128:
        raise ValueError("a short column name, please")
    label = bytes([len(name)])  # the name's length, a one-byte varint
    # the schema element and the column chunk's metadata each hold the physical type as the
    # first field (a zigzag varint: 14 for FIXED_LEN_BYTE_ARRAY), before the column's name
    element = b"\x15" + bytes([_FLBA * 2]) + b"\x15\x18\x15\x02\x18" + label + name.encode()
    chunk = b"\x1c\x15" + bytes([_FLBA * 2]) + b"\x19%\x06\x00\x19\x18" + label + name.encode()
    patched = footer
    for old in (element, chunk):
        if patched.count(old) != 1:
            raise ValueError("unexpected footer layout; pyarrow changed how it writes footers")
        patched = patched.replace(old, old.replace(bytes([_FLBA * 2]), bytes([_INT96 * 2]), 1))
    data[start:-8] = patched
    path.write_bytes(bytes(data))
