"""DuckDB reads declared types, never infers them from the values (issue 18)."""

from __future__ import annotations

import datetime
import gzip
import importlib.util
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from veil.engines.duckdb import DuckDBEngine
from veil.errors import InvalidArgumentError, SchemaError

PEOPLE = "uid,income,born,city\n1,10,2001-02-03,Paris\n2,N/A,03/02/2001,Lyon\n3,,,\n"
TYPES = {"uid": "INTEGER", "income": "DOUBLE", "born": "DATE"}


def rows(engine: DuckDBEngine, table: str = "t") -> list[tuple[Any, ...]]:
    return engine.connection.sql(f'SELECT * FROM "{table}"').fetchall()


def csv(tmp_path: Path, text: str = PEOPLE, name: str = "people.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_declared_csv_column_has_its_type_and_a_cell_that_does_not_convert_is_null(
    tmp_path: Path,
) -> None:
    engine = DuckDBEngine({"t": csv(tmp_path)}, schema={"t": TYPES})
    assert engine.schema("t") == pa.schema(
        [
            ("uid", pa.int32()),
            ("income", pa.float64()),
            ("born", pa.date32()),
            ("city", pa.string()),
        ]
    )
    assert rows(engine) == [
        (1, 10.0, datetime.date(2001, 2, 3), "Paris"),
        (2, None, None, "Lyon"),  # 'N/A' and a non-ISO date are NULL, not a type change
        (3, None, None, None),  # empty cells are NULL
    ]


def test_undeclared_csv_columns_are_text_whatever_the_values(tmp_path: Path) -> None:
    engine = DuckDBEngine({"t": csv(tmp_path, "a,b\n1,2\n3,4\n")})
    assert engine.schema("t") == pa.schema([("a", pa.string()), ("b", pa.string())])
    assert engine.notes("t") == (
        "table 't' is a CSV read without declared types: every column is text; declare types "
        "with schema={'t': {'a': 'DOUBLE'}} (Python) or --column a:DOUBLE (CLI)",
    )
    typed = DuckDBEngine({"t": csv(tmp_path, "a,b\n1,2\n")}, schema={"t": {"A": "BIGINT"}})
    assert typed.schema("t").field("a").type == pa.int64()  # names match case-insensitively
    assert typed.notes("t") == (
        "table 't' is a CSV: the undeclared column 'b' is text; declare types with "
        "schema={'t': {'b': 'DOUBLE'}} (Python) or --column b:DOUBLE (CLI)",
    )


def test_tsv_and_gzipped_csv_use_the_same_rules(tmp_path: Path) -> None:
    tsv = tmp_path / "p.tsv"
    tsv.write_text('uid\tcity\n1\t"Paris, FR"\n2\tLyon,FR\n')
    engine = DuckDBEngine({"t": tsv}, schema={"t": {"uid": "INTEGER"}})
    assert rows(engine) == [(1, "Paris, FR"), (2, "Lyon,FR")]
    zipped = tmp_path / "p.csv.gz"
    zipped.write_bytes(gzip.compress(PEOPLE.encode()))
    assert rows(DuckDBEngine({"t": zipped}, schema={"t": TYPES})) == rows(
        DuckDBEngine({"t": csv(tmp_path)}, schema={"t": TYPES})
    )


def test_a_byte_order_mark_crlf_endings_and_repeated_headers_are_not_data(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_bytes(b"\xef\xbb\xbfuid,x\r\n1,a\r\nuid,x\r\n\r\n2,b")
    engine = DuckDBEngine({"t": path})
    assert engine.schema("t").names == ["uid", "x"]
    assert rows(engine) == [("1", "a"), ("2", "b")]


def test_a_glob_reads_every_file_once_and_needs_one_header(tmp_path: Path) -> None:
    csv(tmp_path, "uid,x\n1,a\n", "a.csv")
    csv(tmp_path, "uid,x\n2,b\n", "b.csv")
    engine = DuckDBEngine({"t": str(tmp_path / "*.csv")}, schema={"t": {"uid": "INTEGER"}})
    assert sorted(rows(engine)) == [(1, "a"), (2, "b")]
    csv(tmp_path, "uid,y\n3,c\n", "c.csv")
    with pytest.raises(SchemaError, match=r"c.csv' does not start with the header of .*a.csv'"):
        DuckDBEngine({"t": str(tmp_path / "*.csv")})


def test_declarations_apply_to_typed_sources_too(tmp_path: Path) -> None:
    table = pa.table({"uid": [1, 2], "income": ["10.5", "x"], "born": ["2001-02-03", "?"]})
    pq.write_table(table, tmp_path / "t.parquet")
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE people AS SELECT * FROM read_parquet(?)", [str(tmp_path / "t.parquet")]
    )
    sources: Mapping[str, Any] = {
        "parquet": tmp_path / "t.parquet",
        "arrow": table,
        "pandas": table.to_pandas(),
        "relation": con.sql("SELECT * FROM people"),
        "people": "people",  # a connection table under its own name
        "alias": "people",
    }
    if importlib.util.find_spec("polars") is not None:  # an optional extra
        sources = {**sources, "polars": importlib.import_module("polars").from_arrow(table)}
    engine = DuckDBEngine(sources, connection=con, schema={name: TYPES for name in sources})
    for name in sources:
        assert engine.schema(name).field("income").type == pa.float64(), name
        assert rows(engine, name) == [
            (1, 10.5, datetime.date(2001, 2, 3)),
            (2, None, None),
        ], name


