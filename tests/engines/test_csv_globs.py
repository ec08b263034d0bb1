"""A glob of per-person CSV files: each file decides only its own rows (issue 33).

One person's file without the header (or with one more column, or empty, or not UTF-8) used
to turn every query into a free refusal whose message quoted that file's server path. With the
table's header recorded by its owner (``layouts=``, as the catalog records it at
registration), such a file is skipped — its rows are not read, the operator's log names it —
and every query has the same outcome and the other files the same rows, on DuckDB and Spark.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlglot

import veil
from veil.engines.duckdb import DuckDBEngine
from veil.errors import QueryFailedError, SchemaError, UserError

HEADER = "uid,income,city"
SCHEMA = {"t": {"uid": "BIGINT", "income": "DOUBLE"}}
PEOPLE = 30

ODD: dict[str, Callable[[Path], None]] = {
    "no header": lambda f: f.write_text("9999,123,Paris\n", encoding="utf-8"),
    "one more column": lambda f: f.write_text(f"{HEADER},extra\n9999,1,Nice,x\n", encoding="utf-8"),
    "another order": lambda f: f.write_text("income,uid,city\n5,9999,Nice\n", encoding="utf-8"),
    "empty": lambda f: f.write_bytes(b""),
    "not utf8": lambda f: f.write_bytes(b"uid,inc\xffome,city\n9999,1,Nice\n"),
    "header only": lambda f: f.write_text(f"{HEADER}\n", encoding="utf-8"),
}
QUERIES: list[tuple[str, dict[str, Any]]] = [
    ("SELECT COUNT(*) AS n FROM t", {}),
    ("SELECT SUM(income) AS s FROM t", {"bounds": {"income": (0, 100)}}),
    ("SELECT city, COUNT(*) AS n FROM t GROUP BY city", {"delta": 1e-6}),
]


def _folder(tmp: Path) -> Path:
    folder = tmp / "people"
    folder.mkdir()
    for uid in range(PEOPLE):
        (folder / f"p{uid:03d}.csv").write_text(
            f"{HEADER}\n{uid},{uid % 9 * 10},{('Paris', 'Lyon')[uid % 2]}\n", encoding="utf-8"
        )
    return folder


def _odd(folder: Path, case: str) -> None:
    # named to sort first: without a recorded header its first line would be taken as the header
    ODD[case](folder / "a-person.csv")


def _outcomes(session_of: Callable[[], veil.Session]) -> list[tuple[str, str]]:
    out = []
    for sql, options in QUERIES:
        session = session_of()
        before = session.remaining()
        try:
            session.sql(sql, epsilon=1, **options)
            out.append(("released", ""))
        except QueryFailedError:
            out.append(("failed after the charge", ""))
        except UserError as err:
            assert session.remaining() == before
            out.append(("refused free", str(err)))
        finally:
            session.close()
    return out


def _duckdb(glob: str) -> veil.Session:
    engine = DuckDBEngine({"t": glob}, schema=SCHEMA, layouts={"t": HEADER})
    return veil.Session.on(engine, privacy_unit="uid", budget=veil.Budget(epsilon=10, delta=1e-3))


def _rows(engine: Any) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = engine.connection.sql('SELECT * FROM "t"').fetchall()
    return sorted(rows, key=repr)


@pytest.mark.parametrize("case", list(ODD))
def test_one_persons_file_of_another_header_changes_nothing_but_its_rows_on_duckdb(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    folder = _folder(tmp_path)
    glob = str(folder / "*.csv")
    before = _outcomes(lambda: _duckdb(glob))
    rows = _rows(DuckDBEngine({"t": glob}, schema=SCHEMA, layouts={"t": HEADER}))
    _odd(folder, case)
    with caplog.at_level(logging.WARNING, logger="veil.sources"):
        after = _outcomes(lambda: _duckdb(glob))
        engine = DuckDBEngine({"t": glob}, schema=SCHEMA, layouts={"t": HEADER})
    assert after == before == [("released", "")] * 3
    assert _rows(engine) == rows  # a bare header adds no row either
    if case != "header only":  # a file with the header and no row is read (it has none)
        assert "a-person.csv" in caplog.text  # the operator's log names the skipped file


def test_without_a_recorded_header_the_owner_is_told_which_file_differs(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    _odd(folder, "no header")
    with pytest.raises(SchemaError, match=r"p000\.csv' does not start with the header of"):
        DuckDBEngine({"t": str(folder / "*.csv")})


def test_when_every_file_is_skipped_the_table_is_empty_and_still_answers(tmp_path: Path) -> None:
    folder = tmp_path / "people"
    folder.mkdir()
    _odd(folder, "no header")
    engine = DuckDBEngine({"t": str(folder / "*.csv")}, schema=SCHEMA, layouts={"t": HEADER})
    assert _rows(engine) == []
    assert [f.name for f in engine.schema("t")] == ["uid", "income", "city"]
    assert _outcomes(lambda: _duckdb(str(folder / "*.csv")))[0] == ("released", "")


def test_files_added_later_are_held_to_the_header_as_the_first_were(tmp_path: Path) -> None:
    """An engine kept open (a server's pool) reads a new person's file, and skips a file
    whose first line is not the header, from the next query on."""
    folder = _folder(tmp_path)
    engine = DuckDBEngine({"t": str(folder / "*.csv")}, schema=SCHEMA)  # header from the files
    count = len(_rows(engine))
    (folder / "zz-new.csv").write_text(f"{HEADER}\n777,1,Nice\n", encoding="utf-8")
    _odd(folder, "one more column")
    engine.check(sqlglot.parse_one('SELECT COUNT(*) FROM "t"', read="duckdb"))  # rebuilt here
    assert engine.schema("t").names == ["uid", "income", "city"]
    assert len(_rows(engine)) == count + 1
    assert (777, 1.0, "Nice") in _rows(engine)


def test_a_gzip_file_that_is_not_gzip_is_skipped_among_the_others(tmp_path: Path) -> None:
    folder = tmp_path / "people"
    folder.mkdir()
    for uid in range(3):
        with gzip.open(folder / f"p{uid}.csv.gz", "wt", encoding="utf-8") as handle:
            handle.write(f"{HEADER}\n{uid},2,Nice\n")
    (folder / "a-person.csv.gz").write_bytes(b"uid,income,city\n9,9,Nice\n")  # not gzip
    glob = str(folder / "*.csv.gz")
    engine = DuckDBEngine({"t": glob}, schema=SCHEMA, layouts={"t": HEADER})
    assert _rows(engine) == [(0, 2.0, "Nice"), (1, 2.0, "Nice"), (2, 2.0, "Nice")]
    assert _outcomes(lambda: _duckdb(glob)) == [("released", "")] * 3


# -- Spark ------------------------------------------------------------------------------------


def _spark(glob: str) -> veil.Session:
    from spark_support import spark_session
    from veil.engines.spark import SparkEngine

    engine = SparkEngine(spark_session(), {"t": glob}, schema=SCHEMA, layouts={"t": HEADER})
    return veil.Session.on(engine, privacy_unit="uid", budget=veil.Budget(epsilon=10, delta=1e-3))


@pytest.mark.spark
@pytest.mark.parametrize("case", ["no header", "one more column", "empty"])
def test_one_persons_file_of_another_header_changes_nothing_but_its_rows_on_spark(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    folder = _folder(tmp_path)
    glob = str(folder / "*.csv")
    before = _outcomes(lambda: _spark(glob))
    rows = sorted((tuple(r) for r in _spark(glob).engine._frames["t"].collect()), key=repr)  # type: ignore[attr-defined]
    _odd(folder, case)
    with caplog.at_level(logging.WARNING, logger="veil.sources"):
        assert _outcomes(lambda: _spark(glob)) == before == [("released", "")] * 3
        engine = _spark(glob).engine
    after = sorted((tuple(r) for r in engine._frames["t"].collect()), key=repr)  # type: ignore[attr-defined]
    assert after == rows
    assert "a-person.csv" in caplog.text


@pytest.mark.spark
def test_on_spark_a_table_whose_files_are_all_skipped_is_empty(tmp_path: Path) -> None:
    folder = tmp_path / "people"
    folder.mkdir()
    _odd(folder, "no header")
    engine = _spark(str(folder / "*.csv")).engine
    assert engine._frames["t"].count() == 0  # type: ignore[attr-defined]
    assert engine.schema("t").names == ["uid", "income", "city"]
