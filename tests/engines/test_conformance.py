"""One conformance suite for every engine: the fake one, DuckDB, Spark and PostgreSQL.

Two parts:

1. **The contract** (``veil.engines.base.Engine``): every member exists and behaves — an
   unknown table is a ``SchemaError`` from ``schema``, ``data_version`` and ``execute``;
   ``check`` refuses a name or type error without running anything; ``data_version`` is
   stable while the data is, and changes when it changes; ``close`` is idempotent; engine
   errors are veil errors.
2. **The same pre-noise aggregates.** A query is compiled once (by a DuckDB session's
   ``explain``: the plan is engine-neutral) and its lowered SQL run on every engine with the
   same salt (``system.prenoise.exact``). Where bounding drops nothing, the exact integer
   statistics — counts, fixed-point sums, sums of squares, quantile bucket counts, per group
   — must be *identical* to DuckDB's, over NULLs, NaN, ±inf, huge and subnormal values, unknown
   and public keys, bins and WHERE conditions. Where bounding drops rows, the engines keep
   different rows (their keyed hashes differ), so what must be equal is what bounding fixes:
   the number of rows and groups each unit keeps.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot
from sqlglot import exp

import veil
from system.prenoise import Exact, exact, session_aggregate
from veil.compile import dialect, lower, to_sql
from veil.compile.dialect import DIALECTS
from veil.engines.base import Engine
from veil.errors import SchemaError, VeilError
from veil.plan.nodes import Aggregate

_FILES = itertools.count()


def _people() -> pa.Table:
    """One row per unit (so bounding drops nothing), with values that break naive arithmetic."""
    xs: list[float | None] = [
        None, math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, -0.0, 0.1, 0.2,
        0.30000000000000004, 2.5, -2.5, 3.5, 1e16, 4.999999999999999, 5.0, -5.0,
    ]  # fmt: skip
    xs += [((i * 37) % 23) / 4 - 3 for i in range(60)]
    n = len(xs)
    return pa.table(
        {
            "uid": pa.array(range(n), pa.int64()),
            "g": pa.array([None if i % 13 == 5 else "abc"[i % 3] for i in range(n)]),
            "k": pa.array([None if i % 17 == 3 else i % 4 for i in range(n)], pa.int64()),
            "x": pa.array(xs, pa.float64()),
            "w": pa.array(["target" if i % 3 else "other" for i in range(n)]),
            "d": pa.array([(18262 + i % 3) for i in range(n)], pa.int32()).cast(pa.date32()),
        }
    )


def _bounded() -> pa.Table:
    """Every unit has 3 groups of 4 rows: with max_groups=2 and max_rows_per_group=3 each unit
    keeps exactly 2 groups of 3 rows, whichever rows its engine's hash picks."""
    rows = [
        (u, "abc"[(u + j) % 3], float((u * 7 + j * 3 + r) % 11) - 2.0)
        for u in range(40)
        for j in range(3)
        for r in range(4)
    ]
    uid, g, x = zip(*rows, strict=True)
    return pa.table(
        {"uid": pa.array(uid, pa.int64()), "g": pa.array(g), "x": pa.array(x, pa.float64())}
    )


@dataclass
class Built:
    """An engine over table ``t`` and a way to change ``t``'s data (or None)."""

    engine: Engine
    mutate: Callable[[], None] | None


def _fake(table: pa.Table, tmp: Path) -> Built:
    from veil.engines.fake import FakeEngine

    engine = FakeEngine({"t": table})

    def mutate() -> None:
        engine.version = "v2"

    return Built(engine, mutate)


def _duckdb(table: pa.Table, tmp: Path) -> Built:
    from veil.engines.duckdb import DuckDBEngine

    path = tmp / f"t{next(_FILES)}.parquet"
    pq.write_table(table, path)

    def mutate() -> None:
        time.sleep(0.01)
        pq.write_table(table.slice(1), path)

    return Built(DuckDBEngine({"t": path}), mutate)


def _spark(table: pa.Table, tmp: Path) -> Built:
    from spark_support import spark_session
    from veil.engines.spark import SparkEngine

    path = tmp / f"t{next(_FILES)}.parquet"
    pq.write_table(table, path)
    return Built(SparkEngine(spark_session(), {"t": str(path)}), None)


