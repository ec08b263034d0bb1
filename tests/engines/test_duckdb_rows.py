"""A small result read as Python rows (``veil.engines.duckdb_rows``) is the table DuckDB's Arrow
read gives: the same schema and values, for every type it admits, past 38 digits, with nulls,
at and past ``SMALL`` rows; and the schema is used only for the bind it was read under."""

from __future__ import annotations

import warnings
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot

import veil.engines.duckdb as duckdb_engine
from veil.engines.duckdb import DuckDBEngine
from veil.engines.duckdb_rows import SMALL, fetched, readable

COLUMNS = (
    "h::HUGEINT AS h, (h // 7)::DECIMAL(38,0) AS d38, (u % 1000)::DECIMAL(18,0) AS d18, "
    "u::BIGINT AS b, (u % 100)::INTEGER AS i, (u % 5)::UBIGINT AS ub, s AS s, "
    "(u % 2 = 0) AS t, x AS x"
)
ROWS = (
    "SELECT * FROM (VALUES "
    "(170141183460469231731687303715884105727::HUGEINT, 1, 'a', 1.5::DOUBLE), "
    "((-170141183460469231731687303715884105727)::HUGEINT - 1, 2, 'é∑', 'nan'::DOUBLE), "
    "(NULL, 3, NULL, '-inf'::DOUBLE), (99999999999999999999999999999999999999, 4, '', -0.0), "
    "(-5, NULL, 'z', NULL)) v(h, u, s, x)"
)


def _read(con: Any, sql: str) -> tuple[pa.Table, pa.Table]:
    """DuckDB's Arrow read of ``sql`` and the rows read with the schema it gave."""
    relation = con.sql(sql)
    arrow = relation.to_arrow_table()
    schema = readable(relation.types, arrow.schema)
    assert schema is not None
    con.execute(sql)
    with warnings.catch_warnings():  # DuckDB's note that its Arrow read copies the rows
        warnings.simplefilter("ignore", UserWarning)
        return arrow, fetched(con, schema, con.to_arrow_table)


def _same(a: pa.Table, b: pa.Table) -> None:
    assert a.schema == b.schema
    assert repr(a.to_pylist()) == repr(b.to_pylist())  # nan, -0.0 and 39 digits as written


def test_rows_read_as_the_arrow_read_for_every_type_admitted() -> None:
    con = duckdb.connect()
    arrow, rows = _read(con, f"SELECT {COLUMNS} FROM ({ROWS})")
    _same(arrow, rows)
    assert arrow.column("h").to_pylist()[0] > 10**38  # written as DuckDB writes it
    empty = f"SELECT {COLUMNS} FROM ({ROWS}) WHERE u > 100"
    _same(*_read(con, empty))


@pytest.mark.parametrize("count", [SMALL - 1, SMALL, SMALL + 1, 3 * SMALL])
def test_a_result_at_and_past_small_rows_reads_the_same(count: int) -> None:
    con = duckdb.connect()
    sql = f"SELECT i::HUGEINT * 1000000 AS h, 'k' || i AS s FROM range({count}) r(i) ORDER BY i"
    arrow, rows = _read(con, sql)
    _same(arrow, rows)


def test_other_types_are_not_read_as_rows() -> None:
    con = duckdb.connect()
    for sql in (
        "SELECT DATE '2020-01-01' AS d",
        "SELECT [1, 2] AS l",
        "SELECT 1.5::DECIMAL(10,2) AS d",
        "SELECT 1::UHUGEINT AS u",
        "SELECT 1::FLOAT AS f",
        "SELECT 'a'::BLOB AS b",
    ):
        relation = con.sql(sql)
        assert readable(relation.types, relation.to_arrow_table().schema) is None, sql


def _rows_read(monkeypatch: pytest.MonkeyPatch) -> list[pa.Schema]:
    seen: list[pa.Schema] = []
    original = duckdb_engine.fetched

    def spied(con: Any, schema: pa.Schema, arrow: Any) -> pa.Table:
        seen.append(schema)
        return original(con, schema, arrow)

    monkeypatch.setattr(duckdb_engine, "fetched", spied)
    return seen


def test_a_statement_bound_before_reads_its_rows_with_the_schema_of_that_bind(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.parquet"
    table = pa.table({"u": [1, 2, 3, 3], "g": ["a", "b", "a", None], "x": [1, 2, 3, 4]})
    pq.write_table(table, path)
    read = _rows_read(monkeypatch)
    text = 'SELECT "g", COUNT(*) AS n, SUM("x") AS s, MIN(HASH(SALT, "u")) AS h FROM t GROUP BY "g"'
    query = sqlglot.parse_one(text.replace("SALT", "$salt"), read="duckdb")
    engine = DuckDBEngine({"t": str(path)})

    def literal(salt: int) -> Any:
        return sqlglot.parse_one(text.replace("SALT", str(salt)) + ' ORDER BY "g"', read="duckdb")

    def run(salt: int) -> pa.Table:
        return engine.prepare(query, salt=salt).run(None).sort_by([("g", "ascending")])

    try:
        for salt in (2**40 + 1, 2**40 + 2, 2**40 + 3):  # bound once, then read as rows
            _same(run(salt), engine.execute(literal(salt)))
        assert len(read) == 2
        # the file changes (x becomes a double): bound again, and the schema of the new bind is
        # the one read, even when a bind was prepared and never run in between
        pq.write_table(table.set_column(2, "x", pa.array([0.5, 1.5, 2.5, 3.5])), path)
        engine.prepare(query, salt=2**40)  # bound, never run: nothing remembered
        for salt in (2**40 + 4, 2**40 + 5):  # read by DuckDB's Arrow read
            new = run(salt)
            _same(new, engine.execute(literal(salt)))
            assert new.schema.field("s").type == pa.float64()
        assert len(read) == 2
        engine.connection.execute("SET threads = 1")  # the catalog moves: bound and run again
        run(2**40 + 6)
        _same(run(2**40 + 7), engine.execute(literal(2**40 + 7)))
        assert len(read) == 3
        assert read[-1].field("s").type == pa.float64()
    finally:
        engine.close()


def test_integers_within_64_bits_read_as_the_arrow_read_at_each_edge() -> None:
    # read through int64 when every value fits (HUGEINT, DECIMAL(38,0), DECIMAL(19,0)); one
    # value past either edge, or a DECIMAL(18,0) (fewer digits than int64), keeps each value's
    # own conversion — the same table either way
    con = duckdb.connect()
    edges = ("-9223372036854775808", "9223372036854775807", "0", "-1", "NULL")
    for extra in ("", ", (9223372036854775808)", ", (-9223372036854775809)"):
        values = ", ".join(f"({v})" for v in edges) + extra
        sql = (
            "SELECT v::HUGEINT AS h, v::DECIMAL(38,0) AS d38, v::DECIMAL(19,0) AS d19, "
            f"(v % 1000000000000000000)::DECIMAL(18,0) AS d18 FROM (VALUES {values}) t(v)"
        )
        arrow, rows = _read(con, sql)
        _same(arrow, rows)
        assert len(rows) == len(edges) + (1 if extra else 0)
