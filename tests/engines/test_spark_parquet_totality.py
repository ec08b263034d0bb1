"""Parquet on Spark reads totally, whatever one person's values or file (issue 33).

Files written without validation (:mod:`parquet_support`) hold what Spark's reader failed on
after the charge, only when such a row or file existed:

* a DECIMAL of more than 18 digits whose stored integer lies beyond its precision: stored in
  at most 15 bytes it is now read as DECIMAL(38, s) and clamped into its range (released on
  both neighbours); stored in 16 bytes a query reading it is refused from the footer, free;
* a DECIMAL of at most 18 digits beyond its precision: clamped (Spark's row-based reader,
  which checks it, is never used: the vectorized one is switched on for each query);
* a date before 1582 or an INT96 day beyond any range, under the rebase mode ``EXCEPTION``
  (Spark 3's default): read as stored, on both neighbours, whatever the session sets;
* one person's file of another layout in a directory: skipped (named on ``veil.sources``);
* strings that are not UTF-8: released on both neighbours.

No message names a file or a folder.
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from parquet_support import int96, raw_decimals, unchecked_strings, write_int96
from spark_support import spark_session
from veil.engines.footers import read_footer
from veil.engines.spark import SparkEngine
from veil.errors import QueryFailedError, UserError

pytestmark = pytest.mark.spark

_FILES = itertools.count()
BASE = 12  # units in D′
TARGET = 10**6  # the added unit
MARK = "zq_person"  # in every file name: no message may name it


@pytest.fixture
def spark() -> Any:
    return spark_session()


def outcome(spark: Any, source: str, sql: str, **options: Any) -> tuple[str, str]:
    """("released", ""), ("refused free", message) or ("failed after the charge", "")."""
    session = veil.Session.spark(
        spark, {"t": source}, privacy_unit="uid", budget=veil.Budget(epsilon=100, delta=1e-3)
    )
    before = session.remaining()
    try:
        session.sql(sql, epsilon=1, **options)
    except QueryFailedError as err:
        return ("failed after the charge", str(err))
    except UserError as err:
        assert session.remaining() == before, "a refused query was charged"
        return ("refused free", str(err))
    return ("released", "")


def _write(tmp: Path, column: pa.Array, odd: pa.Array | None) -> str:
    uids = list(range(BASE)) + ([TARGET] * len(odd) if odd is not None else [])
    values = column if odd is None else pa.concat_arrays([column, odd])
    table = pa.table({"uid": pa.array(uids, pa.int64()), "g": ["a"] * len(uids), "c": values})
    path = tmp / f"{MARK}{next(_FILES)}.parquet"
    pq.write_table(table, path)
    return str(path)


def _both(spark: Any, tmp: Path, column: pa.Array, odd: pa.Array, sql: str, **options: Any):
    d = outcome(spark, _write(tmp, column, odd), sql, **options)
    d_prime = outcome(spark, _write(tmp, column, None), sql, **options)
    return d, d_prime


DECIMALS = [(5, 2, 3), (18, 2, 8), (20, 2, 9), (35, 4, 15)]  # precision, scale, bytes
QUERIES = [
    ("SELECT SUM(c) AS s FROM t", {"bounds": {"c": (0, 10)}}),
    ("SELECT COUNT(*) AS n FROM t WHERE c > 0", {}),
    ("SELECT AVG(c) AS a FROM t", {"bounds": {"c": (0, 10)}}),
]


@pytest.mark.parametrize(("precision", "scale", "width"), DECIMALS)
def test_a_decimal_beyond_its_precision_is_clamped_on_both_neighbours(
    spark: Any, tmp_path: Path, precision: int, scale: int, width: int
) -> None:
    base = raw_decimals(precision, scale, [100] * BASE)
    for extreme in (-(2 ** (8 * width - 1)), 2 ** (8 * width - 1) - 1):
        odd = raw_decimals(precision, scale, [extreme])
        for sql, options in QUERIES:
            d, d_prime = _both(spark, tmp_path, base, odd, sql, **options)
            assert d == d_prime == ("released", ""), (precision, extreme, sql, d, d_prime)


def test_the_clamped_value_is_the_end_of_the_decimals_range(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "clamped.parquet"
    pq.write_table(pa.table({"uid": [1, 2], "c": raw_decimals(20, 2, [5, -(2**71)])}), path)
    engine = SparkEngine(spark, {"t": str(path)})
    with engine._query_conf():
        rows = engine._frame("t").orderBy("uid").select("c").collect()
    assert [str(r[0]) for r in rows] == ["0.05", "-" + "9" * 18 + ".99"]


def test_a_wide_decimal_in_sixteen_bytes_is_refused_free_on_both_neighbours(
    spark: Any, tmp_path: Path
) -> None:
    base = raw_decimals(38, 2, [100] * BASE)
    odd = raw_decimals(38, 2, [-(2**127)])
    for sql, options in QUERIES:
        d, d_prime = _both(spark, tmp_path, base, odd, sql, **options)
        assert d == d_prime, (sql, d, d_prime)
        assert d[0] == "refused free"
        assert "stored in 16 bytes" in d[1]
        assert "at most 35 digits" in d[1]
        assert MARK not in d[1]
        assert str(tmp_path) not in d[1]
    # a query that does not read the column is answered
    d, d_prime = _both(spark, tmp_path, base, odd, "SELECT COUNT(*) AS n FROM t")
    assert d == d_prime == ("released", "")


@pytest.mark.parametrize("mode", ["EXCEPTION", "LEGACY", "CORRECTED"])
def test_ancient_dates_and_int96_days_read_whatever_the_sessions_rebase_mode(
    spark: Any, tmp_path: Path, mode: str
) -> None:
    keys = ("spark.sql.parquet.int96RebaseModeInRead", "spark.sql.parquet.datetimeRebaseModeInRead")
    previous = {k: spark.conf.get(k, None) for k in keys}
    for key in keys:
        spark.conf.set(key, mode)
    try:
        dates = pa.array([19_000] * BASE, pa.date32())
        for extreme in (-(2**31), -719_162):  # the least date32, and 0001-01-01
            odd = pa.array([extreme], pa.date32())
            d, d_prime = _both(
                spark,
                tmp_path,
                dates,
                odd,
                "SELECT COUNT(*) AS n FROM t WHERE c > DATE '2000-01-01'",
            )
            assert d == d_prime == ("released", ""), (mode, extreme, d)
        for day in (1, 2**31 - 1, -(2**31)):
            paths = []
            for with_odd in (True, False):
                path = tmp_path / f"{MARK}{next(_FILES)}.parquet"
                uids = list(range(BASE)) + ([TARGET] if with_odd else [])
                raws = [int96(2_451_545, 0)] * BASE + ([int96(day, 2**62)] if with_odd else [])
                write_int96(path, {"uid": pa.array(uids, pa.int64())}, "c", raws)
                paths.append(str(path))
            sql = "SELECT COUNT(*) AS n FROM t WHERE c > TIMESTAMP '2000-01-01 00:00:00'"
            results = {outcome(spark, p, sql) for p in paths}
            assert results == {("released", "")}, (mode, day, results)
    finally:
        for key, value in previous.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    assert {k: spark.conf.get(k, None) for k in keys} == previous  # the session's, restored


def test_the_row_based_reader_is_never_used_for_a_query(spark: Any, tmp_path: Path) -> None:
    """Spark's row-based Parquet reader checks every DECIMAL: a session that switches the
    vectorized reader off would fail on a value beyond a DECIMAL(5, 2)'s precision."""
    key = "spark.sql.parquet.enableVectorizedReader"
    spark.conf.set(key, "false")
    try:
        base = raw_decimals(5, 2, [100] * BASE)
        d, d_prime = _both(
            spark,
            tmp_path,
            base,
            raw_decimals(5, 2, [-(2**23)]),
            "SELECT COUNT(*) AS n FROM t WHERE c > 0",
        )
        assert d == d_prime == ("released", "")
        assert spark.conf.get(key) == "false"
    finally:
        spark.conf.unset(key)


