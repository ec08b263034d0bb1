"""DuckDB prepares: the session binds the statement it runs once, before reserving.

``DuckDBEngine.prepare`` is ``check`` keeping the bound statement: the same refusals (decided by
the schema alone, before anything is charged), and a ``run`` that gives what ``execute`` gives.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
import sqlglot

from veil import Budget, Session
from veil.engines.base import Preparing
from veil.engines.duckdb import DuckDBEngine
from veil.errors import InternalError, SchemaError

TABLE = pa.table({"u": [1, 2, 3, 3], "g": ["a", "b", "a", "a"], "x": [1.0, 2.0, 3.0, 4.0]})


def _tree(sql: str) -> Any:
    return sqlglot.parse_one(sql, read="duckdb")


def test_prepare_refuses_what_check_refuses_and_runs_what_execute_runs() -> None:
    engine = DuckDBEngine({"t": TABLE})
    try:
        assert isinstance(engine, Preparing)
        for bad in ("SELECT nope FROM t", "SELECT SUM(g) FROM t", "SELECT * FROM nobody"):
            with pytest.raises(SchemaError) as checked:
                engine.check(_tree(bad))
            with pytest.raises(SchemaError) as prepared:
                engine.prepare(_tree(bad))
            assert str(prepared.value) == str(checked.value)
        good = _tree('SELECT "g", COUNT(*) AS n, SUM("x") AS s FROM t GROUP BY "g" ORDER BY "g"')
        assert engine.prepare(good).run(None).equals(engine.execute(good))
        seen: list[float | None] = []
        assert engine.prepare(good).run(seen.append).equals(engine.execute(good))
        assert seen[-1] == 1.0  # the progress contract's last report
    finally:
        engine.close()


def test_a_query_binds_each_statement_once_and_a_refusal_reserves_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    binds: list[str] = []
    checks: list[str] = []
    bind = DuckDBEngine._bind
    check = DuckDBEngine.check

    def counted_bind(self: DuckDBEngine, query: Any, *rest: Any) -> Any:
        binds.append(query.sql())
        return bind(self, query, *rest)

    def counted_check(self: DuckDBEngine, query: Any) -> None:
        checks.append(query.sql())
        check(self, query)

    monkeypatch.setattr(DuckDBEngine, "_bind", counted_bind)
    monkeypatch.setattr(DuckDBEngine, "check", counted_check)
    with Session.local({"t": TABLE}, privacy_unit="u", budget=Budget(epsilon=10)) as s:
        r = s.sql("SELECT g, COUNT(*) AS n FROM t GROUP BY g", epsilon=1, domains={"g": ["a", "b"]})
        assert len(r.rows) == 2
        assert (len(binds), checks) == (1, [])  # one bind, for the check and the run
        before = s.ledger.spent(s.analyst, s.dataset)
        with pytest.raises(SchemaError):
            s.sql("SELECT g, SUM(nope) AS n FROM t GROUP BY g", epsilon=1, bounds={"nope": (0, 1)})
        assert s.ledger.spent(s.analyst, s.dataset) == before  # refused before reserving
        # a median: its statements, each bound once
        binds.clear()
        s.sql("SELECT MEDIAN(x) AS m FROM t", epsilon=1, bounds={"x": (0, 10)})
        assert len(binds) == len(set(binds)) >= 1


def test_a_salt_placeholder_is_bound_as_its_literal_would_be() -> None:
    # DuckDB types a parameter from its value as it types the literal (INTEGER below 2^31,
    # BIGINT above), so the bounding hash, and hence the rows kept, are the literal's
    text = 'SELECT "u", "g", HASH(SALT, HASH(SALT, "u", "g", "x")) AS h FROM t ORDER BY "u", "x"'
    engine = DuckDBEngine({"t": TABLE})
    try:
        template = _tree(text.replace("SALT", "$salt"))
        for salt in (0, 5, 2**31 + 7, 2**63 - 1):
            literal = _tree(text.replace("SALT", str(salt)))
            assert engine.prepare(template, salt=salt).run(None).equals(engine.execute(literal))
        assert template.sql("duckdb") == text.replace("SALT", "$salt")  # never changed
        with pytest.raises(InternalError, match="without a salt"):
            engine.prepare(template)
    finally:
        engine.close()


def _counting_binds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    binds: list[str] = []
    bind = DuckDBEngine._bind

    def counted(self: DuckDBEngine, query: Any, *rest: Any) -> Any:
        binds.append(query.sql())
        return bind(self, query, *rest)

    monkeypatch.setattr(DuckDBEngine, "_bind", counted)
    return binds


def test_a_statement_bound_before_on_the_same_file_runs_without_binding_again(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(TABLE, path)
    binds = _counting_binds(monkeypatch)
    text = 'SELECT "g", COUNT(*) AS n, MIN(HASH(SALT, "u")) AS h FROM t GROUP BY "g" ORDER BY "g"'
    template = _tree(text.replace("SALT", "$salt"))
    engine = DuckDBEngine({"t": str(path)})
    try:
        for salt in (2**40 + 1, 2**40 + 2, 2**62 + 3):  # one width: bound once
            literal = _tree(text.replace("SALT", str(salt)))
            assert engine.prepare(template, salt=salt).run(None).equals(engine.execute(literal))
        assert len(binds) == 1
        seen: list[float | None] = []
        engine.prepare(template, salt=9 * 2**40).run(seen.append)
        assert (len(binds), seen[-1]) == (1, 1.0)
        engine.prepare(template, salt=5).run(None)  # INTEGER, not BIGINT: bound again
        assert len(binds) == 2
        engine.connection.execute("SET threads = 1")  # the catalog version moves: again
        engine.prepare(template, salt=2**40).run(None)
        assert len(binds) == 3
        # the file changes (its version moves): bound again, and refused when it no longer fits
        pq.write_table(TABLE.rename_columns(["v", "g", "x"]), path)
        with pytest.raises(SchemaError, match="does not fit the table's columns"):
            engine.prepare(template, salt=2**40)
        assert len(binds) == 4
    finally:
        engine.close()


def test_glob_and_object_tables_bind_every_time(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.parquet as pq

    pq.write_table(TABLE, tmp_path / "t1.parquet")
    binds = _counting_binds(monkeypatch)
    query = _tree('SELECT COUNT(*) AS n FROM t WHERE HASH($salt, "u") <> 0')
    for source in (str(tmp_path / "*.parquet"), TABLE):
        binds.clear()
        engine = DuckDBEngine({"t": source})
        try:
            for salt in (2**40 + 1, 2**40 + 2):
                engine.prepare(query, salt=salt).run(None)
            assert len(binds) == 2  # a glob may match a new file, a frame change in place
        finally:
            engine.close()


def test_a_run_that_fails_after_a_remembered_bind_leaves_the_connection_usable(
    tmp_path: Any,
) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(TABLE, path)
    engine = DuckDBEngine({"t": str(path)})
    try:
        failing = _tree('SELECT CAST("g" AS INTEGER) + HASH($salt) AS v FROM t')
        for salt in (2**40 + 1, 2**40 + 2):  # the second runs without a bind of its own
            with pytest.raises(SchemaError, match="the data does not fit the query"):
                engine.prepare(failing, salt=salt).run(None)
        good = _tree('SELECT COUNT(*) AS n FROM t WHERE HASH($salt, "u") <> 0')
        assert engine.prepare(good, salt=2**40).run(None).column("n").to_pylist() == [4]
    finally:
        engine.close()


def test_a_warm_session_binds_a_question_once_and_refuses_a_changed_file_free(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(TABLE, path)
    binds = _counting_binds(monkeypatch)
    query = "SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY g"
    options: dict[str, Any] = {"domains": {"g": ["a", "b"]}, "bounds": {"x": (0, 10)}}
    with Session.local({"t": str(path)}, privacy_unit="u", budget=Budget(epsilon=100)) as s:
        for eps in ("1", "1/2", "1/3"):  # new measurements, never the cache
            assert len(s.sql(query, epsilon=eps, **options).rows) == 2
        assert len(binds) == 1
        pq.write_table(TABLE.set_column(2, "x", pa.array(["1", "2", "3", "4"])), path)
        before = s.ledger.spent(s.analyst, s.dataset)
        with pytest.raises(SchemaError):
            s.sql(query, epsilon="1/4", **options)
        assert s.ledger.spent(s.analyst, s.dataset) == before  # refused before reserving


def _counting_texts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The statement texts generated for DuckDB, counted (the real generation runs)."""
    from veil.engines import duckdb_memo as memo

    texts: list[str] = []
    to_sql = memo.to_sql

    def counted(tree: Any, dialect: str) -> str:
        texts.append(to_sql(tree, dialect))
        return texts[-1]

    monkeypatch.setattr(memo, "to_sql", counted)
    return texts


