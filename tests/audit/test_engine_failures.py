"""Audit: a failure of the engine is not a free side channel on the private data.

An analyst controls the WHERE condition. If its evaluation can fail on some rows only (a CAST
of a string column, an integer overflow, a division by zero, a bad regular expression taken from
a column), the *fact* that the query failed, and the engine's message (which quotes the
offending value), depend on private rows. The rules checked here:

- row conditions are total: a row on which the condition cannot be evaluated is excluded, as
  if the condition were false, so a valid query does not fail on the values;
- once the engine has been asked to read private data, a failure keeps the charge and the
  error carries no text from the engine (no value, no SQL with the secret salt).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from sqlglot import exp

import veil
from support import SeededSource
from veil.engines.fake import FakeEngine
from veil.errors import QueryFailedError, SchemaError, UnsupportedQueryError
from veil.sql import parse

SECRET = "Zyx-private-value"


def table() -> pa.Table:
    return pa.table(
        {
            "uid": [1, 2, 3, 4, 5, 6],
            "name": ["12", "7", SECRET, "3", "8", "9"],
            "age": [30, 40, 50, 60, 70, 80],
            "big": [1, 2, 3, 2**62, 5, 6],
            "pattern": ["a", "b", "(", "c", "d", "e"],
        }
    )


def session() -> veil.Session:
    return veil.Session.local(
        {"t": table()}, privacy_unit="uid", budget=veil.Budget(epsilon=1), source=SeededSource(7)
    )


WHERE_FAILING_ON_ONE_ROW = (
    "CAST(name AS INTEGER) > 0",  # fails on one string
    "CASE WHEN age = 50 THEN CAST(name AS INTEGER) ELSE 1 END = 1",  # fails iff a row exists
    "CAST(name AS DATE) > DATE '2020-01-01'",
    "big * 4 > 0",  # BIGINT overflow on one row
    "big + big > 0",
    "age / (age - 50) > 0",  # division by zero on one row
    "age % (age - 50) = 0",
    "age // (age - 50) > 0",  # integer division by zero on one row
    "name = 12",  # an implicit cast (Spark's ANSI mode raises on it)
    "YEAR(CAST(name AS DATE)) > 2000",
)


@pytest.mark.parametrize("where", ["YEAR(name) > 2000", "name > DATE '2020-01-01'"])
def test_a_type_error_is_refused_before_anything_is_charged(where: str) -> None:
    s = session()
    with pytest.raises(SchemaError, match="does not fit the table's columns"):
        s.sql(f"SELECT COUNT(*) AS n FROM t WHERE {where}", epsilon="0.25")
    assert s.remaining() == veil.Budget(epsilon=1)


@pytest.mark.parametrize("where", WHERE_FAILING_ON_ONE_ROW)
def test_a_row_condition_that_fails_on_some_rows_excludes_them_and_charges(where: str) -> None:
    s = session()
    r = s.sql(f"SELECT COUNT(*) AS n FROM t WHERE {where}", epsilon="0.25")
    assert r.cost == veil.Budget(epsilon="0.25")
    assert s.remaining() == veil.Budget(epsilon="0.75")


@pytest.mark.parametrize(
    "where", ["REGEXP_MATCHES(name, pattern)", "name LIKE pattern", "name ILIKE pattern"]
)
def test_a_pattern_read_from_a_column_is_refused_before_anything_is_charged(where: str) -> None:
    s = session()
    with pytest.raises(UnsupportedQueryError, match="pattern must be a literal"):
        s.sql(f"SELECT COUNT(*) AS n FROM t WHERE {where}", epsilon="0.25")
    assert s.remaining() == veil.Budget(epsilon=1)


def test_a_failing_cast_drops_exactly_the_rows_it_fails_on() -> None:
    from veil.compile import Context, compile_plan, dialect, lower
    from veil.engines.duckdb import DuckDBEngine
    from veil.plan.tree import aggregate_of

    engine = DuckDBEngine({"t": table()})
    plan = parse(
        "SELECT COUNT(*) AS n FROM t WHERE CAST(name AS INTEGER) > 5",
        {"t": engine.schema("t")},
        privacy_unit="uid",
    )
    agg = aggregate_of(compile_plan(plan, Context(budget=veil.Budget(epsilon=1))))
    out = engine.execute(lower(agg, dialect("duckdb"), salt=1).main).to_pylist()
    assert out[0]["__n"] == 4  # 12, 7, 8, 9; the secret string is excluded, not an error


def test_an_engine_failure_after_reading_data_keeps_the_charge_and_hides_the_message() -> None:
    engine = FakeEngine(
        {"t": table()},
        fail=SchemaError(f"Conversion Error: could not convert string {SECRET!r} to INT32"),
    )
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "t", veil.Budget(epsilon=1))
    s = veil.Session(
        engine, ledger=ledger, analyst="alice", dataset="t", privacy_unit="uid", source=None
    )
    with pytest.raises(QueryFailedError, match="the charge stays") as info:
        s.sql("SELECT COUNT(*) FROM t", epsilon="0.25")
    assert len(engine.calls) == 1
    assert s.remaining() == veil.Budget(epsilon="0.75")
    chain: list[BaseException] = []
    e: BaseException | None = info.value
    while e is not None and e not in chain:
        chain.append(e)
        e = e.__cause__ or e.__context__
    assert all(SECRET not in str(x) and "salt" not in str(x).lower() for x in chain)
    assert len(chain) == 1  # no engine exception hangs off the error


def test_a_query_refused_before_the_engine_reads_data_is_not_charged() -> None:
    s = session()
    with pytest.raises(veil.errors.SchemaError, match="unknown column"):
        s.sql("SELECT COUNT(*) FROM t WHERE nope > 1", epsilon="0.25")
    assert s.remaining() == veil.Budget(epsilon=1)


@pytest.fixture(scope="module")
def spark_veil(tmp_path_factory: pytest.TempPathFactory) -> veil.Session:
    import pyarrow.parquet as pq

    from spark_support import spark_session

    spark = spark_session()
    path = tmp_path_factory.mktemp("audit") / "t.parquet"
    pq.write_table(table(), path)
    return veil.Session.spark(
        spark, {"t": str(path)}, privacy_unit="uid", budget=veil.Budget(epsilon=100)
    )


@pytest.mark.spark
@pytest.mark.parametrize("where", WHERE_FAILING_ON_ONE_ROW)
def test_on_spark_a_row_condition_that_fails_on_some_rows_is_answered_and_charged(
    spark_veil: veil.Session, where: str
) -> None:
    before = spark_veil.remaining()
    r = spark_veil.sql(f"SELECT COUNT(*) AS n FROM t WHERE {where}", epsilon="0.25")
    assert r.cost == veil.Budget(epsilon="0.25")
    assert spark_veil.remaining() == veil.Budget(epsilon=before.epsilon - Fraction(1, 4))


def test_a_null_sum_of_a_non_empty_group_is_an_overflow_and_is_not_released() -> None:
    """Spark without ANSI mode returns NULL for an overflowing DECIMAL(38) sum: read as 0 it
    would release a wrong, unbounded-sensitivity value; it must fail (charged) instead."""

    def overflowed(query: object) -> pa.Table:
        out = FakeEngine({"t": table()}).execute(query)  # type: ignore[arg-type]
        sums = [c for c in out.column_names if c.startswith("__m")]
        for name in sums:
            i = out.column_names.index(name)
            out = out.set_column(i, name, pa.nulls(out.num_rows, out.schema.field(i).type))
        return out

    engine = FakeEngine({"t": table()}, handler=overflowed)
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "t", veil.Budget(epsilon=1))
    s = veil.Session(engine, ledger=ledger, analyst="alice", dataset="t", privacy_unit="uid")
    with pytest.raises(QueryFailedError, match="the charge stays"):
        s.sql("SELECT SUM(age) AS s FROM t", epsilon="0.5", bounds={"age": (0, 100)})
    assert s.remaining() == veil.Budget(epsilon="0.5")


@pytest.mark.parametrize("huge", [False, True])
def test_a_wrapping_engine_sum_too_large_to_certify_is_recomputed_exactly_not_failed(
    huge: bool,
) -> None:
    """On an engine whose BIGINT sum wraps (Spark, ANSI off), a sum is certified exact only
    while rows·limit < 2^63. A group beyond that (one unit can tip a group over it) must not
    make the query fail: the same statement runs again with DECIMAL(38, 0) sums, same salt."""
    from veil.compile.measure import FIXED_POINT_LIMIT

    # a sum's per-row limit lies in (2^29, 2^30]: 2^34 rows always exceed 2^63 / limit
    too_many = 1 << 34
    assert too_many * (FIXED_POINT_LIMIT // 2) >= 1 << 63

    def huge_group(query: exp.Expression) -> pa.Table:
        # run the Spark-lowered tree on DuckDB (its hash function named as DuckDB's)
        con = duckdb.connect()
        con.register("t", table())
        sql = query.sql(dialect="duckdb").replace("XXHASH64(", "HASH(")
        out: pa.Table = con.sql(sql).to_arrow_table()
        con.close()
        wide = "DECIMAL(38, 0)" in query.sql(dialect="spark")
        i = out.column_names.index("__n")
        rows = [too_many if huge and not wide else n for n in out.column("__n").to_pylist()]
        return out.set_column(i, "__n", pa.array(rows, out.schema.field(i).type))

    engine = FakeEngine({"t": table()}, handler=huge_group, dialect="spark")
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "t", veil.Budget(epsilon=1))
    s = veil.Session(engine, ledger=ledger, analyst="alice", dataset="t", privacy_unit="uid")
    r = s.sql("SELECT COUNT(*) AS n, SUM(age) AS s FROM t", epsilon="0.5", bounds={"age": (0, 100)})
    assert len(r.rows) == 1
    assert len(engine.calls) == (2 if huge else 1)
    assert ("DECIMAL(38, 0)" in engine.calls[-1].sql(dialect="spark")) is huge
    assert s.remaining() == veil.Budget(epsilon="0.5")


@pytest.mark.spark
@pytest.mark.parametrize(
    # not overflow: DuckDB's optimizer may fold big * 4 > 0 to big > 0 (true), Spark gives NULL
    "where",
    ["CAST(name AS INTEGER) > 5", "name = 12", "age // (age - 50) >= 0"],
)
def test_duckdb_and_spark_leave_out_the_same_rows_when_a_condition_fails_on_them(
    tmp_path: Path, where: str
) -> None:
    import pyarrow.parquet as pq

    from spark_support import spark_session
    from veil.compile import Context, compile_plan, dialect, lower
    from veil.engines.duckdb import DuckDBEngine
    from veil.engines.spark import SparkEngine
    from veil.plan.tree import aggregate_of

    path = tmp_path / "t.parquet"
    pq.write_table(table(), path)
    duck = DuckDBEngine({"t": str(path)})
    spark = SparkEngine(spark_session(), {"t": str(path)})
    plan = parse(
        f"SELECT COUNT(*) AS n FROM t WHERE {where}", {"t": duck.schema("t")}, privacy_unit="uid"
    )
    agg = aggregate_of(compile_plan(plan, Context(budget=veil.Budget(epsilon=1))))
    counts = [
        e.execute(lower(agg, dialect(e.dialect), salt=9).main).column("__n").to_pylist()
        for e in (duck, spark)
    ]
    assert counts[0] == counts[1]
