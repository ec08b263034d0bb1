"""Neighbouring datasets for ``veil audit query``, built from the caller's own table.

NOT differentially private: this module reads every row of the table (it is the data owner's
tool, see :mod:`veil.audit.query`).

Neighbours (DESIGN §1): D′ differs from D by *all* rows of one privacy unit (one row without a
privacy unit), added or removed. :func:`neighbours` builds, from the rows the query's WHERE
keeps:

- ``remove-largest``: the unit with the largest contribution — most rows plus, for every
  clamped column, Σ |clamp(x) − midpoint| / radius (its pull on the sums); among equals, the
  one in the largest groups (a group too small to be released would hide the change);
- ``remove-smallest-group``: the unit with the most rows in the smallest group (unknown keys
  only: removing it may delete the group, which partition selection must hide);
- ``add-new-group``: a new unit whose rows (``max_rows_per_group`` in each of ``max_groups``
  groups) carry group keys that occur nowhere in D and clamped values at their upper bound
  (unknown keys only: exercises partition selection);
- ``add-upper`` / ``add-lower``: a new unit at the bounds in the largest groups;
- ``crafted-…`` for sums (Casacuberta et al. 2022, "Widespread underestimation of sensitivity
  in differentially private libraries and how to fix it", CCS): a new unit whose summed value
  stresses the arithmetic — ±1e308, 2^53 + 2, the double just above the upper bound, 0.1 and
  the smallest subnormal for a float column; ±(2^63 − 1) (the type's range) and 2^53 + 1 for an
  integer one; for a DECIMAL(p, s) column its largest and smallest values and, as a file
  written without validation can hold (issue 33), a stored integer beyond p digits — −2^127 in
  a 128-bit DECIMAL, which made DuckDB abort. veil clamps and sums in fixed point, so each must
  move the exact statistics by at most the sensitivity and never overflow or fail.

Added rows copy every other column from a row the WHERE keeps (the template), so they pass
the same filters unless the filter reads a changed column (a neighbour that then changes
nothing is still a neighbour; the audit reports how much each one moved the statistics).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from veil.plan.nodes import Aggregate, ColumnBounds, Filter, Plan

__all__ = ["Neighbour", "fresh_value", "neighbours", "passing_rows"]

_SUMS = ("sum", "sum_squares")
_CRAFTED_FLOATS: tuple[tuple[str, float], ...] = (
    ("crafted-1e308", 1e308),
    ("crafted-minus-1e308", -1e308),
    ("crafted-2^53+2", 2.0**53 + 2),
    ("crafted-above-upper", math.nan),  # nextafter(upper, +inf), filled per column
    ("crafted-0.1", 0.1),
    ("crafted-subnormal", 5e-324),
)
_CRAFTED_DECIMALS = ("crafted-decimal-max", "crafted-decimal-min", "crafted-beyond-precision")
_CRAFTED_INTS: tuple[tuple[str, int | None], ...] = (
    ("crafted-int-max", None),  # the column type's largest value
    ("crafted-int-min", None),  # its smallest
    ("crafted-2^53+1", 2**53 + 1),
)


@dataclass(frozen=True)
class Neighbour:
    """A neighbouring dataset D′ of one table: ``name`` (stable, e.g. ``remove-largest``),
    ``description`` (what changed, in words) and ``data`` (all of D′)."""

    name: str
    description: str
    data: pa.Table
    crafted: bool = False


def _filters(plan: Plan) -> list[Filter]:
    out: list[Filter] = []
    node = plan
    while node.children:
        if isinstance(node, Filter):
            out.append(node)
        node = node.children[0]
    return out


def passing_rows(data: pa.Table, agg: Aggregate) -> np.ndarray:
    """A boolean mask of the rows of ``data`` that the query's WHERE keeps (NULL: dropped)."""
    filters = _filters(agg.child)
    if not filters:
        return np.ones(data.num_rows, dtype=bool)
    where = " AND ".join(f"COALESCE(({f.predicate.sql(dialect='duckdb')}), FALSE)" for f in filters)
    con = duckdb.connect()
    try:
        con.register("__veil_audit_rows", data)
        mask = con.sql(f"SELECT {where} AS keep FROM __veil_audit_rows").to_arrow_table()
    finally:
        con.close()
    return np.asarray(mask.column("keep").to_pylist(), dtype=bool)


