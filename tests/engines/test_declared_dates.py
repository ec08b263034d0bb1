"""Declared DATE and TIMESTAMP columns read one fixed rule on both engines: ISO 8601 texts
only (``veil.engines.declared.ISO_DATE`` / ``ISO_TIMESTAMP``), anything else NULL (issue 18).

The engines' own casts differ — DuckDB reads ``2020/01/05`` and ``24:00:00``, Spark reads
``2020`` and ``2020-01-05 BC`` — so without the rule the same file would give other rows on
each, and a date format would be a property of the engine rather than of the declaration."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from veil.engines.duckdb import DuckDBEngine

D, T = dt.date, dt.datetime

DATES: list[tuple[str, dt.date | None]] = [
    ("2020-01-05", D(2020, 1, 5)),
    ("2024-02-29", D(2024, 2, 29)),
    ("0001-01-01", D(1, 1, 1)),
    ("9999-12-31", D(9999, 12, 31)),
    ("2020/01/05", None),  # DuckDB's cast reads it
    ("2020-1-5", None),  # both casts read it
    ("2020-01-5", None),
    ("2020", None),  # Spark's cast reads it
    ("2020-01", None),
    ("+2020-01-05", None),
    ("2020-01-05 BC", None),
    (" 2020-01-05", None),
    ("2020-01-05 ", None),
    ("2020-01-05T00:00", None),
    ("2023-02-29", None),
    ("2020-13-01", None),
    ("10000-01-01", None),
    ("20200105", None),
    ("05.01.2020", None),
    ("N/A", None),
]
STAMPS: list[tuple[str, dt.datetime | None]] = [
    ("2024-01-31 12:00:00", T(2024, 1, 31, 12)),
    ("2024-01-31T12:00:00", T(2024, 1, 31, 12)),
    ("2024-01-31 12:34", T(2024, 1, 31, 12, 34)),
    ("2024-01-31", T(2024, 1, 31)),
    ("2024-01-31 12:00:00.5", T(2024, 1, 31, 12, 0, 0, 500_000)),
    ("2024-01-31 23:59:59.123456", T(2024, 1, 31, 23, 59, 59, 123_456)),
    ("2024-01-31 24:00:00", None),  # DuckDB's cast reads it as the next midnight
    ("2024-01-31 12", None),  # Spark's cast reads it
    ("2024/01/31 12:00:00", None),  # DuckDB's cast reads it
    ("2024-01-31  12:00:00", None),
    ("2024-1-31 1:2:3", None),
    ("2024-01-31 12:00:00.1234567", None),
    ("2024-01-31 12:00:00.", None),
    ("2024-01-31 12:00:00Z", None),  # a zone: both casts drop it silently
    ("2024-01-31 12:00:00+02:00", None),
    ("2024-01-31 12:00:00 UTC", None),
    ("2024-02-30 12:00:00", None),
    ("2024-01-31 23:60:00", None),
]
N = max(len(DATES), len(STAMPS))
SCHEMA = {"t": {"k": "INTEGER", "d": "DATE", "ts": "TIMESTAMP"}}


def texts(i: int) -> tuple[str | None, str | None]:
    return (
        DATES[i][0] if i < len(DATES) else None,
        STAMPS[i][0] if i < len(STAMPS) else None,
    )


def expected() -> list[tuple[Any, ...]]:
    return [
        (
            i,
            DATES[i][1] if i < len(DATES) else None,
            STAMPS[i][1] if i < len(STAMPS) else None,
        )
        for i in range(N)
    ]


def csv_cell(text: str | None) -> str:
    return "" if text is None else '"' + text.replace('"', '""') + '"'


def write_csv(tmp_path: Path) -> Path:
    path = tmp_path / "dates.csv"
    lines = ["k,d,ts", *(f"{i},{','.join(map(csv_cell, texts(i)))}" for i in range(N))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def duckdb_rows(engine: DuckDBEngine) -> list[tuple[Any, ...]]:
    return engine.connection.sql("SELECT k, d, ts FROM t ORDER BY k").fetchall()


def spark_rows(engine: Any) -> list[tuple[Any, ...]]:
    frame = engine._frames["t"].select("k", "d", "ts").orderBy("k")
    return [tuple(r) for r in frame.collect()]


def test_duckdb_reads_only_iso_8601_dates_and_timestamps_from_a_csv(tmp_path: Path) -> None:
    engine = DuckDBEngine({"t": write_csv(tmp_path)}, schema=SCHEMA)
    assert duckdb_rows(engine) == expected()


def test_duckdb_applies_the_same_rule_to_json_lines_and_to_text_in_a_dataframe(
    tmp_path: Path,
) -> None:
    path = tmp_path / "dates.jsonl"
    records = [dict(zip(("k", "d", "ts"), (i, *texts(i)), strict=True)) for i in range(N)]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert duckdb_rows(DuckDBEngine({"t": path}, schema=SCHEMA)) == expected()
    frame = pd.DataFrame(records)  # d and ts: object columns, read as text
    assert duckdb_rows(DuckDBEngine({"t": frame}, schema=SCHEMA)) == expected()


def test_a_typed_timestamp_declared_date_is_cast_as_a_value_not_as_text() -> None:
    frame = pd.DataFrame({"k": [0], "d": [pd.Timestamp("2024-01-31 12:00")], "ts": [None]})
    rows = duckdb_rows(DuckDBEngine({"t": frame}, schema=SCHEMA))
    assert rows == [(0, D(2024, 1, 31), None)]


@pytest.mark.spark
def test_spark_reads_the_same_dates_and_timestamps_as_duckdb(tmp_path: Path) -> None:
    from spark_support import spark_session
    from veil.engines.spark import SparkEngine

    spark = spark_session()
    path = write_csv(tmp_path)
    assert spark_rows(SparkEngine(spark, {"t": str(path)}, schema=SCHEMA)) == expected()
    frame = spark.createDataFrame(
        [(i, *texts(i)) for i in range(N)], "k int, d string, ts string"
    )  # a DataFrame's string columns follow the same rule
    assert spark_rows(SparkEngine(spark, {"t": frame}, schema=SCHEMA)) == expected()
