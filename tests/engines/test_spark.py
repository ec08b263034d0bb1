"""The Spark engine: sources, schema, data version, execution and parity with DuckDB.

Queries here are hand-written sqlglot trees (what the lowering module produces); the session-level
tests that run whole DP queries on both engines are in ``test_spark_session.py``.
"""

from __future__ import annotations

import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot
from sqlglot import exp

from spark_support import spark_session
from veil.engines.base import Engine
from veil.errors import InvalidArgumentError, MissingDependencyError, SchemaError

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small Parquet table with awkward floats (0.1 + 0.2 style) and a NULL."""
    n = 600
    table = pa.table(
        {
            "user_id": pa.array([i // 3 for i in range(n)], pa.int64()),
            "state": pa.array([("CA", "TX", "NY", "WY")[(i * 7) % 4] for i in range(n)]),
            "income": pa.array(
                [
                    None if i == 5 else (i * 0.1 + 0.2) * (1e5 if i % 11 == 0 else 1)
                    for i in range(n)
                ],
                pa.float64(),
            ),
        }
    )
    path = tmp_path_factory.mktemp("spark") / "people.parquet"
    pq.write_table(table, path)
    return path


def _engine(spark: Any, **tables: Any) -> Any:
    from veil.engines.spark import SparkEngine

    return SparkEngine(spark, tables)


FIXED_POINT_SUMS = """
SELECT state,
       COUNT(*) AS n,
       SUM(CAST(ROUND(LEAST(GREATEST(COALESCE(income, 0), 0), 1000) * 1024) AS DECIMAL(38, 0)))
         AS income_fp