def test_pandas_object_columns_are_read_as_text_without_looking_at_value_types() -> None:
    frame = pd.DataFrame(
        {
            "mixed": pd.Series([1, "x", None, float("nan"), pd.NA, Decimal("2.5")], dtype=object),
            "nothing": pd.Series([None] * 6, dtype=object),
            "number": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
        }
    )
    engine = DuckDBEngine({"t": frame})
    assert engine.schema("t") == pa.schema(
        [("mixed", pa.string()), ("nothing", pa.string()), ("number", pa.float64())]
    )
    assert [r[0] for r in rows(engine)] == ["1", "x", None, None, None, "2.5"]
    assert "object columns 'mixed', 'nothing' are read as text" in engine.notes("t")[0]
    typed = DuckDBEngine({"t": frame}, schema={"t": {"mixed": "DOUBLE"}})
    assert [r[0] for r in rows(typed)] == [1.0, None, None, None, None, 2.5]


def test_json_lines_are_read_only_through_a_declaration(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text('{"uid": 1, "income": 10.5}\nnot json\n[1]\n{"uid": "2", "income": "x"}\n')
    with pytest.raises(
        SchemaError,
        match=r"table 't' is a JSON-lines file, whose column names would come from the data; "
        r"declare the columns to read: schema=\{'t': \{'income': 'DOUBLE'",
    ):
        DuckDBEngine({"t": path})
    engine = DuckDBEngine({"t": path}, schema={"t": {"uid": "INTEGER", "income": "DOUBLE"}})
    assert rows(engine) == [(1, 10.5), (2, None)]
    assert "read as JSON lines" in engine.notes("t")[0]


def test_unknown_types_and_columns_are_refused_when_the_engine_is_built(tmp_path: Path) -> None:
    path = csv(tmp_path)
    with pytest.raises(
        InvalidArgumentError,
        match=r"table 't', column 'income': 'MONEY' is not a type; declare one of BOOLEAN, ",
    ):
        DuckDBEngine({"t": path}, schema={"t": {"income": "MONEY"}})
    with pytest.raises(
        SchemaError,
        match=r"table 't': the declared column 'salary' is not in the header of .*people.csv', "
        r"which has 'uid', 'income', 'born', 'city'; declare only columns the source has",
    ):
        DuckDBEngine({"t": path}, schema={"t": {"salary": "DOUBLE"}})
    with pytest.raises(SchemaError, match=r"declared column 'salary' is not in the DataFrame"):
        DuckDBEngine({"t": pd.DataFrame({"x": [1]})}, schema={"t": {"salary": "DOUBLE"}})
    with pytest.raises(InvalidArgumentError, match=r"schema declares table 'u', which is not"):
        DuckDBEngine({"t": path}, schema={"u": {"x": "DOUBLE"}})


def test_the_schema_of_a_csv_reads_no_data_row(tmp_path: Path) -> None:
    # header, then rows, then a corrupt gzip tail: any read of the rows fails
    body = "uid,income\n" + "".join(f"{i},{i}\n" for i in range(50_000))
    path = tmp_path / "p.csv.gz"
    path.write_bytes(gzip.compress(body.encode())[:-2_000])
    engine = DuckDBEngine({"t": path}, schema={"t": {"income": "DOUBLE"}})
    schema = engine.schema("t")
    assert schema == pa.schema([("uid", pa.string()), ("income", pa.float64())])
    assert engine.schema("t") is schema  # fixed at registration: no query per call
    with pytest.raises(duckdb.Error):  # reading the rows does fail: they were never read before
        engine.connection.sql('SELECT COUNT(*) FROM "t"').fetchall()


def test_an_undeclared_csv_column_cannot_be_summed_and_nothing_is_charged(tmp_path: Path) -> None:
    session = veil.Session.local(
        {"t": csv(tmp_path)}, privacy_unit="uid", budget=veil.Budget(epsilon=1)
    )
    with pytest.raises(SchemaError, match=r"SUM\(income\) needs a numeric column, but 'income'"):
        session.sql("SELECT SUM(income) AS s FROM t", epsilon=0.5, bounds={"income": (0, 100)})
    assert session.remaining() == veil.Budget(epsilon=1)
    declared = veil.Session.local(
        {"t": csv(tmp_path)},
        privacy_unit="uid",
        budget=veil.Budget(epsilon=1),
        schema={"t": {"income": "DOUBLE"}},
    )
    declared.sql("SELECT SUM(income) AS s FROM t", epsilon=0.5, bounds={"income": (0, 100)})
    assert declared.remaining() == veil.Budget(epsilon=0.5)


def test_a_where_comparing_an_undeclared_text_column_with_a_number_says_how_to_declare_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "people.csv"
    path.write_text("uid,income,city\n1,100,a\n2,N/A,b\n", encoding="utf-8")
    s = veil.Session.local({"people": path}, privacy_unit="uid", budget=veil.Budget(epsilon=1))
    queries = (
        "SELECT COUNT(*) AS n FROM people WHERE income > 150",
        "SELECT COUNT(*) AS n FROM people WHERE city = 'a' AND income + 1 > 150",
    )
    for query in queries:
        with pytest.raises(
            SchemaError,
            match=r"(an explicit cast is required|explicit type casts); 'income' is text; if it "
            r"holds numbers as text .* schema=\{'people': \{'income': 'DOUBLE'\}\} in Python, "
            r"--column income:DOUBLE in the CLI$",
        ) as caught:
            s.sql(query, epsilon=0.5)
        assert "Candidate functions" not in str(caught.value)
        assert "'income' is text" in str(caught.value)
    assert s.remaining() == veil.Budget(epsilon=1)  # refused free
    declared = veil.Session.local(
        {"people": path},
        privacy_unit="uid",
        budget=veil.Budget(epsilon=1),
        schema={"people": {"income": "DOUBLE"}},
    )
    assert declared.engine.declared("people") == {"income": "DOUBLE"}  # type: ignore[attr-defined]
    declared.sql(queries[0], epsilon=0.5)  # answered
