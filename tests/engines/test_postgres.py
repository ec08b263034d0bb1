"""The PostgreSQL engine against the test server: registration and types, ``check`` reading no
row, total conditions, and neighbouring-dataset outcomes for values only PostgreSQL fails on
(a NUMERIC beyond the double range, a product that underflows, a WHERE that raises).

The contract and the pre-noise parity with DuckDB are in ``test_conformance.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

import postgres_support
import veil
from veil.cli import app
from veil.errors import InvalidArgumentError, QueryFailedError, SchemaError, UserError

pytestmark = pytest.mark.postgres

URL = postgres_support.PG_URL


@pytest.fixture
def sql() -> Iterator[Any]:
    """Run SQL on the test server in this run's schema (autocommit)."""
    con = postgres_support.connection()
    schema = postgres_support.schema()
    con.execute(f'SET search_path = "{schema}"')
    yield con
    con.execute("RESET search_path")


def _name(base: str) -> str:
    return f"{postgres_support.schema()}.{base}"


def outcome(session: veil.Session, query: str, **options: Any) -> tuple[str, str]:
    """("released", ""), ("refused free", error type) or ("failed after the charge", "")."""
    before = session.remaining()
    try:
        session.sql(query, **options)
    except QueryFailedError:
        return ("failed after the charge", "")
    except UserError as err:
        assert session.remaining() == before, "a refused query was charged"
        return ("refused free", type(err).__name__)
    finally:
        session.close()
    return ("released", "")


def _session(table: str) -> veil.Session:
    return veil.Session.postgres(
        URL, {"t": table}, privacy_unit="uid", budget=veil.Budget(epsilon=100, delta=1e-3)
    )


def test_types_come_from_the_catalog_and_odd_types_are_read_as_text(sql: Any) -> None:
    sql.execute(
        "CREATE TABLE types (uid bigint, a numeric(10, 2), b numeric, c char(3), "
        "u uuid, j jsonb, t timestamptz, i interval)"
    )
    engine = veil.Session.postgres(URL, {"t": _name("types")}).engine
    schema = engine.schema("t")
    assert str(schema.field("a").type) == "decimal128(10, 2)"
    assert str(schema.field("b").type) == "double"  # aggregated as the nearest double
    assert [str(schema.field(c).type) for c in "cuji"] == ["string"] * 4
    assert str(schema.field("t").type) == "timestamp[us, tz=UTC]"
    assert any("uuid" in note for note in engine.notes("t"))  # type: ignore[attr-defined]
    engine.close()


def test_registration_errors_are_user_errors_raised_before_any_query(sql: Any) -> None:
    with pytest.raises(SchemaError, match=r"no table or view 'nowhere\.nothing'"):
        veil.Session.postgres(URL, {"t": "nowhere.nothing"})
    with pytest.raises(InvalidArgumentError, match="not a PostgreSQL URL"):
        veil.Session.postgres("sqlite:///x.db", {"t": "a.b"})
    with pytest.raises(InvalidArgumentError, match="carry their own types"):
        veil.Session.postgres(URL, {"t": "a.b"}, schema={"t": {"x": "DOUBLE"}})


def test_check_plans_without_reading_a_row(sql: Any) -> None:
    """A view whose every row raises (division by zero): ``check`` (EXPLAIN) accepts the
    query, because nothing is evaluated; running it fails — and after the charge, with the
    engine's message withheld."""
    sql.execute("CREATE TABLE base (uid bigint)")
    sql.execute("INSERT INTO base SELECT g FROM generate_series(1, 50) g")
    sql.execute("CREATE VIEW raising AS SELECT uid, 1 / (uid - uid) AS x FROM base")
    s = _session(_name("raising"))
    explained = s.explain("SELECT COUNT(*) FROM t", epsilon=1)
    assert "COUNT" in explained.sql
    lowered = veil.compile.lower(  # type: ignore[attr-defined]
        veil.plan.tree.aggregate_of(explained.plan),  # type: ignore[attr-defined]
        veil.compile.dialect("postgres"),  # type: ignore[attr-defined]
        salt=1,
    )
    s.engine.check(lowered.main)  # plans, reads nothing: no division happens
    with pytest.raises(QueryFailedError, match="withheld"):
        s.sql("SELECT SUM(x) FROM t", epsilon=1, bounds={"x": (0, 1)})