def test_a_new_engine_runs_a_known_tree_from_the_text_generated_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import duckdb

    from veil.compile.lower import to_sql

    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES (1, 'a', 1.0), (2, 'b', 2.0)) v(u, g, x)")
    texts = _counting_texts(monkeypatch)
    query = _tree('SELECT "g", COUNT(*) AS n FROM t WHERE HASH($salt, "u") <> 0 GROUP BY "g"')
    other = _tree('SELECT "g", SUM("x") AS n FROM t WHERE HASH($salt, "u") <> 0 GROUP BY "g"')
    first = DuckDBEngine({"t": "t"}, connection=con).prepare(query, salt=7).run(None)
    assert texts == [to_sql(query, "duckdb")]
    for _ in range(2):  # new engines on the same connection: the same result, no new text
        again = DuckDBEngine({"t": "t"}, connection=con).prepare(query, salt=7).run(None)
        assert again.sort_by("g").equals(first.sort_by("g"))
    assert len(texts) == 1
    # another tree (an equal copy included) is another statement, generated for itself
    summed = DuckDBEngine({"t": "t"}, connection=con).prepare(other, salt=7).run(None)
    assert sorted(summed.column("n").to_pylist()) == [1.0, 2.0]
    copy = query.copy()
    DuckDBEngine({"t": "t"}, connection=con).prepare(copy, salt=7).run(None)
    assert texts == [to_sql(query, "duckdb"), to_sql(other, "duckdb"), to_sql(copy, "duckdb")]
    # a fresh connection parses the known text itself, and reads its own table
    con2 = duckdb.connect()
    con2.execute("CREATE TABLE t AS SELECT * FROM (VALUES (5, 'c', 1.0)) v(u, g, x)")
    there = DuckDBEngine({"t": "t"}, connection=con2).prepare(query, salt=7).run(None)
    assert there.column("g").to_pylist() == ["c"]
    assert len(texts) == 3


