"""From the engine's output to exact statistics per group: the first release stage.

The engine returns small Arrow tables (one row per group, or per group and bucket); this module
decodes them into exact integer statistics keyed by the groups' identities
(``veil.release.keys.group_keys``), checking the invariants that a correct lowering guarantees
— one row per group, no NULL statistic in a non-empty group, every fixed-point sum within
±rows·limit. A broken invariant is a bug (``InternalError``): the query then fails, charged,
with nothing of the data in its message (the session's protocol).
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from veil.compile.lower import BUCKET_COLUMN, BUCKET_COUNT_COLUMN, COUNT_COLUMN, key_transport
from veil.errors import InternalError
from veil.plan.domain import int64_values
from veil.plan.nodes import Aggregate, KeyValue, Measurement
from veil.plan.tree import is_text
from veil.release.arrays import bools, int64_array, integers, nulls, text_scalar
from veil.release.keys import group_keys
from veil.release.quantiles import Cells, RowCells

__all__ = ["ExactStats", "bucket_counts", "exact_stats", "may_wrap"]

Key = tuple[KeyValue, ...]


def _integer(v: Any) -> int:
    """An exact statistic from the engine as an int (a SUM over no rows is NULL: 0)."""
    if v is None:
        return 0
    if isinstance(v, Decimal):
        if v != v.to_integral_value():
            raise InternalError(f"an exact integer statistic came back as {v}")
        return int(v)
    if isinstance(v, int):
        return v
    raise InternalError(f"an exact integer statistic came back as {v!r}")


_INT64_LIMIT = 1 << 63


def _sums(agg: Aggregate) -> list[Measurement]:
    return [m for m in agg.measurements if m.statistic in ("sum", "sum_squares")]


def may_wrap(agg: Aggregate, table: pa.Table) -> bool:
    """Whether a 64-bit sum of some group may have wrapped: every term lies in
    ``[-limit, limit]``, so no partial sum, in any order, leaves the 64-bit range while
    ``rows · limit < 2^63``; beyond that the sums must be recomputed exactly."""
    limit = max((m.limit for m in _sums(agg)), default=0)
    if limit == 0 or table.num_rows == 0:
        return False
    rows = max(int(n) for n in table.column(COUNT_COLUMN).to_pylist())
    return rows * limit >= _INT64_LIMIT


class ExactStats(Mapping[Key, Mapping[str, int]]):
    """The exact statistics of every group as columns, in the engine's row order: a mapping
    from each group's identity (``veil.release.keys.group_keys``) to its statistics, built
    only when read as one (:func:`veil.release.draw.measure` reads the columns in bulk and
    converts only the released groups' keys).

    ``order`` (unknown keys): the rows sorted by the ``repr`` of their identities, the order
    the release visits them in — a function of the keys alone. ``positions`` (fully public
    keys): each row's index in the product of the key spaces (``itertools.product`` order).
    """

    def __init__(
        self,
        agg: Aggregate,
        keys: pa.Table,
        names: Sequence[str],
        stats: Mapping[str, NDArray[Any]],
        *,
        order: NDArray[np.int64] | None = None,
        positions: NDArray[np.int64] | None = None,
    ) -> None:
        self.agg = agg
        self.names = tuple(names)
        self.stats = dict(stats)  # name → int64 (or, beyond 64 bits, object) array per row
        self.order = order
        self.positions = positions
        self._keys = keys
        self._dict: dict[Key, dict[str, int]] | None = None

    @property
    def rows(self) -> int:
        return int(self._keys.num_rows)

    def keys_at(self, rows: NDArray[np.int64]) -> list[Key]:
        """The identities of the groups at engine rows ``rows`` (the same conversion as for
        every row)."""
        if not self.agg.keys:  # Arrow's take on a table without columns returns no rows
            return [() for _ in range(len(rows))]
        taken = self._keys.take(int64_array(rows))
        return group_keys(self.agg, taken, self.names)

    def _mapping(self) -> dict[Key, dict[str, int]]:
        if self._dict is None:
            every = self.keys_at(np.arange(self.rows, dtype=np.int64))
            columns = {name: values.tolist() for name, values in self.stats.items()}
            self._dict = {
                key: {name: int(columns[name][i]) for name in columns}
                for i, key in enumerate(every)
            }
        return self._dict

    def __getitem__(self, key: Key) -> Mapping[str, int]:
        return self._mapping()[key]

    def __iter__(self) -> Iterator[Key]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return self.rows


def _column(values: pa.ChunkedArray) -> tuple[NDArray[Any], NDArray[np.bool_]]:
    """An exact integer statistic column as an int64 array (an object array of ints when a
    value needs more than 64 bits) and its NULL mask (a NULL reads as 0)."""
    missing = nulls(values)
    kind = values.type
    if pa.types.is_integer(kind) and kind.bit_width <= 64 and pa.types.is_signed_integer(kind):
        return integers(values), missing
    filled = values.fill_null(0) if values.null_count else values
    if pa.types.is_decimal128(kind) and kind.scale == 0:
        low = _decimal_low_words(filled)
        if low is not None:
            return low, missing
    if pa.types.is_decimal(kind) or pa.types.is_integer(kind):
        try:  # exact: a fractional or out-of-range value raises and is converted one by one
            cast = pc.cast(filled, pa.int64(), safe=True)
            return integers(cast), missing
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    out = np.empty(len(filled), dtype=object)
    out[:] = [_integer(v) for v in filled.to_pylist()]
    return out, missing


def _decimal_low_words(values: pa.ChunkedArray) -> NDArray[np.int64] | None:
    """A ``decimal128(p, 0)`` column without NULLs as int64, read from its 128-bit two's
    complement words (little-endian: the low word, then the high one): exact when every high
    word is the low word's sign extended (the value is then the low word); None when one is
    not (a value beyond 64 bits: the caller converts them one by one), or on a big-endian
    machine."""
    if sys.byteorder != "little":
        return None
    parts = [np.zeros((0, 2), dtype=np.int64)]  # (a column of no chunks, or empty ones)
    for chunk in values.chunks:
        if not len(chunk):
            continue
        data = chunk.buffers()[1]
        if data is None:
            return None
        start = chunk.offset
        words = np.frombuffer(data, dtype="<i8")[2 * start : 2 * (start + len(chunk))]
        parts.append(words.reshape(-1, 2))
    both = np.concatenate(parts) if len(parts) > 2 else parts[-1]
    low, high = both[:, 0], both[:, 1]
    if np.any(high != (low >> 63)):
        return None
    return low.astype(np.int64)


def _outside(values: NDArray[Any], rows: NDArray[Any], limit: int) -> bool:
    """Whether some |value| > rows·limit (exact: int64 only when the products fit)."""
    top = int(rows.max()) if rows.size else 0
    if values.dtype == rows.dtype == np.int64 and max(top, 1) * limit < _INT64_LIMIT:
        bound = rows * limit
        return bool(np.any((values > bound) | (values < -bound)))
    return any(abs(int(v)) > int(r) * limit for v, r in zip(values, rows, strict=True))


_text = text_scalar
_QUOTE, _NONE = _text("'"), _text("")
_SIMPLE_TEXT = r"^[ -&(-\[\]-~]*$"
"""Printable ASCII without a quote or a backslash: such a string's ``repr`` is itself
between single quotes."""


def _key_reprs(agg: Aggregate, table: pa.Table, names: Sequence[str]) -> pa.ChunkedArray | None:
    """Per row, the ``repr`` of its group identity (as :func:`group_keys` converts it),
    computed by Arrow for integer, boolean and plain-ASCII string keys; None when a key needs
    Python's own ``repr`` (the caller then converts every key, as for any value Arrow's
    kernels refuse: total)."""
    try:
        return _arrow_reprs(agg, table, names)
    except (pa.ArrowException, ValueError, TypeError):
        return None


def _arrow_reprs(agg: Aggregate, table: pa.Table, names: Sequence[str]) -> pa.ChunkedArray | None:
    parts = []
    for k, name in zip(agg.keys, names, strict=True):
        column = table.column(name)
        kind = column.type
        native = key_transport(agg.child.field(k.column).type) == "native"
        if k.domain is not None and native:
            return None  # a public key's identity is its index (the mapping is Python's)
        if pa.types.is_integer(kind):
            text = pc.cast(column, pa.large_string())
        elif pa.types.is_boolean(kind):
            text = pc.if_else(column, _text("True"), _text("False"))
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
            simple = pc.match_substring_regex(column, _SIMPLE_TEXT)
            if pc.all(simple, skip_nulls=True).as_py() is False:
                return None
            wide = column.cast(pa.large_string())
            text = pc.binary_join_element_wise(_QUOTE, wide, _QUOTE, _NONE)
        else:
            return None
        parts.append(text.fill_null(_text("None")) if text.null_count else text)
    if len(parts) == 1:
        return pc.binary_join_element_wise(_text("("), parts[0], _text(",)"), _NONE)
    inner = pc.binary_join_element_wise(*parts, _text(", "))
    return pc.binary_join_element_wise(_text("("), inner, _text(")"), _NONE)


_POWERS = np.array([10**i for i in range(1, 20)], dtype=np.uint64)
_SHIFTS = np.array([10 ** (19 - d) for d in range(20)], dtype=np.uint64)  # by digit count


def _numeric_repr_order(
    agg: Aggregate, table: pa.Table, names: Sequence[str]
) -> tuple[NDArray[np.int64], bool] | None:
    """The ``repr`` order of integer and boolean keys without writing a string, and whether
    two rows share a key; None for any other key (then :func:`_key_reprs`).

    Proof note: a key's ``repr`` is ``(`` + each value's text joined by ``, `` + ``)`` (``,)``
    for one key), and every character that may follow a value's text (``,`` or ``)``) sorts
    before every digit, so tuples compare value by value, each value's text
    lexicographically with a prefix first. For an integer that text is ``-`` and digits
    (first, as ``-`` < ``0``), digits, or ``None`` (last, as ``N`` > ``9``); digits of
    magnitude m (d of them) compare as (m·10^(19−d), d) — padded to 19 digits, a prefix
    first — which fits in 64 unsigned bits for every int64 (padded to the column's widest
    w ≤ 17 digits instead, (sign, padded, d) is the one integer (sign·10^w + padded)·20 + d).
    A boolean's is ``False`` < ``None`` < ``True``.
    """
    try:
        sort_keys: list[NDArray[Any]] = []
        for k, name in zip(agg.keys, names, strict=True):
            column = table.column(name)
            native = key_transport(agg.child.field(k.column).type) == "native"
            if k.domain is not None and native:
                return None
            kind = column.type
            missing = nulls(column)
            if pa.types.is_boolean(kind):
                truth = bools(column)
                sort_keys.append(np.where(missing, 1, np.where(truth, 2, 0)))
                continue
            if not (pa.types.is_integer(kind) and pa.types.is_signed_integer(kind)):
                return None
            values = integers(column)
            negative = values < 0
            magnitude = np.where(
                negative, (-(values + 1)).astype(np.uint64) + np.uint64(1), values.astype(np.uint64)
            )
            digits = np.searchsorted(_POWERS, magnitude, side="right") + 1
            sign = np.where(missing, 2, np.where(negative, 0, 1)).astype(np.uint64)
            widest = int(digits.max()) if digits.size else 1
            if widest <= 17:  # (sign, padded, d) as one integer: 3·20·10^17 < 2^64
                shift = np.take(_SHIFTS, digits + (19 - widest))  # 10^(widest − d)
                one = (sign * np.uint64(10**widest) + magnitude * shift) * np.uint64(20)
                sort_keys.append(one + digits.astype(np.uint64))
            else:
                sort_keys += [sign, magnitude * np.take(_SHIFTS, digits), digits]
    except (pa.ArrowException, ValueError, TypeError):
        return None
    if not sort_keys:
        return None
    if len(sort_keys) == 1:
        order = np.argsort(sort_keys[0], kind="stable").astype(np.int64)
    else:
        order = np.lexsort(sort_keys[::-1]).astype(np.int64)
    ranked = [key[order] for key in sort_keys]
    same = np.ones(max(order.size - 1, 0), dtype=bool)
    for key in ranked:
        same &= key[1:] == key[:-1]
    return order, bool(same.any())


def _positions(agg: Aggregate, table: pa.Table, names: Sequence[str]) -> NDArray[np.int64] | None:
    """Per row, its index in the product of fully public key spaces (the row-major index of
    its keys' indices), computed in bulk; None when a key column needs Python's mapping (or
    an Arrow kernel refuses a value: the caller then converts every key)."""
    try:
        return _arrow_positions(agg, table, names)
    except (pa.ArrowException, ValueError, TypeError):
        return None


def _arrow_positions(
    agg: Aggregate, table: pa.Table, names: Sequence[str]
) -> NDArray[np.int64] | None:
    if math.prod(len(k.labels()) for k in agg.keys) >= 1 << 62:
        return None
    position = np.zeros(table.num_rows, dtype=np.int64)
    for k, name in zip(agg.keys, names, strict=True):
        column = table.column(name)
        if column.null_count:
            return None
        size = len(k.labels())
        native = key_transport(agg.child.field(k.column).type) == "native"
        if k.domain is not None and native:
            found = _domain_codes(column, k.domain)
            if found is None:
                return None
            codes = found
        elif pa.types.is_integer(column.type):
            codes = integers(column)
        else:
            return None
        if codes.size and (codes.min() < 0 or codes.max() >= size):
            return None
        position = position * size + codes
    return position


_DENSE = 4
"""A declared domain of ints whose span is at most this many times its size is looked up in a
table of the whole span (one array read per row); a sparser one by Arrow's hash lookup."""


def _domain_codes(
    column: pa.ChunkedArray, domain: tuple[KeyValue, ...]
) -> NDArray[np.int64] | None:
    """Each row's index in its key's declared ``domain`` (distinct values, ``GroupKey``'s
    invariant); None when the column's type and the domain's values do not match (the caller
    then converts every key). A value outside the domain is a bug (the SQL keeps only
    declared keys)."""
    kind = column.type
    ints = int64_values(domain) if pa.types.is_integer(kind) else None
    if ints is not None:
        low, high = int(ints.min()), int(ints.max())
        if high - low < _DENSE * ints.size:
            # table[v - low]: the index of value v in the domain, -1 for a value not in it
            table = np.full(high - low + 1, -1, dtype=np.int64)
            table[ints - low] = np.arange(ints.size, dtype=np.int64)
            values = integers(column.cast(pa.int64()))
            if values.size and (int(values.min()) < low or int(values.max()) > high):
                raise InternalError("a public key came back that is not in its domain")
            codes = table[values - low]
            if codes.size and int(codes.min()) < 0:
                raise InternalError("a public key came back that is not in its domain")
            return codes
        index = pc.index_in(column.cast(pa.int64()), value_set=int64_array(ints))
        if index.null_count:
            raise InternalError("a public key came back that is not in its domain")
        return integers(index)
    if not (pa.types.is_integer(kind) or is_text(kind)):  # (DuckDB's text can be large)
        return None
    value_set = _value_set(domain, kind)
    if value_set is None:
        return None
    index = pc.index_in(column, value_set=value_set)
    if index.null_count:
        raise InternalError("a public key came back that is not in its domain")
    return integers(index)


def _distinct(positions: NDArray[np.int64], size: int) -> bool:
    """Whether ``positions`` (each in ``[0, size)``) are pairwise distinct: marked in a table
    of the ``size`` groups when it is not much larger than the rows, else sorted."""
    if size <= max(_DENSE * positions.size, 1 << 16):
        seen = np.zeros(size, dtype=bool)
        seen[positions] = True
        return int(np.count_nonzero(seen)) == positions.size
    ordered = np.sort(positions)
    return not bool(np.any(ordered[1:] == ordered[:-1]))


_VALUE_SETS: dict[tuple[int, pa.DataType], tuple[object, pa.Array | None]] = {}
_VALUE_SETS_HELD = 16
_VALUE_SETS_LOCK = threading.Lock()


def _value_set(domain: tuple[KeyValue, ...], kind: pa.DataType) -> pa.Array | None:
    """A public key's ``domain`` (distinct values, ``GroupKey``'s invariant) as an Arrow array
    of the key column's type, for ``index_in``; None when a key does not convert (the caller
    then maps every key in Python). Remembered for the last few domains by identity (a
    domain is an immutable tuple, held with its array so that its id names no other)."""
    ident = (id(domain), kind)
    held = _VALUE_SETS.get(ident)
    if held is not None and held[0] is domain:
        return held[1]
    found: pa.Array | None
    try:
        found = pa.array(list(domain), type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        found = None
    with _VALUE_SETS_LOCK:
        _VALUE_SETS[ident] = (domain, found)
        while len(_VALUE_SETS) > _VALUE_SETS_HELD:
            _VALUE_SETS.pop(next(iter(_VALUE_SETS)))
    return found


def exact_stats(
    agg: Aggregate,
    table: pa.Table,
    columns: Mapping[str, str],
    keys: Sequence[str],
) -> ExactStats:
    """Exact statistics per group, keyed as the engine grouped them (as columns, in bulk).

    Invariants checked (each a bug if broken: the query then fails, charged): one row per
    group, no NULL sum in a non-empty group, every sum within ``±rows·limit``.
    """
    # the statistics only: key columns are converted by group_keys, for every value (a
    # string that is not UTF-8 would make to_pydict raise)
    by_name = {m.name: m for m in agg.measurements}
    rows, _ = _column(table.column(COUNT_COLUMN))
    stats: dict[str, NDArray[Any]] = {}
    for name, col in columns.items():
        values, nulls = _column(table.column(col))
        if np.any(nulls & (rows > 0)):
            raise InternalError("an exact statistic of a non-empty group came back NULL")
        m = by_name[name]
        if m.statistic in ("sum", "sum_squares") and _outside(values, rows, m.limit):
            raise InternalError(
                f"the exact sum {name!r} is outside ±rows·limit: an integer overflow"
            )
        stats[name] = values
    key_table = table.select(list(keys))
    out = ExactStats(agg, key_table, keys, stats)
    if agg.public_keys:
        positions = _positions(agg, key_table, keys)
        if positions is not None and positions.size:
            if not _distinct(positions, math.prod(len(k.labels()) for k in agg.keys)):
                raise InternalError("the engine returned one group twice")
            out.positions = positions
            return out
    else:
        numeric = _numeric_repr_order(agg, key_table, keys)
        if numeric is not None:
            order, duplicate = numeric
            if duplicate:
                raise InternalError("the engine returned one group twice")
            out.order = order
            return out
        reprs = _key_reprs(agg, key_table, keys)
        if reprs is not None:
            indices = pc.sort_indices(reprs)
            order = integers(indices)
            ranked = reprs.take(indices)
            if len(ranked) > 1 and pc.any(pc.equal(ranked[1:], ranked[:-1])).as_py():
                raise InternalError("the engine returned one group twice")
            out.order = order
            return out
    every = out.keys_at(np.arange(out.rows, dtype=np.int64))
    if len(set(every)) != len(every):
        raise InternalError("the engine returned one group twice")
    if not agg.public_keys:
        out.order = np.array(
            sorted(range(len(every)), key=lambda i: repr(every[i])), dtype=np.int64
        )
    return out


def _merged(
    group: NDArray[np.int64], cells: NDArray[np.int64], counts: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Rows sorted by (group, cell) with each (group, cell) once and its counts added: the
    engine may return a cell in several rows (one per bounded row, ``cells_as_rows``)."""
    if group.size < 2:
        return group, cells, counts
    first = np.empty(group.size, dtype=bool)
    first[0] = True
    np.not_equal(group[1:], group[:-1], out=first[1:])
    first[1:] |= cells[1:] != cells[:-1]
    if bool(first.all()):
        return group, cells, counts
    if group.size * int(counts.max()) >= 1 << 63:  # each partial sum stays below 2^63
        raise InternalError("quantile cell counts too large to add in 64 bits; this is a bug")
    starts = np.flatnonzero(first)
    return group[starts], cells[starts], np.add.reduceat(counts, starts)


def _repeats(
    packed: NDArray[np.int64], bits: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """The distinct (group, cell)s of sorted non-empty ``packed`` = group << bits | cell, and
    how many times each occurs: :func:`_merged` of rows that all count 1, without adding."""
    first = np.empty(packed.size, dtype=bool)
    first[0] = True
    np.not_equal(packed[1:], packed[:-1], out=first[1:])
    repeats = packed.size - int(np.count_nonzero(first))
    if 2 * repeats < packed.size:  # mostly distinct (a fine grid): count the few repeats
        distinct = packed[first]
        counts = np.ones(distinct.size, dtype=np.int64)
        # the k-th repeat (k = 0, 1, …) at position p is a row of distinct value p − k − 1
        later = np.flatnonzero(~first)
        later -= np.arange(1, repeats + 1)
        np.add.at(counts, later, 1)
    else:  # mostly repeats: each distinct value's count is the gap to the next one's start
        starts = np.flatnonzero(first)
        counts = np.diff(starts, append=packed.size)
        distinct = packed[starts]
    cells = distinct & ((1 << bits) - 1)
    distinct >>= bits
    return distinct, cells, counts


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t))


def _listed_counts(agg: Aggregate, table: pa.Table, keys: Sequence[str]) -> dict[Key, Cells]:
    """:func:`bucket_counts` of a listed cell table (keys, ``__b`` a list per group, see
    ``split_together``): each group's list as its :class:`RowCells`, a view of one flat
    array (no copy, no sort: the quantile's draw selects what it needs)."""
    column = table.column(BUCKET_COLUMN)
    if column.null_count:  # split_together keeps the groups with a list only
        raise InternalError("a listed quantile cell table holds a NULL list; this is a bug")
    groups: list[NDArray[Any]] = []
    for lists in column.chunks:  # chunk by chunk: combining them would copy every cell
        flat = pc.list_flatten(lists)
        if flat.null_count:  # a cell is a clamped integer: never NULL
            raise InternalError("a listed quantile cell is NULL; this is a bug")
        # 32-bit cells (a grid of at most 2^32: ``lower._together_rows``) stay as they are,
        # read without a copy; others as 64-bit integers
        wide = not pa.types.is_uint32(flat.type)
        values = (flat.cast(pa.int64()) if wide else flat).to_numpy(zero_copy_only=False)
        sizes = np.asarray(pc.list_value_length(lists).to_numpy(zero_copy_only=False), np.int64)
        groups += np.split(values, np.cumsum(sizes)[:-1]) if sizes.size else []
    identities = group_keys(agg, table.select(list(keys)), keys) if keys else [()] * len(groups)
    out: dict[Key, Cells] = {}
    for key, rows in zip(identities, groups, strict=True):
        if not rows.size:
            continue
        prior = out.get(key)
        if isinstance(prior, RowCells):  # never for an injective key decoding; merged, not lost
            rows = np.concatenate((prior.rows, rows))
        out[key] = RowCells(rows)
    return out


def cells_by_measurement(
    agg: Aggregate, tables: Mapping[str, pa.Table], keys: Sequence[str]
) -> dict[str, dict[Key, Cells]]:
    """:func:`bucket_counts` of each measurement's cell table, a table that several
    measurements share (``split_together``: a column's quantiles on one grid) read once —
    they then share its (read-only) cells."""
    read: dict[int, tuple[pa.Table, dict[Key, Cells]]] = {}
    out: dict[str, dict[Key, Cells]] = {}
    for name, table in tables.items():
        held = read.get(id(table))
        if held is None or held[0] is not table:
            held = read[id(table)] = (table, bucket_counts(agg, table, keys))
        out[name] = held[1]
    return out


def bucket_counts(agg: Aggregate, table: pa.Table, keys: Sequence[str]) -> dict[Key, Cells]:
    """Per group, its occupied quantile cells (ascending) and their row counts (int64 arrays);
    a cell the table holds in several rows gets the sum of their counts. A listed table (a
    list of cells per group, DuckDB's fine grids) gives each group's :class:`RowCells`
    instead, which reads as the same pair.

    Vectorised: rows are grouped by dictionary codes of the key columns (equal keys, equal
    codes) and sorted once by (group, cell), so only one row per group is decoded by
    ``group_keys``; a million cells cost one sort, not a Python loop per cell.
    """
    if _is_list(table.column(BUCKET_COLUMN).type):
        return _listed_counts(agg, table, keys)
    cells = np.asarray(table.column(BUCKET_COLUMN).to_numpy(), dtype=np.int64)
    counts = np.asarray(table.column(BUCKET_COUNT_COLUMN).to_numpy(), dtype=np.int64)
    if not table.num_rows:
        return {}
    # every full-length array below is made once and then changed in place: a fresh array of
    # a million cells costs more in page faults than the arithmetic on it
    group = np.zeros(table.num_rows, dtype=np.int64)
    radix = 1
    dictionaries: list[tuple[pa.Array, int]] | None = []  # per key: its values, its radix
    for k in keys:
        column = table.column(k).combine_chunks()
        if not pa.types.is_dictionary(column.type) or column.indices.null_count:
            if pa.types.is_dictionary(column.type):  # null indices: encode the values
                column = column.dictionary_decode()
            column = pc.dictionary_encode(column, null_encoding="encode")  # no null index
        # (a dictionary without null indices, as split_together's, is used as it is)
        codes = column.indices.to_numpy(zero_copy_only=False)
        size = len(column.dictionary) + 1
        if radix * size >= 1 << 62:  # too many key combinations for one integer: renumber
            group = np.unique(group, return_inverse=True)[1].reshape(-1).astype(np.int64)
            radix = int(group.max()) + 1
            dictionaries = None
        group *= size
        group += codes
        radix *= size
        if dictionaries is not None:
            dictionaries.append((column.dictionary, size))
    top = int(cells.max()) + 1
    width = int(counts.max()).bit_length()
    sane = int(cells.min()) >= 0 and int(counts.min()) >= 1  # else quantile_runs refuses
    shift = (top - 1).bit_length() + width  # bits of (cell, count)
    if sane and shift < 62 and radix < 1 << (62 - shift) and dictionaries is not None:
        # (group, cell, count) packed in one integer and sorted as values, in place (rows of
        # one (group, cell) end up side by side whatever their counts)
        packed = group
        packed <<= shift - width
        packed |= cells
        if width == 1:  # every count is 1 (one row per bounded row): count equal (group, cell)s
            packed.sort()
            group, cells, counts = _repeats(packed, shift - width)
        else:
            packed <<= width
            packed |= counts
            packed.sort()
            counts = packed & ((1 << width) - 1)
            cells = packed >> width
            cells &= (1 << (shift - width)) - 1
            packed >>= shift
            group, cells, counts = _merged(packed, cells, counts)
        bounds = np.flatnonzero(group[1:] != group[:-1]) + 1
        # one row per group, its keys read from the dictionaries (the group code is the
        # mixed-radix number of its key codes)
        code = group[np.concatenate(([0], bounds))]
        columns: list[pa.Array] = []
        for dictionary, size in reversed(dictionaries):
            index = pa.array(code % size, type=pa.int64())
            columns.append(pa.DictionaryArray.from_arrays(index, dictionary))
            code = code // size
        representatives = pa.table(list(reversed(columns)), names=list(keys))
    else:
        # one integer key when it fits (distinct keys: any sort is the same), else two
        fits = radix * top < 1 << 62
        order = np.argsort(group * top + cells) if fits else np.lexsort((cells, group))
        group, cells, counts = group[order], cells[order], counts[order]
        bounds = np.flatnonzero(group[1:] != group[:-1]) + 1
        representatives = table.take(pa.array(order[np.concatenate(([0], bounds))]))
        group, cells, counts = _merged(group, cells, counts)
        bounds = np.flatnonzero(group[1:] != group[:-1]) + 1
    identities = (
        group_keys(agg, representatives, keys) if keys else [()] * (bounds.size + 1)
    )  # (a table without columns has no rows: a query without GROUP BY is one group)
    out: dict[Key, Cells] = {}
    for key, b, c in zip(
        identities, np.split(cells, bounds), np.split(counts, bounds), strict=True
    ):
        if key in out:  # never for an injective key decoding; merged rather than lost
            b0, c0 = out[key]
            b, c = np.concatenate((b0, b)), np.concatenate((c0, c))
        out[key] = (b, c)
    return out