def fresh_value(column: pa.ChunkedArray) -> Any:
    """A value of ``column``'s type that it does not hold (``None`` when there is none, e.g.
    a boolean column holding both values, or a type this module cannot invent values for)."""
    t = column.type
    present = [v for v in column.to_pylist() if v is not None]
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        top = max(present, default=-1)
        if top < info.max:
            return top + 1
        bottom = min(present)
        return bottom - 1 if bottom > info.min else None
    if pa.types.is_floating(t):
        finite = [v for v in present if math.isfinite(v)]
        return float(max(finite, default=0.0)) + 1.0
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        taken = set(present)
        i = 0
        while f"veil-audit-new-{i}" in taken:
            i += 1
        return f"veil-audit-new-{i}"
    if pa.types.is_boolean(t):
        missing = {True, False} - set(present)
        return min(missing) if missing else None
    if pa.types.is_date32(t):
        return max(present, default=datetime.date(2000, 1, 1)) + datetime.timedelta(days=1)
    return None


def _fresh_values(column: pa.ChunkedArray, n: int) -> list[Any] | None:
    """``n`` distinct values of ``column``'s type that it does not hold (or None)."""
    out: list[Any] = []
    current = column
    for _ in range(n):
        v = fresh_value(current)
        if v is None:
            return None
        out.append(v)
        current = pa.chunked_array([*current.chunks, pa.array([v], type=column.type)])
    return out


def _bound_value(t: pa.DataType, value: Fraction, *, up: bool) -> Any:
    """The bound ``value`` in a column of type ``t`` (an integer column: the integer inside)."""
    if pa.types.is_integer(t):
        info = np.iinfo(t.to_pandas_dtype())
        whole = math.floor(value) if up else math.ceil(value)
        return int(min(max(whole, info.min), info.max))
    return float(value)


def _replace(rows: pa.Table, column: str, values: Sequence[Any]) -> pa.Table:
    i = rows.schema.get_field_index(column)
    field = rows.schema.field(i)
    return rows.set_column(i, field, pa.array(list(values), type=field.type))


def _stored_decimals(rows: pa.Table, column: str, stored: int) -> pa.Table:
    """``rows`` with ``column`` (a 128-bit DECIMAL) holding the stored integer ``stored`` in
    every row, whatever its precision (Arrow checks it neither here nor when writing)."""
    i = rows.schema.get_field_index(column)
    field = rows.schema.field(i)
    data = stored.to_bytes(16, "little", signed=True) * rows.num_rows
    array = pa.Array.from_buffers(field.type, rows.num_rows, [None, pa.py_buffer(data)])
    return rows.set_column(i, field, array)


class _Units:
    """The table's rows by privacy unit and group, over the rows the WHERE keeps."""

    def __init__(self, data: pa.Table, agg: Aggregate) -> None:
        self.data = data
        self.agg = agg
        keep = passing_rows(data, agg)
        self.kept = np.flatnonzero(keep)
        n = data.num_rows
        unit = agg.privacy_unit
        self.unit_of: list[Any] = (
            data.column(unit).to_pylist() if unit is not None else list(range(n))
        )
        cols = [k.column for k in agg.keys]
        keys = data.select(cols).to_pylist() if cols else [{}] * n
        self.group_of: list[tuple[Any, ...]] = [tuple(r[c] for c in cols) for r in keys]
        score = np.zeros(n)
        for b in agg.bounds:
            score += _pull(data.column(b.column), b)
        self.score = score

    def rows_of(self, unit: Any) -> np.ndarray:
        return np.asarray([u == unit for u in self.unit_of], dtype=bool)

    def group_sizes(self) -> dict[tuple[Any, ...], int]:
        sizes: dict[tuple[Any, ...], int] = {}
        for i in self.kept:
            g = self.group_of[i]
            sizes[g] = sizes.get(g, 0) + 1
        return sizes

    def largest_unit(self, rows: np.ndarray | None = None) -> Any:
        """The unit with the largest contribution among ``rows`` (default: every kept row);
        among equals, the one in the largest groups (most likely released, so its effect is
        seen rather than hidden by partition selection)."""
        chosen = self.kept if rows is None else rows
        sizes = self.group_sizes()
        totals: dict[Any, float] = {}
        reach: dict[Any, int] = {}
        for i in chosen:
            u = self.unit_of[i]
            totals[u] = totals.get(u, 0.0) + 1.0 + float(self.score[i])
            reach[u] = reach.get(u, 0) + sizes.get(self.group_of[i], 0)
        return max(totals, key=lambda u: (totals[u], reach[u], repr(u)))