@pytest.mark.parametrize(
    "where",
    [
        "CAST(w AS INTEGER) > 3",
        "i + 1 > 0",
        "x * 1e300 > 1",
        "x / i > 1",
        "x > n",
        "w LIKE 'a\\'",
        "REGEXP_MATCHES(w, '(')",
    ],
)
def test_a_where_that_could_raise_is_refused_free_on_both_neighbours(sql: Any, where: str) -> None:
    """The target's row holds the value the condition fails on (a text that is no number,
    the largest int4, 1e10, a zero divisor); PostgreSQL has no TRY, so the condition is
    refused before anything is charged — on both neighbours, with the same message."""
    outcomes = []
    for with_target in (True, False):
        table = f"w{abs(hash((where, with_target))) % 10**8}"
        sql.execute(
            f"CREATE TABLE {table} (uid bigint, w text, i integer, x double precision, n numeric)"
        )
        sql.execute(f"INSERT INTO {table} SELECT g, 'a', 1, 1.0, 1 FROM generate_series(1, 40) g")
        if with_target:
            sql.execute(f"INSERT INTO {table} VALUES (99, 'x', 2147483647, 1e10, 1e400)")
        s = _session(_name(table))
        try:
            s.sql(f"SELECT COUNT(*) FROM t WHERE {where}", epsilon=1)
            outcomes.append(("released", ""))
        except UserError as err:
            assert s.remaining() == veil.Budget(epsilon=100, delta=1e-3)
            outcomes.append((type(err).__name__, str(err)))
        finally:
            s.close()
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] in ("UnsupportedQueryError", "SchemaError")


@pytest.mark.parametrize(
    ("target", "query", "bounds"),
    [
        ("1e400", "SELECT SUM(n), AVG(n), MEDIAN(n) FROM t", (0, 10)),
        ("-1e400", "SELECT BIN(n, 0, 5, 10) AS b, COUNT(*) FROM t GROUP BY b", None),
        ("'NaN'", "SELECT SUM(n), VARIANCE(n) FROM t", (0, 10)),
        ("'Infinity'", "SELECT SUM(n) FROM t", (0, 10)),
        ("5e-324", "SELECT SUM(x), VARIANCE(x), MEDIAN(x) FROM t", (0, 2.0**40)),
        ("1e308", "SELECT SUM(x), STDDEV(x) FROM t", (-1e100, 1e100)),
        ("'-Infinity'", "SELECT SUM(x) FROM t WHERE x < 1", (-1, 1)),
    ],
)
def test_values_postgresql_would_fail_on_give_the_same_outcome_on_both_neighbours(
    sql: Any, target: str, query: str, bounds: tuple[float, float] | None
) -> None:
    """A NUMERIC beyond the double range fails a cast to double; a subnormal times a small
    scale underflows, which PostgreSQL raises on. The lowering clamps and guards before every
    cast and product, so the target's row changes nothing but the numbers."""
    outcomes = []
    for with_target in (True, False):
        table = f"v{abs(hash((target, query, with_target))) % 10**8}"
        sql.execute(f"CREATE TABLE {table} (uid bigint, n numeric, x double precision)")
        sql.execute(f"INSERT INTO {table} SELECT g, g % 7, g % 5 FROM generate_series(1, 60) g")
        if with_target:
            column = "x" if "(x" in query or "x <" in query else "n"
            sql.execute(f"INSERT INTO {table} (uid, {column}) VALUES (99, {target})")
        options: dict[str, Any] = {"epsilon": 1}
        if bounds is not None:
            column = "x" if "(x" in query or "x <" in query else "n"
            options["bounds"] = {column: bounds}
        outcomes.append(outcome(_session(_name(table)), query, **options))
    assert outcomes == [("released", "")] * 2


def test_text_keys_group_byte_wise_even_under_a_case_insensitive_collation(sql: Any) -> None:
    """With a non-deterministic collation 'A' and 'a' would be one group, released under
    whichever spelling a row carries; veil reads text in the C collation."""
    sql.execute(
        "CREATE COLLATION IF NOT EXISTS veil_ci "
        "(provider = icu, locale = 'und-u-ks-level2', deterministic = false)"
    )
    sql.execute("CREATE TABLE ci (uid bigint, g text COLLATE veil_ci)")
    sql.execute("INSERT INTO ci SELECT g, CASE WHEN g % 2 = 0 THEN 'A' ELSE 'a' END "
                "FROM generate_series(1, 400) g")  # fmt: skip
    s = _session(_name("ci"))
    r = s.sql("SELECT g, COUNT(*) FROM t GROUP BY g", epsilon=10, delta=1e-6)
    assert sorted(row[0] for row in r.rows) == ["A", "a"]
    assert all(abs(row[1] - 200) < 20 for row in r.rows)
    s.close()


