"""Neighbouring CSV files: one adversarial line changes nothing but its own row (issue 18).

For each adversarial line — a non-numeric cell, empty cells, odd quoting, an unterminated
quote, another date format, too many or too few cells, invalid UTF-8, a NUL byte, a CRLF
ending, an empty line, a repeated header, a line over the size limit, a line with more cells
than Spark's CSV parser allows — a base file D and D plus that line (first, in the middle,
last, last without a final newline):

* every query has the same outcome on both (released / refused free / failed after charge),
  and none fails;
* the engine's exact rows of all the other lines are identical, and the added line gives at
  most one row, the one its own cells say.

A quoted line break is not in the list on purpose: it is a line break (lines.py), so such a
"line" is two lines, each one its own row (see the last test).
"""

from __future__ import annotations

import datetime
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import veil
from veil.engines.lines import MAX_LINE_BYTES
from veil.errors import QueryFailedError, UserError

HEADER = b"uid,income,born,city"
CITIES = ("Paris", "Lyon", "Nice")
BASE = [
    f"{i},{(i * 37) % 100},{1990 + i % 25}-{1 + i % 12:02d}-{1 + i % 28:02d},{CITIES[i % 3]}"
    for i in range(1, 41)
]
SCHEMA = {"t": {"uid": "INTEGER", "income": "DOUBLE", "born": "DATE"}}
DAY = datetime.date(2001, 2, 3)

ADVERSARIAL: dict[str, tuple[bytes, tuple[Any, ...] | None]] = {
    # name: (the added line, without its line break; the row it gives, None for no row)
    "non_numeric": (b"90,abc,2001-02-03,Paris", (90, None, DAY, "Paris")),
    "empty_cells": (b"91,,,", (91, None, None, None)),
    "oddly_quoted": (b'92,"1"0,2001-02-03,Paris', (92, None, None, None)),
    "quoted": (b'93,"1,5","2001-02-03","Par""is"', (93, None, DAY, 'Par"is')),
    "unterminated_quote": (b'94,"10,2001-02-03,Paris', (94, None, None, None)),
    "lone_quote": (b'"', (None, None, None, None)),
    "other_date_format": (b"95,10,03/02/2001,Paris", (95, 10.0, None, "Paris")),
    "too_many_cells": (b"96,10,2001-02-03,Paris,x,y,z", (96, 10.0, DAY, "Paris")),
    "too_few_cells": (b"97,10", (97, 10.0, None, None)),
    "invalid_utf8": (b"98,\xff\xfe,2001-02-03,Paris", None),
    "nul_byte": (b"99,1\x000,2001-02-03,Par\x00is", (99, None, DAY, "Par\x00is")),
    "crlf": (b"100,10,2001-02-03,Paris\r", (100, 10.0, DAY, "Paris")),  # \r + the next \n
    "empty_line": (b"", None),
    "header_again": (HEADER, None),
    "over_the_size_limit": (b"101," + b"9" * (MAX_LINE_BYTES + 8) + b",2001-02-03,Paris", None),
    "more_cells_than_spark_allows": (b"102," + b"," * 30_000, (102, None, None, None)),
}
POSITIONS = ("first", "middle", "last", "last_without_newline")

QUERIES: list[tuple[str, dict[str, tuple[int, int]]]] = [
    ("SELECT COUNT(*) AS n FROM t", {}),
    ("SELECT SUM(income) AS s FROM t", {"income": (0, 100)}),
    ("SELECT AVG(income) AS a FROM t", {"income": (0, 100)}),
    ("SELECT city, COUNT(*) AS n FROM t GROUP BY city", {}),
    ("SELECT COUNT(*) AS n FROM t WHERE born >= DATE '2000-01-01'", {}),
    ("SELECT SUM(city) AS s FROM t", {}),  # text: refused free on both neighbours
]


