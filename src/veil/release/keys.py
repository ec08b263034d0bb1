"""Released group keys, decoded from the form they travel in from the engine.

The lowering chooses that form (``veil.compile.lower.key_transport``): integers, strings,
booleans and binary values as they are; every other type as the engine's text of the value,
cast before grouping. Converting what arrives is defined for every value an engine returns
(:func:`group_keys`), and so is decoding the released keys — after partition selection:

- strings (and the text of other types) become Python strings; one that is not UTF-8 — Spark
  never checks its strings (a Parquet STRING column, a CAST of BINARY, binary inside a nested
  value's text), nor does DuckDB reading an Arrow table — is identified by its bytes (decoded
  with ``surrogateescape``, so two such strings never merge with each other or with a valid
  one) and released with each byte that is not UTF-8 written ``\\xhh`` (``b"\\xff"`` →
  ``"\\\\xff"``, a label another group's text may share).
- binary keys are released as DuckDB writes a BLOB, on every engine: each printable ASCII
  byte as itself, every other byte and the backslash as ``\\xHH`` (``b"\\xff\\x00a\\\\"`` →
  ``"\\\\xFF\\\\x00a\\\\x5C"``), a text from which the bytes are read back exactly.
- ``real`` keys (floating point, DECIMAL, 128-bit integers) become Python floats: every text
  DuckDB or Spark writes for such a value (``1e+16``, ``-0.0``, ``inf``, ``Infinity``, ``nan``,
  ``NaN``, a 39-digit integer) is a valid Python float literal. Two DECIMAL keys that differ
  beyond a double's precision stay two groups, released with the same float label.
- keys with a public domain are identified by their index in it, bins by their bin index
  (:func:`group_keys`): they are released as the listed key and the bin label (``"[18, 65)"``);
- ``temporal`` and ``other`` keys (dates, timestamps, times, intervals, UUIDs, enums, nested
  values) are released as the engine's text (``2024-01-31``, ``10001-02-03``,
  ``0045-03-15 (BC)``, ``2024-01-01 10:00:00.123456789``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from veil.compile.lower import key_transport
from veil.errors import InternalError
from veil.plan.nodes import Aggregate, ColumnType, KeyValue
from veil.plan.tree import is_binary, is_text

__all__ = ["blob_text", "decode_key", "group_keys", "released_key"]

Key = tuple[KeyValue, ...]


_BLOB_TEXT = {b: f"\\x{b:02X}" for b in range(256) if not 0x20 <= b <= 0x7E or b == 0x5C}
"""Each byte DuckDB writes as ``\\xHH`` in a BLOB's text (read as Latin-1 code points)."""


def blob_text(value: bytes) -> str:
    """DuckDB's text of a BLOB: each printable ASCII byte as itself, any other byte and the
    backslash as ``\\xHH`` — injective, so the bytes can be read back exactly."""
    return value.decode("latin-1").translate(_BLOB_TEXT)


def _printable(text: str) -> str:
    """``text`` with the bytes a ``surrogateescape`` decoding kept (a string that was not
    UTF-8) written ``\\xhh``; every other string as it is."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return text


def _arrived(column: pa.ChunkedArray) -> list[KeyValue]:
    """The values of a key column as Python values, for every value an engine returns: strings
    through their bytes (one that is not UTF-8 kept by ``surrogateescape``: ``to_pylist``
    would raise), binary values as :func:`blob_text`."""
    kind = column.type
    if pa.types.is_dictionary(kind):
        column = column.cast(kind.value_type)
        kind = column.type
    if is_text(kind):
        raw = column.cast(pa.large_binary()).to_pylist()
        return [None if v is None else v.decode("utf-8", "surrogateescape") for v in raw]
    values = column.to_pylist()
    if is_binary(kind):
        return [None if v is None else blob_text(v) for v in values]
    out: list[KeyValue] = values
    return out


def decode_key(kind: ColumnType, value: KeyValue) -> KeyValue:
    """The released value of a key of column type ``kind`` that arrived as ``value`` (as
    :func:`group_keys` converted it)."""
    if value is None:
        return value
    transport = key_transport(kind)
    if transport == "native":
        return _printable(value) if isinstance(value, str) else value
    if not isinstance(value, str):
        raise InternalError(f"a {kind} group key arrived as {type(value).__name__}, not text")
    if kind == "real":
        try:
            return float(value)
        except ValueError:
            raise InternalError("a real group key arrived as text that is not a number") from None
    return _printable(value)


def group_keys(agg: Aggregate, table: pa.Table, columns: Sequence[str]) -> list[Key]:
    """The identity of each group (row) of an engine result: public keys as their index, other
    keys as they arrived (integers, strings, booleans, binary values as :func:`blob_text`,
    NULL — each converts to Python exactly and injectively, see the module docstring).

    A native-type public key arrives as the column's value; every value that passed the
    domain's ``IN`` filter equals a listed key under SQL equality, which for integers, strings
    (binary collation) and booleans is Python equality, so the lookup is defined for every
    row the engine returns.
    """
    out: list[list[KeyValue]] = [[] for _ in range(table.num_rows)]
    for k, name in zip(agg.keys, columns, strict=True):
        values = _arrived(table.column(name))
        native = key_transport(agg.child.field(k.column).type) == "native"
        if k.domain is not None and native:
            index = {v: i for i, v in enumerate(k.domain)}
            try:
                values = [index[v] for v in values]
            except KeyError:
                raise InternalError("a public key came back that is not in its domain") from None
        for row, v in zip(out, values, strict=True):
            row.append(v)
    return [tuple(row) for row in out]


def released_key(agg: Aggregate, key: Sequence[KeyValue]) -> Key:
    """The released values of one group's keys, from the form they arrived in."""
    out: list[KeyValue] = []
    for k, v in zip(agg.keys, key, strict=True):
        if k.is_public and v is not None:
            labels = k.labels()
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < len(labels):
                raise InternalError(f"the index of a public key arrived as {v!r}")
            out.append(labels[v])
        else:
            out.append(decode_key(agg.child.field(k.column).type, v))
    return tuple(out)
