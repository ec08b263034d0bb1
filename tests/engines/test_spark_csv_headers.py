"""CSV directories and globs on Spark: the header is each file's own first line, read before
any query, so neither file sizes nor a data row decide the columns (issue 18).

Spark's text scan orders files by size, so its first row comes from the largest file; the
engine reads each file's first line itself and refuses files whose first lines differ, as
the DuckDB engine does for a glob."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import veil
from spark_support import spark_session
from veil.errors import SchemaError

pytestmark = pytest.mark.spark

HEADER = "uid,income,city"


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


def rows(uids: range) -> str:
    return "".join(f"{u},{u * 10},c{u % 3}\n" for u in uids)


def engine(spark: Any, source: Path | str, **options: Any) -> Any:
    from veil.engines.spark import SparkEngine

    return SparkEngine(spark, {"t": str(source)}, **options)


def collected(e: Any) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in e._frames["t"].collect()), key=repr)


def test_a_directory_whose_largest_file_has_no_header_is_refused_without_quoting_it(
    spark: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "people.csv"
    folder.mkdir()
    (folder / "a.csv").write_text(f"{HEADER}\n{rows(range(2))}", encoding="utf-8")
    (folder / "b.csv").write_text(rows(range(100, 400)), encoding="utf-8")  # the largest
    with pytest.raises(SchemaError, match=r"b\.csv' does not start with the header of") as caught:
        engine(spark, folder)
    # the data row that would have been the header ("100,1000,c1"), not quoted; the message
    # names the files, whose temporary directory may itself hold "100" (pytest-100)
    message = str(caught.value).replace(str(tmp_path), "<tmp>")
    assert "<tmp>/people.csv/b.csv" in message
    assert "100" not in message


def test_files_with_other_columns_or_an_empty_file_are_refused(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_text(f"{HEADER}\n{rows(range(3))}", encoding="utf-8")
    (tmp_path / "b.csv").write_text(f"uid,city,income\n{rows(range(3, 9))}", encoding="utf-8")
    with pytest.raises(SchemaError, match="the files of one table must have the same first line"):
        engine(spark, tmp_path / "*.csv")
    (tmp_path / "b.csv").write_text("", encoding="utf-8")
    with pytest.raises(SchemaError, match=r"b\.csv' does not start with the header"):
        engine(spark, tmp_path / "*.csv")


def test_a_directory_of_files_with_one_header_reads_every_row_as_text_whatever_the_sizes(
    spark: Any, tmp_path: Path
) -> None:
    folder = tmp_path / "people.csv"
    folder.mkdir()
    (folder / "a.csv").write_text(f"{HEADER}\n{rows(range(2))}", encoding="utf-8")
    (folder / "b.csv").write_bytes(f"\ufeff{HEADER}\r\n{rows(range(2, 300))}".encode())
    with gzip.open(folder / "c.csv.gz", "wt", encoding="utf-8") as handle:
        handle.write(f"{HEADER}\n{rows(range(300, 305))}")
    e = engine(spark, folder)
    text = pa.string()
    assert e.schema("t") == pa.schema([("uid", text), ("income", text), ("city", text)])
    expected = [(str(u), str(u * 10), f"c{u % 3}") for u in range(305)]
    assert collected(e) == sorted(expected, key=repr)  # no header line among them
    assert any("every column is text" in note for note in e.notes("t"))


def test_a_declared_glob_is_typed_and_reads_the_same_rows_as_duckdb(
    spark: Any, tmp_path: Path
) -> None:
    (tmp_path / "a.csv").write_text(f"{HEADER}\n{rows(range(4))}1,N/A,\n", encoding="utf-8")
    (tmp_path / "b.csv").write_text(f"{HEADER}\n{rows(range(4, 50))}", encoding="utf-8")
    schema = {"t": {"uid": "BIGINT", "income": "DOUBLE"}}
    budget = veil.Budget(epsilon=10)
    on_spark = veil.Session.spark(spark, {"t": str(tmp_path / "*.csv")}, schema=schema,
                                  privacy_unit="uid", budget=budget)  # fmt: skip
    on_duckdb = veil.Session.local({"t": str(tmp_path / "*.csv")}, schema=schema,
                                   privacy_unit="uid", budget=budget)  # fmt: skip
    assert on_spark.engine.schema("t").field("income").type == pa.float64()
    spark_rows = collected(on_spark.engine)
    duck = on_duckdb.engine.connection.sql("SELECT * FROM t").fetchall()  # type: ignore[attr-defined]
    assert spark_rows == sorted(duck, key=repr)
    assert len(spark_rows) == 51
    assert (1, None, None) in spark_rows


def test_a_file_that_is_not_in_the_format_its_suffix_names_is_refused(
    spark: Any, tmp_path: Path
) -> None:
    (tmp_path / "a.csv.gz").write_bytes(b"uid,income\n1,2\n")  # not gzip
    with pytest.raises(SchemaError, match=r"cannot read the first line of .*a\.csv\.gz"):
        engine(spark, tmp_path / "a.csv.gz")


def test_a_path_with_no_file_is_a_schema_error(spark: Any, tmp_path: Path) -> None:
    for missing in (tmp_path / "nope.csv", tmp_path / "nope*.csv"):
        with pytest.raises(SchemaError, match=r"cannot list .*PATH_NOT_FOUND"):
            engine(spark, missing)