def _pull(column: pa.ChunkedArray, bounds: ColumnBounds) -> np.ndarray:
    """|clamp(x) − midpoint| / radius per row (0 for NULL, NaN or a zero radius)."""
    if bounds.radius == 0 or not (
        pa.types.is_integer(column.type) or pa.types.is_floating(column.type)
    ):
        return np.zeros(len(column))
    x = np.asarray(
        pc.cast(column, pa.float64(), safe=False).to_numpy(zero_copy_only=False), dtype=float
    )
    mid = float(bounds.midpoint)
    clamped = np.clip(np.nan_to_num(x, nan=mid), float(bounds.lower), float(bounds.upper))
    return np.asarray(np.abs(clamped - mid) / float(bounds.radius), dtype=float)


def _new_unit(units: _Units, template: int, groups: Sequence[tuple[Any, ...]]) -> pa.Table | None:
    """Rows of a new unit: ``max_rows_per_group`` copies of row ``template`` in each of
    ``groups`` (group-key tuples), under a unit id D does not hold (None if none exists)."""
    agg, data = units.agg, units.data
    per = agg.contribution.max_rows_per_group if agg.privacy_unit is not None else 1
    picked = [g for g in groups][: agg.contribution.max_groups if agg.privacy_unit else 1]
    rows = data.take(pa.array([template] * (per * len(picked)), type=pa.int64()))
    if agg.privacy_unit is not None:
        uid = fresh_value(data.column(agg.privacy_unit))
        if uid is None:
            return None
        rows = _replace(rows, agg.privacy_unit, [uid] * rows.num_rows)
    for j, key in enumerate(agg.keys):
        rows = _replace(rows, key.column, [g[j] for g in picked for _ in range(per)])
    return rows


def _at(rows: pa.Table, agg: Aggregate, *, up: bool) -> pa.Table:
    for b in agg.bounds:
        t = rows.schema.field(b.column).type
        if pa.types.is_integer(t) or pa.types.is_floating(t):
            value = _bound_value(t, b.upper if up else b.lower, up=up)
            rows = _replace(rows, b.column, [value] * rows.num_rows)
    return rows


def _with(data: pa.Table, rows: pa.Table) -> pa.Table:
    return pa.concat_tables([data, rows.cast(data.schema)])


