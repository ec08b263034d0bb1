"""The DuckDB engine: sources, exact pre-noise aggregates, contribution bounding."""

from __future__ import annotations

import os
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlglot

from veil.accounting import Budget
from veil.compile import Context, apply_rules, dialect, lower
from veil.compile.lower import Lowered
from veil.engines.duckdb import DuckDBEngine
from veil.errors import SchemaError
from veil.plan import (
    Aggregate,
    AggregateCall,
    ColumnBounds,
    Contribution,
    Filter,
    GroupKey,
    Plan,
    Scan,
    aggregate_of,
    fields_from_arrow,
)
from veil.release.keys import group_keys, released_key

LO, HI = -10.0, 50.0


def frame(n: int = 2000, seed: int = 1, users: int | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "uid": np.arange(n) if users is None else rng.integers(0, users, n),
            "g": rng.choice(["a", "b", "c"], n),
            "x": rng.normal(20, 30, n),
        }
    )


def compile_for(
    engine: DuckDBEngine,
    aggregates: tuple[AggregateCall, ...],
    *,
    unit: str | None = None,
    contribution: Contribution | None = None,
    keys: tuple[GroupKey, ...] = (GroupKey("g", domain=("a", "b", "c")),),
    where: str | None = None,
) -> Aggregate:
    child: Plan = Scan("t", fields_from_arrow(engine.schema("t")))
    if where is not None:
        child = Filter(child, sqlglot.parse_one(where))
    plan = Aggregate(
        child,
        keys=keys,
        aggregates=aggregates,
        privacy_unit=unit,
        bounds=(ColumnBounds("x", LO, HI),),
    )
    ctx = Context(
        budget=Budget(epsilon=1, delta=Fraction(1, 10**6)),
        privacy_unit=unit,
        contribution=contribution,
        quantile_buckets=60,
    )
    return aggregate_of(apply_rules(plan, ctx))


def run(engine: DuckDBEngine, agg: Aggregate) -> tuple[Lowered, dict[str, dict[str, int]]]:
    low = lower(agg, dialect("duckdb"), salt=123)
    result = engine.execute(low.main)
    table = result.to_pydict()
    cols = dict(low.columns)
    out: dict[str, dict[str, int]] = {}
    for i, raw in enumerate(group_keys(agg, result, low.keys)):
        (key,) = released_key(agg, raw)
        out[str(key)] = {name: int(table[col][i]) for name, col in cols.items()}
        out[str(key)]["__rows"] = int(table["__n"][i])
    return low, out


ALL = (
    AggregateCall("n", "count"),
    AggregateCall("s", "sum", "x"),
    AggregateCall("v", "variance", "x"),
)


def test_pre_noise_aggregates_equal_pandas_on_clamped_data() -> None:
    df = frame()
    engine = DuckDBEngine({"t": df})
    agg = compile_for(engine, ALL, where="x > -5")
    _, got = run(engine, agg)
    ms = {m.name: m for m in agg.measurements}
    kept = df[df.x > -5].assign(c=lambda d: d.x.clip(LO, HI))
    for key, grp in kept.groupby("g"):
        stats = got[str(key)]
        assert stats["count"] == len(grp)
        s = ms["sum(x)"]
        exact_sum = float(s.step * stats["sum(x)"] + s.centre * len(grp))
        # per-row rounding to the 2^-30 grid: at most step/2 per row
        assert exact_sum == pytest.approx(grp.c.sum(), abs=len(grp) * float(s.step))
        q = ms["sum_squares(x)"]
        width = q.step * q.limit
        sq = float(width * width / (2 * q.limit) * (stats["sum_squares(x)"] + q.limit * len(grp)))
        expected = ((grp.c - float(q.centre)) ** 2).sum()
        assert sq == pytest.approx(expected, rel=1e-6)


