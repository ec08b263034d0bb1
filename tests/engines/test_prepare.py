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
