"""HAVING, ORDER BY, LIMIT and the SELECT order, applied to released rows only.

Post-processing: these read released (noisy) values, so they cost nothing and keep the
guarantee. Predicates are evaluated by a scratch in-memory DuckDB over the released rows (never
over private data).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from veil.errors import InternalError, SchemaError
from veil.plan.nodes import Aggregate, Having, Limit, Plan, Project, Sort

__all__ = ["Rows", "post_process", "post_process_columns"]

Rows = list[tuple[int, tuple[Any, ...]]]  # (original index, row values)

_ROW = "__veil_row"


def _chain(plan: Plan) -> list[Plan]:
    """The post-processing nodes above the aggregation, bottom first."""
    out: list[Plan] = []
    node = plan
    while not isinstance(node, Aggregate):
        out.append(node)
        if len(node.children) != 1:
            raise InternalError("a post-processing node without a single child")
        node = node.children[0]
    return out[::-1]


def _having(node: Having, columns: Sequence[str], rows: Rows) -> Rows:
    if not rows:
        return rows
    data = {c: [r[1][i] for r in rows] for i, c in enumerate(columns)}
    data[_ROW] = list(range(len(rows)))
    table = pa.table(data)
    con = duckdb.connect()
    try:
        con.register("__released", table)
        sql = f"SELECT {_ROW} FROM __released WHERE {node.predicate.sql(dialect='duckdb')}"
        keep = con.sql(sql).fetchall()
    except duckdb.Error as exc:
        raise SchemaError(f"cannot evaluate HAVING {node.predicate.sql()}: {exc}") from exc
    finally:
        con.close()
    wanted = sorted(k[0] for k in keep)
    return [rows[i] for i in wanted]


def _by(i: int) -> Callable[[tuple[int, tuple[Any, ...]]], Any]:
    def key(row: tuple[int, tuple[Any, ...]]) -> Any:
        return row[1][i]

    return key


def _sort(node: Sort, columns: Sequence[str], rows: Rows) -> Rows:
    out = list(rows)
    for key in reversed(node.keys):
        i = list(columns).index(key.column)
        present = [r for r in out if r[1][i] is not None]
        missing = [r for r in out if r[1][i] is None]
        present.sort(key=_by(i), reverse=key.descending)
        out = present + missing  # NULLs last
    return out


def post_process(plan: Plan, columns: Sequence[str], rows: Rows) -> tuple[list[str], Rows]:
    """Apply the nodes above the aggregation in order; returns the output columns and rows."""
    cols = list(columns)
    for node in _chain(plan):
        if isinstance(node, Having):
            rows = _having(node, cols, rows)
        elif isinstance(node, Sort):
            rows = _sort(node, cols, rows)
        elif isinstance(node, Limit):
            rows = rows[node.offset : node.offset + node.count]
        elif isinstance(node, Project):
            idx = [cols.index(c) for c in node.columns]
            rows = [(k, tuple(r[i] for i in idx)) for k, r in rows]
            cols = list(node.columns)
        else:
            raise InternalError(f"unexpected node {type(node).__name__} above the aggregation")
    return cols, rows


def post_process_columns(
    plan: Plan, columns: Sequence[str], values: Sequence[Sequence[Any]], size: int
) -> tuple[list[str], Sequence[int], list[Sequence[Any]]]:
    """:func:`post_process` of ``size`` released rows given as ``values``, one sequence per
    column: the output columns, the original index of each output row and the output values
    by column. A column at a time where the nodes are only the SELECT order and LIMIT (no
    row tuple is built); with HAVING or ORDER BY, row by row through :func:`post_process`."""
    chain = _chain(plan)
    if any(not isinstance(node, Project | Limit) for node in chain):
        rows: Rows = list(enumerate(zip(*values, strict=True)))
        if not values:  # a query without keys or aggregates: one empty row per group
            rows = [(i, ()) for i in range(size)]
        cols, rows = post_process(plan, columns, rows)
        out: list[Sequence[Any]] = [[r[j] for _, r in rows] for j in range(len(cols))]
        return cols, [i for i, _ in rows], out
    cols = list(columns)
    data = list(values)
    kept: Sequence[int] = range(size)
    for node in chain:
        if isinstance(node, Limit):
            window = slice(node.offset, node.offset + node.count)
            kept = kept[window]
            data = [c[window] for c in data]
        elif isinstance(node, Project):
            idx = [cols.index(c) for c in node.columns]
            data = [data[i] for i in idx]
            cols = list(node.columns)
    return cols, kept, data