def neighbour(extra: bytes | None, position: str) -> bytes:
    """D (``extra`` None) or D with ``extra`` added at ``position``."""
    lines = [line.encode() for line in BASE]
    if extra is None:
        return HEADER + b"\n" + b"\n".join(lines) + b"\n"
    if position == "last_without_newline":
        return HEADER + b"\n" + b"\n".join(lines) + b"\n" + extra
    at = {"first": 0, "middle": len(lines) // 2, "last": len(lines)}[position]
    return HEADER + b"\n" + b"\n".join([*lines[:at], extra, *lines[at:]]) + b"\n"


def outcome(session: veil.Session, sql: str, bounds: dict[str, tuple[int, int]]) -> str:
    """released / refused (a user error, nothing charged) / failed (charged)."""
    before = session.remaining()
    delta = 1e-8 if "GROUP BY" in sql else None
    try:
        session.sql(sql, epsilon=1, delta=delta, bounds=bounds)
    except QueryFailedError:
        return "failed"
    except UserError:
        assert session.remaining() == before
        return "refused"
    return "released"


def check_rows(without: list[tuple[Any, ...]], with_line: list[tuple[Any, ...]], row: Any) -> None:
    """The rows of every other line are unchanged; the added line gives ``row`` or nothing."""
    assert Counter(without) - Counter(with_line) == Counter()
    assert Counter(with_line) - Counter(without) == Counter([row] if row is not None else [])


def write(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / f"{name}.csv"
    path.write_bytes(content)
    return path


# -- DuckDB ---------------------------------------------------------------------------------------


def local(path: Path) -> veil.Session:
    budget = veil.Budget(epsilon=100, delta=1e-6)
    return veil.Session.local({"t": path}, privacy_unit="uid", budget=budget, schema=SCHEMA)


def duckdb_rows(session: veil.Session) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = session.engine.connection.sql('SELECT * FROM "t"').fetchall()  # type: ignore[attr-defined]
    return rows


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[tuple[Any, ...]]]:
    """D's outcomes and rows on DuckDB."""
    session = local(write(tmp_path_factory.mktemp("d"), "d", neighbour(None, "")))
    outcomes = [outcome(session, sql, bounds) for sql, bounds in QUERIES]
    assert outcomes == ["released"] * 5 + ["refused"]
    return outcomes, duckdb_rows(session)


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("case", list(ADVERSARIAL))
def test_one_adversarial_line_changes_only_its_own_row_on_duckdb(
    base: tuple[list[str], list[tuple[Any, ...]]], tmp_path: Path, case: str, position: str
) -> None:
    extra, row = ADVERSARIAL[case]
    session = local(write(tmp_path, case, neighbour(extra, position)))
    assert [outcome(session, sql, bounds) for sql, bounds in QUERIES] == base[0]
    check_rows(base[1], duckdb_rows(session), row)


def test_a_quoted_line_break_is_a_line_break_and_each_part_is_its_own_row(
    base: tuple[list[str], list[tuple[Any, ...]]], tmp_path: Path
) -> None:
    content = neighbour(b'103,"1\n0",2001-02-03,Paris', "middle")
    session = local(write(tmp_path, "split", content))
    added = Counter(duckdb_rows(session)) - Counter(base[1])
    # '103,"1' (an unterminated quote) and '0",2001-02-03,Paris' (its cells shifted by one:
    # uid '0"', income '2001-02-03', born 'Paris' convert to nothing)
    assert added == Counter([(103, None, None, None), (None, None, None, None)])
    assert Counter(base[1]) - Counter(duckdb_rows(session)) == Counter()


# -- Spark ----------------------------------------------------------------------------------------

SPARK_OUTCOME_CASES = ("unterminated_quote", "more_cells_than_spark_allows", "non_numeric")


def on_spark(path: Path) -> veil.Session:
    from spark_support import spark_session

    budget = veil.Budget(epsilon=100, delta=1e-6)
    return veil.Session.spark(
        spark_session(), {"t": str(path)}, privacy_unit="uid", budget=budget, schema=SCHEMA
    )


def spark_rows(session: veil.Session) -> list[tuple[Any, ...]]:
    frame = session.engine._frames["t"]  # type: ignore[attr-defined]
    return [tuple(r) for r in frame.collect()]


@pytest.fixture(scope="module")
def spark_base(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], list[tuple[Any, ...]]]:
    session = on_spark(write(tmp_path_factory.mktemp("d"), "d", neighbour(None, "")))
    return [outcome(session, sql, bounds) for sql, bounds in QUERIES], spark_rows(session)


@pytest.mark.spark
@pytest.mark.parametrize("case", list(ADVERSARIAL))
def test_one_adversarial_line_changes_only_its_own_row_on_spark(
    spark_base: tuple[list[str], list[tuple[Any, ...]]], tmp_path: Path, case: str
) -> None:
    extra, row = ADVERSARIAL[case]
    session = on_spark(write(tmp_path, case, neighbour(extra, "middle")))
    if case == "invalid_utf8" and int(session.engine._spark.version.split(".")[0]) < 4:  # type: ignore[attr-defined]
        pytest.skip("Spark < 4 has no is_valid_utf8: the line is kept, its bytes as U+FFFD")
    check_rows(spark_base[1], spark_rows(session), row)
    if case in SPARK_OUTCOME_CASES:
        assert [outcome(session, sql, bounds) for sql, bounds in QUERIES] == spark_base[0]


@pytest.mark.spark
def test_spark_and_duckdb_read_the_same_rows_from_the_same_file(
    spark_base: tuple[list[str], list[tuple[Any, ...]]],
    base: tuple[list[str], list[tuple[Any, ...]]],
    tmp_path: Path,
) -> None:
    assert spark_base[0] == base[0]
    lines = b"\n".join(extra for extra, _ in ADVERSARIAL.values())
    path = write(tmp_path, "all", neighbour(None, "") + lines + b"\n")
    assert Counter(spark_rows(on_spark(path))) == Counter(duckdb_rows(local(path)))