@pytest.mark.filterwarnings("ignore:epsilon=.* protects little")  # exact answers, to compare
def test_new_sessions_on_one_connection_answer_each_their_own_question() -> None:
    """Fresh sessions (and engines) on one connection share the statements of a question
    they ask alike, and only those: a different table, bound, domain or grid is another
    statement, whose answer is its own."""
    import duckdb

    con = duckdb.connect()
    con.execute(
        "CREATE TABLE t AS SELECT i AS u, CASE WHEN i % 3 = 0 THEN 'a' ELSE 'b' END AS g, "
        "(i % 10)::DOUBLE AS x FROM range(3000) r(i)"
    )
    con.execute("CREATE TABLE t2 AS SELECT * FROM t WHERE g = 'a'")
    runs = iter(range(100))

    def answer(sql: str, tables: dict[str, str] | None = None, **options: Any) -> list[Any]:
        with Session.local(
            tables or {"t": "t"}, connection=con, dataset=f"d{next(runs)}", privacy_unit="u",
            budget=Budget(epsilon=10**5), self_grant=True,
        ) as s:  # fmt: skip
            rows = s.sql(sql, epsilon=10**4, **options).rows
        return sorted((r[0], round(float(r[1]))) for r in rows)

    summed = "SELECT g, SUM(x) AS s FROM t GROUP BY g"
    both = {"g": ["a", "b"]}
    # exact sums of x clamped to [0, hi] per group ('a': i % 3 == 0), ε large: noise < 0.5
    for hi in (9, 4, 1, 4, 9):  # each bound its own statement, the earlier ones asked again
        want = {g: sum(min(i % 10, hi) for i in range(3000) if (i % 3 == 0) == (g == "a"))
                for g in ("a", "b")}  # fmt: skip
        assert answer(summed, bounds={"x": (0, hi)}, domains=both) == sorted(want.items())
    for keys in (["a"], ["b"], ["a", "b"], ["a"]):  # each domain its own statement
        assert [g for g, _ in answer(summed, bounds={"x": (0, 9)}, domains={"g": keys})] == keys
    counted = "SELECT g, COUNT(*) AS n FROM t GROUP BY g"
    assert answer(counted, domains=both) == [("a", 1000), ("b", 2000)]
    # a quantile on two grids: each its own cells (the middle of [0, 10) either way)
    median = "SELECT MEDIAN(x) AS m FROM t"
    for buckets in (16, 1024, 16):
        with Session.local(
            {"t": "t"}, connection=con, dataset=f"d{next(runs)}", privacy_unit="u",
            budget=Budget(epsilon=10**5), self_grant=True, bounds={"x": (0, 10)},
            quantile_buckets=buckets,
        ) as s:  # fmt: skip
            m = float(s.sql(median, epsilon=10**4).rows[0][0])
        assert 4 - 10 / buckets <= m <= 5 + 10 / buckets
    # another table under the same name: the same text, its own rows
    con.execute("CREATE OR REPLACE TABLE t AS SELECT * FROM t2")
    assert answer(counted, domains=both) == [("a", 1000), ("b", 0)]