def neighbours(data: pa.Table, agg: Aggregate) -> tuple[list[Neighbour], list[str]]:
    """The automatic neighbours of ``data`` for the compiled aggregation ``agg`` (see the
    module docstring), and notes on the ones that could not be built."""
    units = _Units(data, agg)
    notes: list[str] = []
    out: list[Neighbour] = []
    if len(units.kept) == 0:
        notes.append("no row passes the query's WHERE: only additions can be audited")
    unknown = any(k.domain is None and k.edges is None for k in agg.keys)
    unit_word = f"unit {agg.privacy_unit}=" if agg.privacy_unit else "row "
    if len(units.kept):
        big = units.largest_unit()
        mask = units.rows_of(big)
        shown = big if agg.privacy_unit else f"#{big}"
        out.append(
            Neighbour(
                "remove-largest",
                f"remove {unit_word}{shown!s} ({int(mask.sum())} rows), the largest contribution",
                data.filter(pa.array(~mask)),
            )
        )
        if unknown and agg.keys:
            sizes = units.group_sizes()
            small = min(sizes, key=lambda g: (sizes[g], repr(g)))
            in_small = np.asarray([i for i in units.kept if units.group_of[i] == small])
            u = units.largest_unit(in_small)
            mask = units.rows_of(u)
            shown = u if agg.privacy_unit else f"#{u}"
            out.append(
                Neighbour(
                    "remove-smallest-group",
                    f"remove {unit_word}{shown!s} ({int(mask.sum())} rows) from the smallest "
                    f"group ({sizes[small]} rows)",
                    data.filter(pa.array(~mask)),
                )
            )
    template = int(units.kept[0]) if len(units.kept) else 0
    if data.num_rows == 0:
        notes.append("the table is empty: no row to copy for an added unit")
        return out, notes
    sizes = units.group_sizes()
    largest = sorted(sizes, key=lambda g: (-sizes[g], repr(g))) or [units.group_of[template]]
    if len(units.kept):
        template = int(next(i for i in units.kept if units.group_of[i] == largest[0]))
    if unknown and agg.keys:
        g = agg.contribution.max_groups if agg.privacy_unit else 1
        fresh = [_fresh_values(data.column(k.column), g) for k in agg.keys]
        if any(f is None for f in fresh):
            notes.append("add-new-group: a group-key column has no value D lacks (its type)")
        else:
            groups = [tuple(f[i] for f in fresh if f is not None) for i in range(g)]
            rows = _new_unit(units, template, groups)
            if rows is None:
                notes.append("add-new-group: the privacy-unit column has no unused value")
            else:
                out.append(
                    Neighbour(
                        "add-new-group",
                        f"add a unit in {len(groups)} new group(s), values at the upper bounds",
                        _with(data, _at(rows, agg, up=True)),
                    )
                )
    for up in (True, False):
        rows = _new_unit(units, template, largest)
        if rows is None:
            notes.append("add: the privacy-unit column has no unused value")
            break
        side = "upper" if up else "lower"
        out.append(
            Neighbour(
                f"add-{side}",
                f"add a unit in the largest group(s), values at the {side} bounds",
                _with(data, _at(rows, agg, up=up)),
            )
        )
    out.extend(_crafted(units, template, largest))
    return out, notes


def _crafted(units: _Units, template: int, groups: Sequence[tuple[Any, ...]]) -> list[Neighbour]:
    """Casacuberta et al.'s values, one neighbour each, for every column a sum reads."""
    agg, data = units.agg, units.data
    summed = sorted(
        {  # a weighted sum's product: the crafted values go into its two columns
            c
            for m in agg.measurements
            if m.statistic in _SUMS and m.column
            for c in agg.factors(m.column)
        }
    )
    out: list[Neighbour] = []
    for column in summed:
        t = data.schema.field(column).type
        bound = next(b for b in agg.bounds if b.column == column)
        values: list[tuple[str, Any]]
        if pa.types.is_integer(t):
            info = np.iinfo(t.to_pandas_dtype())
            values = [
                (n, int(info.max) if n.endswith("max") else int(info.min) if v is None else v)
                for n, v in _CRAFTED_INTS
            ]
            values = [(n, v) for n, v in values if info.min <= v <= info.max]
        elif pa.types.is_floating(t):
            above = float(np.nextafter(float(bound.upper), math.inf))
            values = [(n, above if math.isnan(v) else v) for n, v in _CRAFTED_FLOATS]
        elif pa.types.is_decimal(t) and t.bit_width == 128:
            top = 10**t.precision - 1  # the stored integers of the type's ends
            values = list(zip(_CRAFTED_DECIMALS, (top, -top, -(2**127)), strict=True))
        else:
            continue
        for name, value in values:
            rows = _new_unit(units, template, groups)
            if rows is None:
                return out
            rows = _at(rows, agg, up=True)
            if pa.types.is_decimal(t):
                rows = _stored_decimals(rows, column, value)
                shown = f"the stored integer {value}"
            else:
                rows = _replace(rows, column, [value] * rows.num_rows)
                shown = repr(value)
            label = f"{name} ({column})" if len(summed) > 1 else name
            out.append(
                Neighbour(
                    label,
                    f"add a unit with {column} = {shown} in the largest group(s)",
                    _with(data, rows),
                    crafted=True,
                )
            )
    return out
