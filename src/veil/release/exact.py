"""From the engine's output to exact statistics per group: the first release stage.

The engine returns small Arrow tables (one row per group, or per group and bucket); this module
decodes them into exact integer statistics keyed by the groups' identities
(``veil.release.keys.group_keys``), checking the invariants that a correct lowering guarantees
— one row per group, no NULL statistic in a non-empty group, every fixed-point sum within
±rows·limit. A broken invariant is a bug (``InternalError``): the query then fails, charged,
with nothing of the data in its message (the session's protocol).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from veil.compile.lower import BUCKET_COLUMN, BUCKET_COUNT_COLUMN, COUNT_COLUMN
from veil.errors import InternalError
from veil.plan.nodes import Aggregate, KeyValue, Measurement
from veil.release.keys import group_keys

__all__ = ["bucket_counts", "exact_stats", "may_wrap"]

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


def exact_stats(
    agg: Aggregate,
    table: pa.Table,
    columns: Mapping[str, str],
    keys: Sequence[str],
) -> dict[Key, dict[str, int]]:
    """Exact statistics per group, keyed as the engine grouped them.

    Invariants checked (each a bug if broken: the query then fails, charged): one row per
    group, no NULL sum in a non-empty group, every sum within ``±rows·limit``.
    """
    # the statistics only: key columns are converted by group_keys, for every value (a
    # string that is not UTF-8 would make to_pydict raise)
    data = table.select([c for c in table.column_names if c not in keys]).to_pydict()
    out: dict[Key, dict[str, int]] = {}
    by_name = {m.name: m for m in agg.measurements}
    for i, key in enumerate(group_keys(agg, table, keys)):
        if key in out:
            raise InternalError("the engine returned one group twice")
        rows = int(data[COUNT_COLUMN][i])
        if rows > 0 and any(data[col][i] is None for col in columns.values()):
            raise InternalError("an exact statistic of a non-empty group came back NULL")
        stats = {name: _integer(data[col][i]) for name, col in columns.items()}
        for name, value in stats.items():
            m = by_name[name]
            if m.statistic in ("sum", "sum_squares") and abs(value) > rows * m.limit:
                raise InternalError(
                    f"the exact sum {name!r} is outside ±rows·limit: an integer overflow"
                )
        out[key] = stats
    return out


def bucket_counts(
    agg: Aggregate, table: pa.Table, keys: Sequence[str]
) -> dict[Key, tuple[NDArray[np.int64], NDArray[np.int64]]]:
    """Per group, its occupied quantile cells (ascending) and their row counts (int64 arrays).

    Vectorised: rows are grouped by dictionary codes of the key columns (equal keys, equal
    codes) and sorted once by (group, cell), so only one row per group is decoded by
    ``group_keys``; a million cells cost one sort, not a Python loop per cell.
    """
    cells = np.asarray(table.column(BUCKET_COLUMN).to_numpy(), dtype=np.int64)
    counts = np.asarray(table.column(BUCKET_COUNT_COLUMN).to_numpy(), dtype=np.int64)
    if not table.num_rows:
        return {}
    group = np.zeros(table.num_rows, dtype=np.int64)
    radix = 1
    for k in keys:
        column = table.column(k).combine_chunks()
        if pa.types.is_dictionary(column.type):  # its indices may be null: encode the values
            column = column.dictionary_decode()
        encoded = pc.dictionary_encode(column, null_encoding="encode")  # no null index
        codes = np.asarray(encoded.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
        size = len(encoded.dictionary) + 1
        if radix * size >= 1 << 62:  # too many key combinations for one integer: renumber
            group = np.unique(group, return_inverse=True)[1].reshape(-1).astype(np.int64)
            radix = int(group.max()) + 1
        group = group * size + codes
        radix *= size
    packed_groups = group  # each row's group code, in the table's order
    top = int(cells.max()) + 1
    width = int(counts.max()).bit_length()
    sane = int(cells.min()) >= 0 and int(counts.min()) >= 1  # else quantile_runs refuses
    shift = (top - 1).bit_length() + width  # bits of (cell, count)
    if sane and shift < 62 and radix < 1 << (62 - shift):
        # (group, cell, count) packed in one integer (the pairs are distinct: the counts
        # never decide the order) and sorted as values: no permutation to apply after
        packed = np.sort((((group << (shift - width)) | cells) << width) | counts)
        counts = packed & ((1 << width) - 1)
        cells = (packed >> width) & ((1 << (shift - width)) - 1)
        group = packed >> shift
        order = None
    else:
        # one integer key when it fits (distinct keys: any sort is the same), else two
        fits = radix * top < 1 << 62
        order = np.argsort(group * top + cells) if fits else np.lexsort((cells, group))
        group, cells, counts = group[order], cells[order], counts[order]
    bounds = np.flatnonzero(group[1:] != group[:-1]) + 1
    firsts = np.concatenate(([0], bounds))
    if order is None:  # a row of each group: any row with the group's code will do
        if radix <= 4 * table.num_rows + 1024:  # codes are dense enough for a lookup table
            where = np.zeros(radix, dtype=np.int64)
            where[packed_groups] = np.arange(table.num_rows, dtype=np.int64)
            rows = where[group[firsts]]
        else:
            unique, at = np.unique(packed_groups, return_index=True)
            rows = at[np.searchsorted(unique, group[firsts])]
    else:
        rows = order[firsts]
    identities = group_keys(agg, table.take(pa.array(rows)), keys)
    out: dict[Key, tuple[NDArray[np.int64], NDArray[np.int64]]] = {}
    for key, b, c in zip(
        identities, np.split(cells, bounds), np.split(counts, bounds), strict=True
    ):
        if key in out:  # never for an injective key decoding; merged rather than lost
            b0, c0 = out[key]
            b, c = np.concatenate((b0, b)), np.concatenate((c0, c))
        out[key] = (b, c)
    return out