def test_strings_that_are_not_utf8_are_released_on_both_neighbours(
    spark: Any, tmp_path: Path
) -> None:
    base = unchecked_strings([b"Paris", b"Lyon"] * (BASE // 2))
    odd = unchecked_strings([b"\xffPa\xc3", b"\xc3"])
    for sql, options in (
        ("SELECT c, COUNT(*) AS n FROM t GROUP BY c", {"delta": 1e-6}),
        ("SELECT COUNT(*) AS n FROM t WHERE c = 'Paris'", {}),
    ):
        d, d_prime = _both(spark, tmp_path, base, odd, sql, **options)
        assert d == d_prime == ("released", ""), (sql, d, d_prime)


ODD_FILES = {
    "age as text": lambda f: pq.write_table(pa.table({"uid": [999], "age": ["forty"]}), f),
    "one more column": lambda f: pq.write_table(
        pa.table({"uid": [999], "age": [40], "hiv": [1]}), f
    ),
    "not parquet": lambda f: f.write_bytes(b"PAR1 but not really\x00\xff"),
    "empty": lambda f: f.write_bytes(b""),
}


@pytest.mark.parametrize("odd", list(ODD_FILES))
@pytest.mark.parametrize("first", [True, False], ids=["first", "last"])
def test_one_persons_file_of_another_layout_in_a_directory_changes_only_its_rows(
    spark: Any, tmp_path: Path, odd: str, first: bool, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "people"
    folder.mkdir()
    for uid in range(4):
        pq.write_table(pa.table({"uid": [uid], "age": [30 + uid]}), folder / f"p{uid}.parquet")
    layout = read_footer(str(folder / "p0.parquet"))
    assert layout is not None
    sql = "SELECT COUNT(*) AS n, SUM(age) AS s FROM t"

    def run() -> tuple[str, str]:
        engine = SparkEngine(spark, {"t": str(folder)}, layouts={"t": layout.layout})
        session = veil.Session.on(engine, privacy_unit="uid", budget=veil.Budget(epsilon=10))
        try:
            session.sql(sql, epsilon=1, bounds={"age": (0, 100)})
        except QueryFailedError as err:
            return ("failed after the charge", str(err))
        except UserError as err:
            return ("refused", str(err))
        return ("released", "")

    without = run()
    ODD_FILES[odd](folder / f"{'a' if first else 'z'}_{MARK}.parquet")
    with caplog.at_level(logging.WARNING, logger="veil.sources"):
        with_odd = run()
    assert with_odd == without == ("released", "")
    assert any(MARK in r.getMessage() for r in caplog.records)  # the operator is told


@pytest.mark.parametrize(
    "change", ["rewritten as another layout", "rewritten as not Parquet", "removed"]
)
def test_a_file_changed_after_registration_changes_only_its_rows(
    spark: Any, tmp_path: Path, change: str
) -> None:
    folder = tmp_path / f"{MARK}_people"
    folder.mkdir()
    for uid in range(4):
        pq.write_table(pa.table({"uid": [uid], "age": [30 + uid]}), folder / f"p{uid}.parquet")
    engine = SparkEngine(spark, {"t": str(folder)})
    session = veil.Session.on(engine, privacy_unit="uid", budget=veil.Budget(epsilon=10))
    session.sql("SELECT COUNT(*) AS n FROM t", epsilon=1)
    person = folder / "p2.parquet"
    if change == "removed":
        person.unlink()
    elif change == "rewritten as not Parquet":
        person.write_bytes(b"PAR1 but not really")
    else:
        pq.write_table(pa.table({"uid": [2], "age": ["thirty-two"]}), person)
    before = session.remaining()
    result = session.sql(
        "SELECT COUNT(*) AS n, SUM(age) AS s FROM t", epsilon=1, bounds={"age": (0, 100)}
    )
    assert session.remaining() != before  # answered, and charged
    assert result.rows
    assert engine.data_version("t")  # the files it reads now can be stat-ed
