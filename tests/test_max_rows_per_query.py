"""A per-query ``max_rows`` given alone behaves as it does on the session (issue 40): where
``max_groups`` and ``max_rows_per_group`` were never declared they default to it, so
``max_rows=5`` and ``max_rows=30`` keep 5 and 20 of each unit's 20 rows (it used to keep the
defaults 1 and 1: both kept one row, −95 % here); where they were declared and keep fewer rows
than ``max_rows`` it would bound nothing, and is refused, free, with the fix — in Python, the
builder and the CLI (over HTTP: ``tests/service/test_max_rows_alone.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli_support import invoke
from system.prenoise import exact
from veil import Budget, Session
from veil.errors import InvalidArgumentError
from veil.plan.nodes import Contribution
from veil.plan.tree import aggregate_of

UNITS = 40
ROWS = 20  # every unit has 20 rows, in one group
SQL = "SELECT COUNT(*) AS n FROM t"


def table() -> pa.Table:
    return pa.table({"uid": [u for u in range(UNITS) for _ in range(ROWS)]})


def session(**limits: Any) -> Session:
    return Session.local({"t": table()}, privacy_unit="uid", budget=Budget(epsilon=10), **limits)


def kept(s: Session, **options: Any) -> tuple[Contribution, int]:
    """The limits a query compiles with and the exact bounded row count it would measure."""
    agg = aggregate_of(s.explain(SQL, epsilon=1, **options).plan)
    (stats,) = exact(s.engine, agg).stats.values()
    return agg.contribution, stats["__n"]


def test_max_rows_alone_per_query_bounds_each_unit_by_itself() -> None:
    with session() as s:
        assert kept(s, max_rows=5) == (Contribution(5, 5, 5), 5 * UNITS)
        assert kept(s, max_rows=30) == (Contribution(30, 30, 30), ROWS * UNITS)
        assert kept(s) == (Contribution(1, 1, None), UNITS)  # the defaults without it
        # the same limits as a session opened with max_rows alone
    with session(max_rows=5) as opened:
        assert kept(opened) == (Contribution(5, 5, 5), 5 * UNITS)


def test_a_declared_limit_is_kept_and_the_other_defaults_to_max_rows() -> None:
    with session(max_groups=2) as s:
        assert kept(s, max_rows=6) == (Contribution(2, 6, 6), 6 * UNITS)
    with session(max_rows=4) as s:  # a session's max_rows alone declares neither G nor R
        assert kept(s, max_rows=8) == (Contribution(8, 8, 8), 8 * UNITS)
        assert kept(s, max_rows=2) == (Contribution(2, 2, 2), 2 * UNITS)
    with session(max_groups=3, max_rows_per_group=5) as s:  # G × R = 15 ≥ 8: it binds
        assert kept(s, max_rows=8) == (Contribution(3, 5, 8), 5 * UNITS)


def test_the_builder_and_run_take_it_alike() -> None:
    with session() as s:
        e = s.query("t").count("n").explain(epsilon=1, max_rows=7)
        assert aggregate_of(e.plan).contribution == Contribution(7, 7, 7)
        r = s.run(s.plan(SQL), epsilon=1, max_rows=7)
        assert r.cost == Budget(epsilon=1)
        assert abs(r.rows[0][0] - 7 * UNITS) < 60


def test_a_max_rows_above_the_declared_limits_is_refused_free() -> None:
    with session(max_groups=1, max_rows_per_group=1) as s:
        before = s.remaining()
        with pytest.raises(
            InvalidArgumentError,
            match=r"max_rows=5 bounds nothing here: the session's max_groups=1 × "
            r"max_rows_per_group=1 keep at most 1 row\(s\) per unit already; pass max_groups=",
        ):
            s.sql(SQL, epsilon=1, max_rows=5)
        assert s.remaining() == before
        # given with the other two it is the analyst's own choice, and compiles
        assert kept(s, max_rows=5, max_groups=5, max_rows_per_group=5)[1] == 5 * UNITS


def test_the_cli_takes_max_rows_alone(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(table(), path)
    code, out, err = invoke(
        "explain", SQL, "--table", f"t={path}", "--privacy-unit", "uid", "--epsilon", "1",
        "--max-rows", "5",
    )  # fmt: skip
    assert code == 0, err
    said = " ".join(out.split())
    assert "at most 5 group(s) and 5 row(s) per group, 5 row(s) in all" in said