FROM people
GROUP BY state
ORDER BY state
"""


def test_missing_pyspark_raises_an_error_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from veil.engines.spark import SparkEngine

    monkeypatch.setitem(sys.modules, "pyspark.sql", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'veil\[spark\]'"):
        SparkEngine(object(), {"t": "t.parquet"})  # type: ignore[arg-type]


def test_spark_engine_implements_the_engine_protocol(spark: Any, people: Path) -> None:
    engine = _engine(spark, people=people)
    assert isinstance(engine, Engine)
    assert engine.dialect == "spark"


def test_schema_is_an_arrow_schema_for_paths_dataframes_and_catalog_tables(
    spark: Any, people: Path, tmp_path: Path
) -> None:
    csv = tmp_path / "small.csv"
    csv.write_text("a,b\n1,x\n2,y\n")
    spark.read.parquet(str(people)).createOrReplaceTempView("veil_test_catalog_people")
    engine = _engine(
        spark,
        people=str(people),
        frame=spark.range(3),
        small=csv,
        catalog="veil_test_catalog_people",
    )
    expected = pa.schema(
        [("user_id", pa.int64()), ("state", pa.string()), ("income", pa.float64())]
    )
    assert engine.schema("people") == expected
    assert engine.schema("PEOPLE") == expected  # Spark names are case-insensitive
    assert engine.schema("catalog") == expected
    assert engine.schema("frame").names == ["id"]
    assert engine.schema("small").field("a").type == pa.string()  # CSV columns are text…
    from veil.engines.spark import SparkEngine

    declared = SparkEngine(spark, {"small": csv}, schema={"small": {"a": "INTEGER"}})
    assert declared.schema("small").field("a").type == pa.int32()  # …unless declared


def test_unknown_table_is_a_schema_error_naming_the_known_tables(spark: Any, people: Path) -> None:
    engine = _engine(spark, people=people)
    with pytest.raises(SchemaError, match=r"unknown table 'nobody'.*people"):
        engine.schema("nobody")
    with pytest.raises(SchemaError, match=r"unknown table 'nobody'"):
        engine.execute(sqlglot.parse_one("SELECT COUNT(*) FROM nobody"))


def test_a_source_of_the_wrong_type_is_refused(spark: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=r"table 't': cannot read a list on Spark"):
        _engine(spark, t=[1, 2, 3])


def test_registering_tables_does_not_replace_the_users_own_views(spark: Any, people: Path) -> None:
    spark.range(5).createOrReplaceTempView("people")
    engine = _engine(spark, people=people)
    assert engine.execute(sqlglot.parse_one("SELECT COUNT(*) AS n FROM people")).to_pylist() == [
        {"n": 600}
    ]
    assert spark.sql("SELECT COUNT(*) AS n FROM people").collect()[0]["n"] == 5
    engine.close()
    spark.catalog.dropTempView("people")


def test_execute_returns_exact_fixed_point_aggregates_as_arrow(spark: Any, people: Path) -> None:
    engine = _engine(spark, people=people)
    result = engine.execute(sqlglot.parse_one(FIXED_POINT_SUMS, read="duckdb"))
    assert result.schema.field("income_fp").type == pa.decimal128(38, 0)

    # the same arithmetic, exactly, in Python: clamp, scale by 2^10, round half away from zero
    rows = pq.read_table(people).to_pylist()
    expected: dict[str, tuple[int, int]] = {}
    for row in rows:
        value = min(max(row["income"] if row["income"] is not None else 0.0, 0.0), 1000.0)
        scaled = Decimal(value) * 1024
        fixed = int(scaled.to_integral_value(rounding="ROUND_HALF_UP"))
        n, total = expected.get(row["state"], (0, 0))
        expected[row["state"]] = (n + 1, total + fixed)
    got = {r["state"]: (r["n"], int(r["income_fp"])) for r in result.to_pylist()}
    assert got == expected


def test_the_same_tree_gives_identical_aggregates_on_duckdb_and_spark(
    spark: Any, people: Path
) -> None:
    tree = sqlglot.parse_one(FIXED_POINT_SUMS, read="duckdb")
    on_spark = _engine(spark, people=people).execute(tree)
    con = duckdb.connect()
    con.execute(f"CREATE VIEW people AS SELECT * FROM read_parquet('{people}')")
    on_duckdb = con.sql(tree.sql(dialect="duckdb")).to_arrow_table()
    assert on_spark.column("state").to_pylist() == on_duckdb.column("state").to_pylist()
    assert on_spark.column("n").to_pylist() == on_duckdb.column("n").to_pylist()
    assert [int(v) for v in on_spark.column("income_fp").to_pylist()] == [
        int(v) for v in on_duckdb.column("income_fp").to_pylist()
    ]


def test_an_overflowing_decimal_sum_comes_back_null_for_the_session_to_refuse(
    spark: Any,
) -> None:
    # ANSI mode is off (a cast failing on one value must not fail the query), so an overflow
    # is NULL; the session refuses a NULL sum of a non-empty group (tests/audit).
    engine = _engine(spark, t=spark.range(4))
    big = exp.cast(exp.Literal.number(9 * 10**37), exp.DataType.build("DECIMAL(38, 0)"))
    tree = exp.select(exp.func("SUM", big).as_("s"), exp.Count(this=exp.Star()).as_("n"))
    out = engine.execute(tree.from_("t")).to_pylist()
    assert out == [{"s": None, "n": 4}]


def test_data_version_changes_when_the_file_changes_and_only_then(
    spark: Any, tmp_path: Path
) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    engine = _engine(spark, t=str(path), other=spark.range(3))
    first = engine.data_version("t")
    assert engine.data_version("t") == first
    assert engine.data_version("other") != first
    pq.write_table(pa.table({"x": [1, 2, 3, 4, 5, 6, 7]}), path)
    assert engine.data_version("t") != first


def test_an_in_memory_dataframe_has_a_stable_data_version(spark: Any) -> None:
    engine = _engine(spark, t=spark.createDataFrame([(1, "a"), (2, "b")], "x INT, y STRING"))
    assert engine.data_version("t") == engine.data_version("t")


def test_files_that_cannot_be_stat_ed_get_a_fresh_version_each_time(
    spark: Any, people: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import veil.engines.spark as spark_engine

    engine = _engine(spark, people=people)
    monkeypatch.setattr(spark_engine, "_MAX_STATS", 0)  # as on Spark Connect / huge tables
    first = engine.data_version("people")
    assert first.startswith("uncached:")
    assert engine.data_version("people") != first


def test_a_dataframe_of_another_spark_session_is_refused(spark: Any) -> None:
    other = spark.newSession()  # same cluster, separate temporary views
    with pytest.raises(InvalidArgumentError, match=r"table 't' is a DataFrame of another Spark"):
        _engine(spark, t=other.range(3))