def _postgres(table: pa.Table, tmp: Path) -> Built:
    import postgres_support
    from veil.engines.postgres import PostgresEngine

    qualified = postgres_support.load(table)

    def mutate() -> None:
        con = postgres_support.connection()
        con.execute(f"DELETE FROM {qualified} WHERE uid = 0")

    return Built(PostgresEngine(postgres_support.PG_URL, {"t": qualified}), mutate)


ENGINES = [
    pytest.param(_fake, id="fake"),
    pytest.param(_duckdb, id="duckdb"),
    pytest.param(_spark, id="spark", marks=pytest.mark.spark),
    pytest.param(_postgres, id="postgres", marks=pytest.mark.postgres),
]

Build = Callable[[pa.Table, Path], Built]


@pytest.fixture
def built(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Built]:
    build: Build = request.param
    b = build(_people(), tmp_path)
    yield b
    b.engine.close()


def _tree(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, read="duckdb")


# -- 1. the contract ------------------------------------------------------------------------


@pytest.mark.parametrize("built", ENGINES, indirect=True)
def test_every_engine_implements_the_whole_protocol(built: Built) -> None:
    engine = built.engine
    assert isinstance(engine, Engine)
    assert engine.dialect in DIALECTS
    assert tuple(engine.tables) == ("t",)
    assert engine.schema("t").names == ["uid", "g", "k", "x", "w", "d"]
    assert engine.schema("t").field("x").type == pa.float64()
    assert engine.schema("t").field("uid").type == pa.int64()


@pytest.mark.parametrize("built", ENGINES, indirect=True)
def test_an_unknown_table_is_a_schema_error_everywhere(built: Built) -> None:
    engine = built.engine
    with pytest.raises(SchemaError, match="nobody"):
        engine.schema("nobody")
    with pytest.raises(SchemaError, match="nobody"):
        engine.data_version("nobody")
    with pytest.raises(SchemaError, match="nobody"):
        engine.check(_tree("SELECT COUNT(*) FROM nobody"))
    with pytest.raises(SchemaError, match="nobody"):
        engine.execute(_tree("SELECT COUNT(*) FROM nobody"))


@pytest.mark.parametrize("built", ENGINES, indirect=True)
@pytest.mark.parametrize(
    "sql",
    [
        pytest.param('SELECT COUNT(*) FROM t WHERE "nope" > 1', id="unknown-column"),
        pytest.param('SELECT COUNT(*) FROM t WHERE "d" - "w" > 1', id="date-minus-text"),
    ],
)
def test_check_refuses_name_and_type_errors_without_running_anything(
    built: Built, sql: str
) -> None:
    engine = built.engine
    with pytest.raises(SchemaError):
        engine.check(_tree(sql))
    calls = getattr(engine, "calls", None)
    assert calls in (None, [])  # the fake engine records runs: check ran none


@pytest.mark.parametrize("built", ENGINES, indirect=True)
def test_check_accepts_a_lowered_query_and_execute_errors_are_veil_errors(built: Built) -> None:
    engine = built.engine
    engine.check(_tree('SELECT "g", COUNT(*) AS n FROM t GROUP BY "g"'))
    with pytest.raises(VeilError):
        engine.execute(_tree('SELECT "nope" FROM t'))


@pytest.mark.parametrize("built", ENGINES, indirect=True)
def test_data_version_is_stable_and_changes_with_the_data(built: Built) -> None:
    engine = built.engine
    first = engine.data_version("t")
    assert engine.data_version("t") == first
    if built.mutate is None:
        return  # Spark: covered by test_spark.py's file-change test
    built.mutate()
    # PostgreSQL: counters flushed within about a second; the deadline is only a safety net
    deadline = time.monotonic() + 120
    while engine.data_version("t") == first and time.monotonic() < deadline:
        time.sleep(0.2)
    assert engine.data_version("t") != first


@pytest.mark.parametrize("build", ENGINES)
def test_close_is_idempotent(build: Build, tmp_path: Path) -> None:
    engine = build(_people(), tmp_path).engine
    engine.close()
    engine.close()