def test_quantile_bucket_counts_equal_pandas() -> None:
    df = frame()
    engine = DuckDBEngine({"t": df})
    agg = compile_for(engine, (AggregateCall("q", "quantile", "x", Fraction(1, 2)),))
    low = lower(agg, dialect("duckdb"), salt=9)
    name, tree = low.quantiles[0]
    # one execution for both the counts and the keys: a GROUP BY's row order
    # is not stable across runs, so pairing two executions row by row is wrong
    table = engine.execute(tree)
    got = table.to_pandas()
    c = df.x.clip(LO, HI)
    buckets = np.clip(np.floor((c - LO) / ((HI - LO) / 60)), 0, 59).astype(int)
    expected = pd.DataFrame({"g": df.g, "b": buckets}).value_counts()
    identities = group_keys(agg, table, low.keys)
    for (_, row), raw in zip(got.iterrows(), identities, strict=True):
        (key,) = released_key(agg, raw)
        assert row["__c"] == expected[(key, row["__b"])]
    assert got["__c"].sum() == len(df)
    assert name == "quantile(x, 1/2)"


def test_bounding_limits_a_units_groups_and_rows() -> None:
    # one unit with 300 rows spread over three groups
    df = frame(300, users=1)
    engine = DuckDBEngine({"t": df})
    agg = compile_for(
        engine,
        (AggregateCall("n", "count"), AggregateCall("u", "count_distinct", "uid")),
        unit="uid",
        contribution=Contribution(max_groups=2, max_rows_per_group=3),
        keys=(GroupKey("g"),),
    )
    _, got = run(engine, agg)
    assert len(got) == 2
    assert all(s["count"] == 3 for s in got.values())
    assert all(s["count_units"] == 1 for s in got.values())


def test_one_row_per_unit_keeps_exactly_one_row_of_each_unit() -> None:
    df = frame(3000, users=500)
    engine = DuckDBEngine({"t": df})
    agg = compile_for(engine, (AggregateCall("n", "count"),), unit="uid")
    _, got = run(engine, agg)
    assert sum(s["count"] for s in got.values()) == df.uid.nunique()


def test_the_bounded_rows_do_not_depend_on_other_units() -> None:
    df = frame(3000, users=300)
    engine = DuckDBEngine({"t": df})
    agg = compile_for(engine, ALL, unit="uid", contribution=Contribution(2, 2))
    _, full = run(engine, agg)
    without = df[df.uid != df.uid.iloc[0]]
    _, less = run(DuckDBEngine({"t": without}), agg)
    ms = {m.name: m for m in agg.measurements}
    g, r = 2, 2
    l1 = {name: 0 for name in full["a"]}
    for key in full:
        for name, value in full[key].items():
            diff = abs(value - less.get(key, {}).get(name, 0))
            bound = r * ms[name].limit if name.startswith("sum") else r
            assert diff <= bound, (key, name)
            l1[name] += diff
    assert l1["count"] <= g * r


def test_adversarial_floats_cannot_escape_the_per_row_bound() -> None:
    base = pd.DataFrame({"uid": [1, 2, 3], "g": ["a"] * 3, "x": [1.0, 2.0, 3.0]})
    evil = pd.DataFrame(
        {
            "uid": [9, 9, 9, 9, 9],
            "g": ["a"] * 5,
            "x": [1e308, -1e308, float("inf"), float("nan"), 5e-324],
        }
    )
    both = pd.concat([base, evil], ignore_index=True)
    aggs = (AggregateCall("n", "count"), AggregateCall("s", "sum", "x"))
    e1, e2 = DuckDBEngine({"t": base}), DuckDBEngine({"t": both})
    agg = compile_for(e1, aggs, unit="uid", contribution=Contribution(1, 5))
    _, a = run(e1, agg)
    _, b = run(e2, agg)
    assert abs(b["a"]["count"] - a["a"]["count"]) <= 5
    assert abs(b["a"]["sum(x)"] - a["a"]["sum(x)"]) <= 5 * (1 << 30)


