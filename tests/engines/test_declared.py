"""Declared types (veil.engines.declared) and the line-by-line text rules (veil.engines.lines)."""

from __future__ import annotations

import gzip
import random
from pathlib import Path

import duckdb
import pytest
from sqlglot import exp

from veil.engines.declared import match_columns, parse_schema, parse_type, type_sql
from veil.engines.lines import (
    MAX_LINE_BYTES,
    TextFormat,
    cell,
    cells,
    header_names,
    line_cells,
    read_first_line,
    text_format,
    text_notes,
)
from veil.errors import InvalidArgumentError, SchemaError

CSV = TextFormat("csv", ",", gzip=False)


@pytest.mark.parametrize(
    ("name", "duckdb_sql", "spark_sql"),
    [
        ("BOOLEAN", "BOOLEAN", "BOOLEAN"),
        ("bool", "BOOLEAN", "BOOLEAN"),
        ("TINYINT", "TINYINT", "TINYINT"),
        ("SMALLINT", "SMALLINT", "SMALLINT"),
        ("INTEGER", "INT", "INT"),
        ("BIGINT", "BIGINT", "BIGINT"),
        ("FLOAT", "REAL", "FLOAT"),
        ("REAL", "REAL", "FLOAT"),
        ("double", "DOUBLE", "DOUBLE"),
        ("DECIMAL(10, 2)", "DECIMAL(10, 2)", "DECIMAL(10, 2)"),
        ("NUMERIC(38,0)", "DECIMAL(38, 0)", "DECIMAL(38, 0)"),
        ("DECIMAL", "DECIMAL(18, 3)", "DECIMAL(18, 3)"),
        ("VARCHAR", "TEXT", "STRING"),
        ("TEXT", "TEXT", "STRING"),
        ("STRING", "TEXT", "STRING"),
        ("DATE", "DATE", "DATE"),
        ("TIMESTAMP", "TIMESTAMP", "TIMESTAMP_NTZ"),
    ],
)
def test_accepted_type_names_are_spelled_per_dialect(
    name: str, duckdb_sql: str, spark_sql: str
) -> None:
    dtype = parse_type("people", "x", name)
    assert type_sql(dtype, "duckdb") == duckdb_sql
    assert type_sql(dtype, "spark") == spark_sql


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("MONEY", r"'MONEY' is not a type"),
        ("income", r"'income' is not a type"),
        ("HUGEINT", r"type 'HUGEINT' is not supported"),
        ("TIMESTAMPTZ", r"type 'TIMESTAMPTZ' is not supported"),
        ("INTEGER[]", r"type 'INTEGER\[\]' is not supported"),
        ("TIMESTAMP(3)", r"'TIMESTAMP\(3\)' takes no parameters"),
        ("DECIMAL(39, 2)", r"'DECIMAL\(39, 2\)' needs 1 <= precision <= 38"),
        ("DECIMAL(5, 6)", r"'DECIMAL\(5, 6\)' needs 1 <= precision <= 38 and 0 <= scale"),
        ("DECIMAL(a, b)", r"'DECIMAL\(a, b\)' needs whole numbers"),
        ("", r"a type must be a type name, got ''"),
    ],
)
def test_other_type_names_are_refused_naming_table_column_value_and_the_accepted_names(
    name: str, why: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=rf"table 'people', column 'income': {why}") as e:
        parse_type("people", "income", name)
    assert "declare one of BOOLEAN, TINYINT, SMALLINT, INTEGER, BIGINT" in str(e.value)
    assert "DECIMAL(p, s) with p <= 38, VARCHAR (TEXT, STRING), DATE, TIMESTAMP" in str(e.value)


def test_a_schema_must_map_registered_tables_to_columns_and_types() -> None:
    parsed = parse_schema({"people": {"income": "DOUBLE"}}, ["people"])
    assert type_sql(parsed["people"]["income"], "duckdb") == "DOUBLE"
    assert parse_schema(None, ["people"]) == {}
    with pytest.raises(InvalidArgumentError, match=r"declares table 'persons', which is not"):
        parse_schema({"persons": {"income": "DOUBLE"}}, ["people"])
    with pytest.raises(InvalidArgumentError, match=r"schema\['people'\] must map columns"):
        parse_schema({"people": "DOUBLE"}, ["people"])  # type: ignore[dict-item]
    with pytest.raises(InvalidArgumentError, match=r"schema must map tables"):
        parse_schema(["people"], ["people"])  # type: ignore[arg-type]


def test_declared_columns_match_case_insensitively_and_a_missing_one_names_the_columns() -> None:
    declared = {"INCOME": exp.DataType.build("DOUBLE")}
    assert list(match_columns("t", declared, ["uid", "income"], "x")) == ["income"]
    with pytest.raises(
        SchemaError,
        match=r"table 't': the declared column 'salary' is not in the file, which has 'uid', "
        r"'income'; declare only columns the source has",
    ):
        match_columns("t", {"salary": exp.DataType.build("DOUBLE")}, ["uid", "income"], "the file")


def test_text_formats_come_from_the_suffix_and_other_compressions_are_refused() -> None:
    assert text_format("a/people.csv") == TextFormat("csv", ",", gzip=False)
    assert text_format("people.TSV.gz") == TextFormat("csv", "\t", gzip=True)
    assert text_format("people.txt") == TextFormat("csv", ",", gzip=False)
    assert text_format("people.ndjson") == TextFormat("json", "", gzip=False)
    assert text_format("people.parquet") is None
    with pytest.raises(SchemaError, match=r"zstd-compressed text file.*recompress it with gzip"):
        text_format("people.csv.zst")
    assert text_format("people.csv.zst", any_compression=True) == CSV