def test_the_cli_queries_postgresql(sql: Any) -> None:
    sql.execute("CREATE TABLE cli (uid bigint, amount double precision)")
    sql.execute("INSERT INTO cli SELECT g, g % 10 FROM generate_series(1, 500) g")
    result = CliRunner().invoke(
        app,
        [
            "query", "SELECT COUNT(*) AS n, SUM(amount) AS total FROM orders",
            "--engine", "postgres", "--connection", URL,
            "--table", f"orders={_name('cli')}",
            "--epsilon", "5", "--privacy-unit", "uid", "--bounds", "amount=0:10",
            "--format", "json",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (n, total) = json.loads(result.stdout)["rows"][0]
    assert abs(n - 500) < 10
    assert abs(total - 2250) < 100
    missing = CliRunner().invoke(
        app, ["query", "SELECT COUNT(*) FROM t", "--engine", "postgres", "-t", "t=a.b", "-e", "1"]
    )
    assert missing.exit_code == 2
    assert "--engine postgres needs --connection" in missing.stderr


def test_a_median_over_non_dyadic_bounds_is_released(sql: Any) -> None:
    """A quantile's bucket step span/1024 need not be a double (bounds (0, 0.1)): the
    underflow guard's threshold is the double just below half a step, not a refusal."""
    sql.execute("DROP TABLE IF EXISTS tenths")
    sql.execute("CREATE TABLE tenths (uid integer, x double precision)")
    sql.execute("INSERT INTO tenths SELECT i, (i % 100) / 1000.0 FROM generate_series(1, 500) i")
    session = _session(_name("tenths"))
    r = session.sql("SELECT MEDIAN(x) AS m FROM t", epsilon=1, bounds={"x": (0, 0.1)})
    ((m,),) = r.rows
    assert 0.02 <= m <= 0.08  # the true median is about 0.05
    session.close()


def test_a_text_column_used_as_a_number_gets_no_advice_to_declare_its_type(sql: Any) -> None:
    """PostgreSQL tables carry their own types (``schema=`` is refused), so the refusal of an
    aggregate over a text column does not advise declaring one — in SQL or the builder."""
    sql.execute("CREATE TABLE texts (uid bigint, income text)")
    s = _session(_name("texts"))
    for ask in (
        lambda: s.sql("SELECT AVG(income) AS m FROM t", epsilon=1, bounds={"income": (0, 1)}),
        lambda: s.query("t").avg("income").run(epsilon=1, bounds={"income": (0, 1)}),
    ):
        with pytest.raises(SchemaError, match="needs a numeric column") as caught:
            ask()
        assert "declare" not in str(caught.value)
        assert "schema=" not in str(caught.value)
        assert "--column" not in str(caught.value)


@pytest.mark.parametrize("connective", ["AND", "OR"])
def test_a_thousand_term_chain_is_checked_and_answered_without_recursion(
    sql: Any, connective: str
) -> None:
    # the pure-condition check walked the chain recursively (a RecursionError at 1,000 terms)
    table = f"chain_{connective.lower()}"
    sql.execute(
        f"CREATE TABLE {table} AS SELECT g AS uid, g * 1.0 AS x FROM generate_series(1, 40) g"
    )
    chain = f" {connective} ".join(f"x <> {i + 1000}" for i in range(1_000))
    s = _session(_name(table))
    try:
        result = s.sql(f"SELECT COUNT(*) AS n FROM t WHERE {chain}", epsilon=1)
        assert list(result.columns) == ["n"]
        # and a refusal deep in the chain is still found, free
        bad = chain + f" {connective} x / x > 1"
        with pytest.raises(UserError, match="could fail on some rows"):
            s.sql(f"SELECT COUNT(*) AS n FROM t WHERE {bad}", epsilon=1)
        assert s.remaining() == veil.Budget(epsilon=99, delta=1e-3)
    finally:
        s.close()