def test_parquet_and_csv_paths_are_views_and_versions_follow_the_files(tmp_path: Path) -> None:
    df = frame(100)
    pq.write_table(pa.Table.from_pandas(df), tmp_path / "t.parquet")
    df.to_csv(tmp_path / "t.csv", index=False)
    engine = DuckDBEngine({"p": tmp_path / "t.parquet", "c": str(tmp_path / "t.csv")})
    assert engine.schema("p").names == ["uid", "g", "x"]
    assert engine.schema("c").names == ["uid", "g", "x"]
    v1 = engine.data_version("p")
    assert v1 == engine.data_version("p")
    os.utime(tmp_path / "t.parquet", ns=(1, 1))
    assert engine.data_version("p") != v1
    os.utime(tmp_path / "t.parquet", ns=(2, 2))  # each call reads the file's times afresh
    assert engine.data_version("p") not in (v1, engine.data_version("c"))


def test_a_relative_path_versions_with_the_directory_it_resolves_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        pq.write_table(pa.Table.from_pandas(frame(10)), tmp_path / d / "t.parquet")
        os.utime(tmp_path / d / "t.parquet", ns=(1, 1))
    monkeypatch.chdir(tmp_path / "a")
    engine = DuckDBEngine({"t": "t.parquet"})
    first = engine.data_version("t")
    monkeypatch.chdir(tmp_path / "b")  # the same name, size and time: another file
    assert engine.data_version("t") != first
    monkeypatch.chdir(tmp_path / "a")
    assert engine.data_version("t") == first


def test_unknown_tables_and_missing_files_are_schema_errors(tmp_path: Path) -> None:
    engine = DuckDBEngine({"t": frame(10)})
    with pytest.raises(SchemaError, match="unknown table 'T'; did you mean 't'"):
        engine.schema("T")
    with pytest.raises(SchemaError, match="no file at"):
        DuckDBEngine({"t": str(tmp_path / "missing.parquet")})


def test_arrow_tables_register_without_copying_into_python() -> None:
    table = pa.Table.from_pandas(frame(10))
    engine = DuckDBEngine({"t": table})
    assert engine.schema("t").names == ["uid", "g", "x"]
    assert engine.data_version("t").startswith("object:")


def test_a_table_of_a_given_connection_is_used_in_place() -> None:
    import duckdb

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE people AS SELECT range AS uid, 'a' AS g, range * 1.5 AS x FROM range(10)"
    )
    engine = DuckDBEngine({"t": "people"}, connection=con)
    assert engine.schema("t").names == ["uid", "g", "x"]
    agg = compile_for(engine, (AggregateCall("n", "count"),))
    _, got = run(engine, agg)
    assert got["a"]["count"] == 10