# -- 2. the same pre-noise aggregates -------------------------------------------------------

BUDGET = veil.Budget(epsilon=100, delta=1e-3)


def _compile(table: pa.Table, sql: str, **options: Any) -> Aggregate:
    session = veil.Session.local({"t": table}, privacy_unit="uid", budget=BUDGET)
    return session_aggregate(session, sql, **options)


def _stats(e: Exact) -> tuple[dict[Any, dict[str, int]], dict[str, dict[Any, dict[int, int]]]]:
    return e.stats, e.buckets


PARITY = [
    pytest.param(
        "SELECT COUNT(*), COUNT(x), SUM(x), AVG(x), VARIANCE(x) FROM t",
        {"bounds": {"x": (-10, 10)}},
        id="moments",
    ),
    pytest.param(
        "SELECT SUM(x), STDDEV(x) FROM t", {"bounds": {"x": (-1e100, 1e100)}}, id="huge-bounds"
    ),
    pytest.param(
        "SELECT SUM(x) FROM t", {"bounds": {"x": (0, 2.0**40)}}, id="subnormal-times-small-step"
    ),
    pytest.param(
        "SELECT g, COUNT(*), SUM(x) FROM t GROUP BY g",
        {"bounds": {"x": (-4, 4)}, "delta": 1e-6},
        id="unknown-string-keys",
    ),
    pytest.param(
        "SELECT k, d, COUNT(*), AVG(x) FROM t GROUP BY k, d",
        {"bounds": {"x": (-4, 4)}, "delta": 1e-6},
        id="unknown-integer-and-date-keys",
    ),
    pytest.param(
        "SELECT k, COUNT(*), SUM(x) FROM t GROUP BY k",
        {"bounds": {"x": (-4, 4)}, "domains": {"k": [0, 2, 99, None]}},
        id="public-integer-keys",
    ),
    pytest.param(
        "SELECT g, COUNT(*) FROM t GROUP BY g",
        {"domains": {"g": ["a", "zz", None]}},
        id="public-string-keys",
    ),
    pytest.param(
        "SELECT BIN(x, -5, 0, 0.25, 5) AS b, COUNT(*), SUM(x) FROM t GROUP BY b",
        {"bounds": {"x": (-5, 5)}},
        id="bins",
    ),
    pytest.param(
        "SELECT MEDIAN(x), QUANTILE(x, 0.9), MIN(x) FROM t",
        {"bounds": {"x": (-6, 6)}},
        id="quantile-buckets",
    ),
    pytest.param(
        "SELECT g, MEDIAN(x) FROM t GROUP BY g",
        {"bounds": {"x": (-6, 6)}, "domains": {"g": ["a", "b", "c"]}},
        id="grouped-quantile-buckets",
    ),
    pytest.param(
        "SELECT COUNT(*), SUM(x) FROM t WHERE w = 'target' AND x > 0 AND g IN ('a', 'b')",
        {"bounds": {"x": (0, 8)}},
        id="where",
    ),
    pytest.param(
        "SELECT COUNT(*) FROM t WHERE w LIKE 'tar%' OR d BETWEEN DATE '2020-01-02' AND "
        "DATE '2020-01-02' OR k IS NULL",
        {},
        id="where-like-between-null",
    ),
    pytest.param("SELECT COUNT(DISTINCT uid) FROM t", {}, id="count-distinct"),
    pytest.param(
        "SELECT g, MODE(k), COUNT(*) FROM t GROUP BY g",
        {"bounds": {"k": (1, 2)}, "domains": {"g": ["a", "b", "c"]}},
        id="grouped-mode-candidates",
    ),
    pytest.param(
        "SELECT k, MODE(g) FROM t GROUP BY k",
        {"domains": {"k": [0, 1, 2, 3], "g": ["b", "zz", "a"]}},
        id="grouped-mode-listed-candidates",
    ),
    pytest.param(
        "SELECT g, COUNT(*), SUM(x) FROM t GROUP BY g",
        {
            "bounds": {"x": (-4, 4)},
            "domains": {"g": ["a", "b", "c"]},
            "max_groups": 2,
            "max_rows_per_group": 3,
        },
        id="limits-above-one-that-drop-nothing",
    ),
]