def _large(con: Any) -> bool:
    rows = con.execute("SELECT current_setting('arrow_large_buffer_size')").fetchall()
    return bool(rows[0][0])


def test_a_statement_returning_lists_keeps_what_was_remembered_and_restores_the_setting(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement that returns lists runs with DuckDB's 64-bit list offsets and restores
    the setting after; the connection is then as before — the bind and the schemas
    remembered stay valid, the setting's value is known — until anything else changes it."""
    import duckdb
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(TABLE, path)
    con = duckdb.connect()
    con.execute("CREATE TABLE c AS SELECT 'a' AS g")
    binds = _counting_binds(monkeypatch)
    engine = DuckDBEngine({"t": str(path), "c": "c"}, connection=con)
    listed = _tree(
        'SELECT "g", ARRAY_AGG("x" ORDER BY "x") AS xs FROM t WHERE HASH($salt, "u") <> 0 '
        'GROUP BY "g"'
    )
    want = {"a": [1.0, 3.0, 4.0], "b": [2.0]}

    def run() -> dict[str, list[float]]:
        table = engine.prepare(listed, salt=2**40 + 7).run(None)
        assert pa.types.is_large_list(table.schema.field("xs").type)  # 64-bit offsets
        return dict(zip(table.column("g").to_pylist(), table.column("xs").to_pylist(), strict=True))

    small = engine.schema("c")
    for _ in range(3):
        assert run() == want
        assert not _large(con)  # restored
    assert len(binds) == 1  # the same catalog state after each run: bound once
    assert engine.schema("c") == small
    # the user sets it: a new state, bound again; the value found is the user's, kept
    con.execute("SET arrow_large_buffer_size = true")
    assert engine.schema("c").field("g").type == pa.large_string()
    assert run() == want
    assert _large(con)
    assert len(binds) == 2
    con.execute("SET arrow_large_buffer_size = false")
    assert engine.schema("c") == small
    assert run() == want
    assert not _large(con)
    assert len(binds) == 3
    # another statement between two runs (a cursor's DDL): a new state again
    con.cursor().execute("CREATE TABLE d AS SELECT 1 AS one")
    assert run() == want
    assert len(binds) == 4
    assert engine.schema("c") == small
