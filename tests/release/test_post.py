"""HAVING, ORDER BY, LIMIT and SELECT order on released rows."""

from __future__ import annotations

import sqlglot

from veil.plan import (
    Aggregate,
    AggregateCall,
    Field,
    GroupKey,
    Having,
    Limit,
    Project,
    Scan,
    Sort,
    SortKey,
)
from veil.release.post import post_process

AGG = Aggregate(
    Scan("t", (Field("g", "string"), Field("x", "real"))),
    keys=(GroupKey("g"),),
    aggregates=(AggregateCall("n", "count"),),
)
ROWS = [(0, ("a", 5)), (1, ("b", 50)), (2, ("c", 20)), (3, ("d", None))]


def test_having_filters_on_released_values_and_keeps_row_identity() -> None:
    cols, rows = post_process(Having(AGG, sqlglot.parse_one("n >= 20")), ["g", "n"], ROWS)
    assert cols == ["g", "n"]
    assert rows == [(1, ("b", 50)), (2, ("c", 20))]


def test_sort_descending_puts_nulls_last_then_limit_and_project() -> None:
    plan = Project(Limit(Sort(AGG, (SortKey("n", descending=True),)), 3), ("n",))
    cols, rows = post_process(plan, ["g", "n"], ROWS)
    assert cols == ["n"]
    assert rows == [(1, (50,)), (2, (20,)), (0, (5,))]


def test_limit_offset_skips_rows() -> None:
    _, rows = post_process(Limit(AGG, 2, offset=1), ["g", "n"], ROWS)
    assert [k for k, _ in rows] == [1, 2]