@pytest.mark.parametrize("build", ENGINES)
@pytest.mark.parametrize(("sql", "options"), PARITY)
def test_the_pre_noise_aggregates_are_the_same_as_duckdbs(
    build: Build, sql: str, options: dict[str, Any], tmp_path: Path
) -> None:
    table = _people()
    agg = _compile(table, sql, epsilon=1, **options)
    reference = exact(_duckdb(table, tmp_path).engine, agg)
    engine = build(table, tmp_path).engine
    try:
        got = exact(engine, agg)
    finally:
        engine.close()
    assert reference.stats, "the reference has no group: the case tests nothing"
    assert _stats(got) == _stats(reference)


MODE_OPTIONS = {"bounds": {"x": (-6, 6), "k": (1, 2)}, "domains": {"g": ["a", "b", None]}}
TOGETHER = [
    pytest.param(
        "SELECT MEDIAN(x), QUANTILE(x, 0.9), MIN(x), COUNT(*), SUM(x) FROM t",
        {"bounds": {"x": (-6, 6)}},
        id="global",
    ),
    pytest.param(
        "SELECT g, MEDIAN(x), MAX(k), COUNT(*), AVG(x) FROM t GROUP BY g",
        {"bounds": {"x": (-6, 6), "k": (0, 3)}, "delta": 1e-6},
        id="unknown-keys-with-a-null-group",
    ),
    pytest.param(
        "SELECT g, d, MEDIAN(x), MODE(k) FROM t GROUP BY g, d",
        {**MODE_OPTIONS, "delta": 1e-6},
        id="two-keys-and-a-mode",
    ),
    pytest.param(
        "SELECT MEDIAN(x) FROM t WHERE x > 100",
        {"bounds": {"x": (-6, 6)}},
        id="no-rows",
    ),
    pytest.param(  # x's three quantiles share one cell column; k's has its own
        "SELECT g, MIN(x), MAX(x), MEDIAN(x), MEDIAN(k) FROM t GROUP BY g",
        {"bounds": {"x": (-6, 6), "k": (0, 3)}, "domains": {"g": ["a", "b", None]}},
        id="shared-cells",
    ),
]


@pytest.mark.parametrize("build", ENGINES)
@pytest.mark.parametrize(("sql", "options"), TOGETHER)
def test_the_one_statement_gives_the_statistics_and_cells_of_the_separate_ones(
    build: Build, sql: str, options: dict[str, Any], tmp_path: Path
) -> None:
    """``Lowered.together`` (the statement the Session runs: one scan, GROUPING SETS) split
    into its parts equals ``main`` and the quantile statements run one by one on the same
    engine with the same salt — every group, statistic, cell and count, NULL groups included;
    and with rows dropped by bounding too (the same salt keeps the same rows)."""
    engine = build(_people(), tmp_path).engine
    try:
        agg = _compile(_people(), sql, epsilon=1, **options)
        apart = exact(engine, agg)
        together = exact(engine, agg, together=True)
        assert _stats(together) == _stats(apart)
        if "x > 100" not in sql:  # the no-rows case has no cell to compare
            assert any(together.buckets.values()), "no cell: the case tests nothing"
    finally:
        engine.close()
    bounded = build(_bounded(), tmp_path).engine
    try:
        agg = _compile(_bounded(), "SELECT g, MEDIAN(x), COUNT(*) FROM t GROUP BY g", epsilon=1,
                       bounds={"x": (0, 5)}, domains={"g": ["a", "b", "c"]}, max_groups=2,
                       max_rows_per_group=3)  # fmt: skip
        for salt in (1, 2**62 + 12345):
            apart = exact(bounded, agg, salt=salt)
            assert _stats(exact(bounded, agg, salt=salt, together=True)) == _stats(apart)
            assert sum(s["__n"] for s in apart.stats.values()) == 40 * 2 * 3
    finally:
        bounded.close()