# -- the cell rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("a,b,c", ["a", "b", "c"]),
        ('"a,b",c,', ["a,b", "c", None]),
        ('"a""b",c,d', ['a"b', "c", "d"]),
        ('x,"1"0,y', ["x", None, None]),  # text after the closing quote: malformed from there
        ('x,"10,2020-01-01', ["x", None, None]),  # an unterminated quote
        ('"', [None, None, None]),
        ('"",,x', [None, None, "x"]),  # empty cells, quoted or not, are NULL
        ('a"b,c', ['a"b', "c", None]),  # a quote inside an unquoted cell is data
        ("a", ["a", None, None]),  # missing cells are NULL
        ("a,b,c,d,e", ["a", "b", "c"]),  # extra cells are ignored
        ('"""",x', ['"', "x", None]),
        ('"x"  ,y', [None, None, None]),
    ],
)
def test_cells_follow_the_documented_rules(line: str, expected: list[str | None]) -> None:
    assert cells(line, ",", 3) == expected


def sql_cells(dialect: str, count: int, source: str) -> str:
    """A query of column ``l`` of ``source`` and its first ``count`` cells, as engines read them."""
    listed = line_cells(exp.column("l"), ",", dialect).sql(dialect=dialect)
    items = ", ".join(
        cell(exp.column("c"), k, dialect).sql(dialect=dialect) for k in range(1, count + 1)
    )
    return f"SELECT l, {items} FROM (SELECT l, {listed} AS c FROM {source})"


RANDOM_ALPHABET = ["a", "1", ",", '"', '""', " ", "\t", "é", "\x00", "\u2028"]


def random_lines(seed: int, n: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(RANDOM_ALPHABET, k=rng.randint(0, 14))) for _ in range(n)]


def test_the_sql_cells_equal_the_python_reference_on_random_lines() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t (l VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?)", [[line] for line in random_lines(18, 5_000)])
    for row in con.sql(sql_cells("duckdb", 6, "t")).fetchall():
        assert list(row[1:]) == cells(row[0], ",", 6), row[0]


@pytest.mark.spark
def test_the_spark_sql_cells_equal_the_python_reference_on_random_lines() -> None:
    from spark_support import spark_session

    spark = spark_session()
    lines = [*random_lines(19, 3_000), "a," * 700 + '"bad', '1,"' + "x" * 100_000 + '""y",z']
    spark.createDataFrame([(line,) for line in lines], "l STRING").createOrReplaceTempView(
        "veil_test_random_lines"
    )
    query = sql_cells("spark", 6, "veil_test_random_lines")
    for row in spark.sql(query).collect():
        assert list(row[1:]) == cells(row[0], ",", 6), row[0]


def test_wide_and_long_lines_are_read_like_short_ones() -> None:
    con = duckdb.connect()
    wide = ",".join(f'"v{i}"' if i % 3 == 0 else f"v{i}" for i in range(1, 1_200))
    malformed = "a," * 700 + '"bad,x'
    long = '1,"' + "x" * 1_000_000 + '""y",z'
    for line in (wide, malformed, long):
        got = con.execute(sql_cells("duckdb", 1_210, "(SELECT ?::VARCHAR AS l)"), [line])
        assert list(got.fetchone() or ())[1:] == cells(line, ",", 1_210)


# -- the header ---------------------------------------------------------------------------------


def test_the_header_is_the_first_line_of_plain_and_gzipped_files(tmp_path: Path) -> None:
    plain = tmp_path / "p.csv"
    plain.write_bytes(b'\xef\xbb\xbfuid,"in,come"\r\n1,2\n\xff\xfe garbage')
    assert read_first_line(str(plain), CSV) == 'uid,"in,come"'
    zipped = tmp_path / "p.csv.gz"
    zipped.write_bytes(gzip.compress(b"uid,income\n1,2\n")[:-12])  # a truncated stream
    assert read_first_line(str(zipped), TextFormat("csv", ",", gzip=True)) == "uid,income"
    names = header_names("t", 'uid,"in,come"', CSV, "p.csv")
    assert names == ("uid", "in,come")


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("", r"the first line of p.csv is empty; the first line of a CSV must be the header"),
        ('uid,"income', r"cell 2 of the header of p.csv opens a quote it does not close"),
        ("uid,,income", r"column 2 of the header of p.csv has no name"),
        ("uid,Income,income", r"the header of p.csv names 'income' twice \(columns 2 and 3"),
    ],
)
def test_a_header_that_does_not_name_every_column_once_is_refused(
    header: str, message: str
) -> None:
    with pytest.raises(SchemaError, match=rf"table 't': {message}"):
        header_names("t", header, CSV, "p.csv")


def test_a_header_that_is_not_utf8_or_too_long_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_bytes(b"uid,\xffincome\n1,2\n")
    with pytest.raises(SchemaError, match=r"is not UTF-8 .*save the file as UTF-8"):
        read_first_line(str(path), CSV)
    path.write_bytes(b"x" * (MAX_LINE_BYTES + 1) + b"\n1\n")
    with pytest.raises(SchemaError, match=r"longer than 2097152 bytes"):
        read_first_line(str(path), CSV)


def test_notes_say_which_csv_columns_are_text_and_how_to_declare_them() -> None:
    (note,) = text_notes("people", CSV, ["income", "age"], {})
    assert note == (
        "table 'people' is a CSV read without declared types: every column is text; declare "
        "types with schema={'people': {'income': 'DOUBLE'}} (Python) or --column income:DOUBLE "
        "(CLI)"
    )
    (note,) = text_notes("people", CSV, ["uid", "income", "age"], {"uid": 1, "age": 1})
    assert note.startswith("table 'people' is a CSV: the undeclared column 'income' is text;")
    assert text_notes("people", CSV, ["income"], {"income": 1}) == ()
