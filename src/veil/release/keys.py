"""Released group keys, decoded from the form they travel in from the engine.

The lowering chooses that form (``veil.compile.lower.key_transport``): integers, strings and
booleans as they are; every other type as the engine's text of the value, cast before grouping.
Decoding reads released keys only — after partition selection — and is defined for every
value an engine returns:

- ``real`` keys (floating point, DECIMAL, 128-bit integers) become Python floats: every text
  DuckDB or Spark writes for such a value (``1e+16``, ``-0.0``, ``inf``, ``Infinity``, ``nan``,
  ``NaN``, a 39-digit integer) is a valid Python float literal. Two DECIMAL keys that differ
  beyond a double's precision stay two groups, released with the same float label.
- keys with a public domain are identified by their index in it, bins by their bin index
  (:func:`group_keys`): they are released as the listed key and the bin label (``"[18, 65)"``);
- ``temporal`` and ``other`` keys (dates, timestamps, times, intervals, UUIDs, blobs, enums,
  nested values) are released as the engine's text (``2024-01-31``, ``10001-02-03``,
  ``0045-03-15 (BC)``, ``2024-01-01 10:00:00.123456789``).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from veil.compile.lower import key_transport
from veil.errors import InternalError
from veil.plan.nodes import Aggregate, ColumnType, KeyValue

__all__ = ["decode_key", "group_keys", "released_key"]

Key = tuple[KeyValue, ...]


def decode_key(kind: ColumnType, value: KeyValue) -> KeyValue:
    """The released value of a key of column type ``kind`` that arrived as ``value``."""
    if value is None or key_transport(kind) == "native":
        return value
    if not isinstance(value, str):
        raise InternalError(f"a {kind} group key arrived as {type(value).__name__}, not text")
    if kind == "real":
        try:
            return float(value)
        except ValueError:
            raise InternalError("a real group key arrived as text that is not a number") from None
    return value


def group_keys(agg: Aggregate, table: pa.Table, columns: Sequence[str]) -> list[Key]:
    """The identity of each group (row) of an engine result: public keys as their index, other
    keys as they arrived (integers, strings, booleans, NULL — each converts to Python exactly).

    A native-type public key arrives as the column's value; every value that passed the
    domain's ``IN`` filter equals a listed key under SQL equality, which for integers, strings
    (binary collation) and booleans is Python equality, so the lookup is defined for every
    row the engine returns.
    """
    out: list[list[KeyValue]] = [[] for _ in range(table.num_rows)]
    for k, name in zip(agg.keys, columns, strict=True):
        values = table.column(name).to_pylist()
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
            if isinstance(v, bool) or not isinstance(v, int):
                raise InternalError(f"the index of a public key arrived as {v!r}")
            out.append(k.labels()[v])
        else:
            out.append(decode_key(agg.child.field(k.column).type, v))
    return tuple(out)