@pytest.mark.parametrize("build", ENGINES)
def test_bounding_keeps_the_same_number_of_rows_and_groups_per_unit(
    build: Build, tmp_path: Path
) -> None:
    """Each unit has 3 groups of 4 rows; with max_groups=2 and max_rows_per_group=3 every
    engine keeps 2 groups × 3 rows of each unit — different rows (the hashes differ), the same
    counts, every sum within its bounds."""
    table = _bounded()
    sql = "SELECT g, COUNT(*), COUNT(DISTINCT uid), SUM(x) FROM t GROUP BY g"
    options = {"bounds": {"x": (0, 5)}, "domains": {"g": ["a", "b", "c"]}}
    agg = _compile(table, sql, epsilon=1, max_groups=2, max_rows_per_group=3, **options)
    engine = build(table, tmp_path).engine
    try:
        for salt in (1, 2**62 + 12345):
            got = exact(engine, agg, salt=salt)
            rows = sum(s["__n"] for s in got.stats.values())
            assert rows == 40 * 2 * 3
            units = [m.name for m in agg.measurements if m.statistic == "count_units"]
            if units:
                assert sum(s[units[0]] for s in got.stats.values()) == 40 * 2
            for m in agg.measurements:
                if m.statistic == "sum":
                    for s in got.stats.values():
                        assert abs(s[m.name]) <= s["__n"] * m.limit
    finally:
        engine.close()


ROW_LEVEL = [
    pytest.param(
        "SELECT g, COUNT(*), SUM(x), MEDIAN(x) FROM t GROUP BY g",
        {"bounds": {"x": (-6, 6)}, "domains": {"g": ["a", "zz", None]}},
        id="strings-with-null-and-a-fine-quantile",
    ),
    pytest.param(
        "SELECT k, COUNT(*), AVG(x), QUANTILE(k, 0.5) AS q, MODE(k) FROM t GROUP BY k",
        {"bounds": {"x": (-4, 4), "k": (0, 3)}, "domains": {"k": [0, 1, 2, 99]}},
        id="integers-as-a-range-coarse-quantile-and-mode",
    ),
    pytest.param(
        "SELECT g, k, COUNT(*) FROM t GROUP BY g, k",
        {"domains": {"g": ["b", "c"]}, "delta": 1e-6},
        id="a-public-key-beside-an-unknown-one",
    ),
]


def _in_domains(table: pa.Table, domains: dict[str, list[Any]]) -> pa.Table:
    """The rows of ``table`` whose value is listed in every declared domain (NULL if listed)."""
    kept = [r for r in table.to_pylist() if all(r[c] in vs for c, vs in domains.items())]
    return pa.Table.from_pylist(kept, schema=table.schema)


@pytest.mark.parametrize("build", ENGINES)
@pytest.mark.parametrize(("sql", "options"), ROW_LEVEL)
def test_without_a_unit_a_domain_kept_after_grouping_gives_the_groups_of_its_rows_alone(
    build: Build, sql: str, options: dict[str, Any], tmp_path: Path
) -> None:
    """With no privacy unit nothing is bounded, so the lowering keeps a declared domain after
    the grouping (``HAVING``) instead of filtering the rows: every statistic, cell and count
    must be those of the same query over the table holding only the domain's rows (where the
    two forms cannot differ) — on every engine, the one statement and the separate ones."""
    table = _people()
    filtered = _in_domains(table, options["domains"])
    assert 0 < filtered.num_rows < table.num_rows  # rows on both sides of the domain
    session = veil.Session.local({"t": table}, budget=BUDGET)  # no privacy unit
    agg = session_aggregate(session, sql, epsilon=1, **options)
    lowered = lower(agg, dialect("duckdb"), salt=1)
    assert "HAVING" in to_sql(lowered.main, "duckdb")  # the case takes the path under test
    engine, reference = build(table, tmp_path).engine, build(filtered, tmp_path).engine
    try:
        for together in (False, True) if lowered.together is not None else (False,):
            got = exact(engine, agg, together=together)
            want = exact(reference, agg, together=together)
            assert want.stats, "the reference has no group: the case tests nothing"
            assert _stats(got) == _stats(want)
    finally:
        engine.close()
        reference.close()