def test_a_connection_tables_schema_follows_every_change_of_the_table() -> None:
    """A connection table's schema, remembered per connection for new engines (sessions) on
    it, is always the table's as it is now: a change of columns or types, a replaced table,
    a setting of the Arrow export, another table of the same columns each read their own."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE people AS SELECT range AS uid, 'a' AS g FROM range(3)")
    con.execute("CREATE TABLE others AS SELECT range AS uid, 'a' AS g FROM range(3)")

    def fresh(table: str = "people") -> pa.Schema:
        return DuckDBEngine({table: table}, connection=con).schema(table)

    def read(table: str = "people") -> pa.Schema:  # what a zero-row read says, run afresh
        return con.sql(f"SELECT * FROM {table} LIMIT 0").to_arrow_table().schema

    engine = DuckDBEngine({"people": "people"}, connection=con)
    first = engine.schema("people")
    assert first.names == ["uid", "g"]
    assert fresh() == first
    assert fresh("others") == read("others")
    con.execute("ALTER TABLE people ADD COLUMN x DOUBLE")
    assert engine.schema("people").names == ["uid", "g", "x"]
    assert fresh() == read()
    con.execute("ALTER TABLE people ALTER COLUMN uid TYPE VARCHAR")
    assert engine.schema("people").field("uid").type == pa.string()
    assert fresh() == read()
    con.cursor().execute("CREATE OR REPLACE TABLE people AS SELECT 1.5::DECIMAL(9, 2) AS uid")
    assert engine.schema("people") == read()
    assert engine.schema("people").field("uid").type == pa.decimal128(9, 2)
    con.execute("CREATE OR REPLACE TABLE people AS SELECT 1.5::DECIMAL(18, 3) AS uid")
    assert fresh().field("uid").type == pa.decimal128(18, 3)
    before = fresh("others")
    con.execute("SET arrow_large_buffer_size = true")
    assert fresh("others") == read("others")
    assert fresh("others").field("g").type == pa.large_string() != before.field("g").type
    con.execute("SET arrow_large_buffer_size = false")
    assert fresh("others") == before
    frame = pd.DataFrame({"uid": [1, 2]})
    con.register("framed", frame)
    assert fresh("framed").names == ["uid"]
    con.register("framed", frame.assign(y=[0.5, 1.5]))
    assert fresh("framed").names == ["uid", "y"]


@pytest.mark.parametrize("source", ["people", "frame", "parquet", "people_view"])
def test_a_registration_that_would_hide_a_table_of_the_callers_connection_is_refused(
    source: str, tmp_path: Any
) -> None:
    """Registering anything under the name of a table (or view) the caller's connection
    already has would make a temporary view of that name, hiding the table from every later
    query on the connection — a later session registering the table by its own name read the
    other source. Refused, nothing registered; the table by its own name, another name, and a
    name on a connection veil made all register as before."""
    import duckdb

    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range AS uid, 'a' AS g, range * 1.0 AS x FROM range(4)")
    con.execute("CREATE TABLE people AS SELECT range AS uid, 'b' AS g, 2.0 AS x FROM range(9)")
    con.execute("CREATE VIEW people_view AS SELECT * FROM people")
    path = tmp_path / "people.parquet"
    con.execute(f"COPY people TO '{path}' (FORMAT parquet)")
    sources: dict[str, Any] = {"people": "people", "frame": frame(5), "parquet": str(path)}
    sources["people_view"] = "people_view"
    for name in ("t", "T"):  # DuckDB's names are case-insensitive
        with pytest.raises(SchemaError, match="would hide it from every later query"):
            DuckDBEngine({name: sources[source]}, connection=con)
    assert con.sql("SELECT count(*) FROM t").fetchall() == [(4,)]  # still the table
    assert DuckDBEngine({"t": "t"}, connection=con).schema("t").names == ["uid", "g", "x"]
    assert DuckDBEngine({"t_2": sources[source]}, connection=con).schema("t_2").names
    assert con.sql("SELECT count(*) FROM t").fetchall() == [(4,)]
    assert DuckDBEngine({"t": sources["frame"]}).schema("t").names == ["uid", "g", "x"]


def test_a_name_that_is_neither_file_nor_table_is_refused() -> None:
    with pytest.raises(SchemaError, match="neither a file nor a table"):
        DuckDBEngine({"t": "no_such_table"})


def test_a_relation_of_the_given_connection_is_registered() -> None:
    import duckdb

    con = duckdb.connect()
    rel = con.sql("SELECT range AS uid, 'a' AS g, range * 2.0 AS x FROM range(7)")
    engine = DuckDBEngine({"t": rel}, connection=con)
    assert engine.schema("t").names == ["uid", "g", "x"]


def test_a_relation_of_another_connection_is_refused_with_the_fix() -> None:
    import duckdb

    rel = duckdb.connect().sql("SELECT 1 AS uid")
    with pytest.raises(SchemaError, match="pass that connection too"):
        DuckDBEngine({"t": rel})
