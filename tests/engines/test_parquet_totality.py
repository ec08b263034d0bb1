"""Parquet on DuckDB reads totally, whatever one person's values (issue 33).

Files written without validation (Spark, Hive, Java writers; :mod:`parquet_support`) hold what
DuckDB's reader used to fail on after the charge, only when such a row existed:

* a STRING that is not UTF-8 — in every encoding, and inside lists, structs and maps: now read
  with each invalid byte as ``?`` (``utf8_validation='replace'``), released on both neighbours;
* a DECIMAL whose stored integer lies beyond its precision (−2^127 in a DECIMAL(38, 10) even
  aborted the database): now clamped into its type's range, in the column's own type;
* INT96 timestamps beyond DuckDB's range, TIME beyond one day, JSON that is not JSON, a
  DECIMAL DuckDB cannot guard: refused from the footer, free, on both neighbours.

A glob of per-person Parquet files is held to the table's layout: a file whose columns or
storages differ is skipped (``layouts=``, as the catalog records it), so it changes nothing
but its own rows.
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
from veil.engines.duckdb import DuckDBEngine
from veil.engines.footers import read_footer
from veil.engines.sources import expand, keep
from veil.errors import QueryFailedError, SchemaError, UserError

_FILES = itertools.count()
BASE = 40  # units in D′
TARGET = 10**6  # the added unit


def _path(tmp: Path) -> Path:
    return tmp / f"t{next(_FILES)}.parquet"


def outcome(source: Any, sql: str, **options: Any) -> tuple[str, str]:
    """("released", ""), ("refused free", message) or ("failed after the charge", "")."""
    session = veil.Session.local(
        {"t": source}, privacy_unit="uid", budget=veil.Budget(epsilon=100, delta=1e-3)
    )
    before = session.remaining()
    try:
        session.sql(sql, epsilon=1, **options)
    except QueryFailedError:
        return ("failed after the charge", "")
    except UserError as err:
        assert session.remaining() == before, "a refused query was charged"
        return ("refused free", str(err))
    finally:
        session.close()
    return ("released", "")


def _neighbours(tmp: Path, column: pa.Array, odd: pa.Array, **write: Any) -> tuple[Path, Path]:
    """D (``column`` for the base units and ``odd`` for the target's rows) and D′ (without)."""
    uids = list(range(BASE))
    paths = []
    for values, ids in ((pa.concat_arrays([column, odd]), [*uids, *[TARGET] * len(odd)]),
                        (column, uids)):  # fmt: skip
        table = pa.table({"uid": pa.array(ids, pa.int64()), "w": ["t"] * len(ids), "c": values})
        path = _path(tmp)
        pq.write_table(table, path, **write)
        paths.append(path)
    return paths[0], paths[1]


def _rows(path: Path, sql: str = 'SELECT "c" FROM "t" ORDER BY "uid"') -> list[Any]:
    engine = DuckDBEngine({"t": str(path)})
    try:
        return [r[0] for r in engine.connection.sql(sql).fetchall()]
    finally:
        engine.close()


# -- strings that are not UTF-8 ---------------------------------------------------------------

TEXTS = [f"s{i % 5}" for i in range(BASE)]
BAD = [b"\xff", b"ok\xfe\xff", b"\xc3", b"s1\x80"]


def _string_columns() -> dict[str, tuple[pa.Array, pa.Array]]:
    plain = pa.array(TEXTS, pa.string())
    odd = unchecked_strings(BAD)
    lists = pa.ListArray.from_arrays(pa.array(range(len(TEXTS) + 1), pa.int32()), plain)
    odd_lists = pa.ListArray.from_arrays(pa.array([0, 2, 4], pa.int32()), odd)
    structs = pa.StructArray.from_arrays([plain], names=["f"])
    odd_structs = pa.StructArray.from_arrays([odd], names=["f"])
    return {
        "string": (plain, odd),
        "large_string": (plain.cast(pa.large_string()), pa.array(BAD, pa.large_binary()).view(
            pa.large_string())),
        "dictionary": (plain.dictionary_encode(), odd.dictionary_encode()),
        "list": (lists, odd_lists),
        "struct": (structs, odd_structs),
    }  # fmt: skip


STRING_QUERIES = [
    ("SELECT COUNT(*) AS n FROM t WHERE w = 't'", {}),
    ("SELECT c, COUNT(*) AS n FROM t GROUP BY c", {"delta": 1e-6}),
    ("SELECT COUNT(DISTINCT c) AS n FROM t", {}),
]


ENCODED = [(kind, None) for kind in _string_columns()] + [
    (kind, encoding)  # the encodings of a flat string column
    for kind in ("string", "large_string")
    for encoding in ("PLAIN", "DELTA_BYTE_ARRAY", "DELTA_LENGTH_BYTE_ARRAY")
]


@pytest.mark.parametrize(("kind", "encoding"), ENCODED)
def test_a_string_that_is_not_utf8_is_released_on_both_neighbours(
    tmp_path: Path, kind: str, encoding: str | None
) -> None:
    column, odd = _string_columns()[kind]
    write: dict[str, Any] = {}
    if encoding is not None:
        write = {"use_dictionary": False, "column_encoding": {"c": encoding}}
    with_target, without = _neighbours(tmp_path, column, odd, **write)
    for sql, options in STRING_QUERIES:
        if kind == "struct" and "DISTINCT" in sql:
            continue  # a struct has no distinct count in veil: refused alike below
        outcomes = [outcome(p, sql, **options) for p in (with_target, without)]
        assert outcomes[0] == outcomes[1], (sql, outcomes)
        assert outcomes[0][0] in ("released", "refused free"), (sql, outcomes)
    assert _rows(without) == _rows(with_target)[:BASE]  # the others' rows are unchanged


def test_each_invalid_byte_reads_as_a_question_mark(tmp_path: Path) -> None:
    with_target, _ = _neighbours(tmp_path, pa.array(TEXTS), unchecked_strings(BAD))
    assert _rows(with_target)[BASE:] == ["?", "ok??", "?", "s1?"]


# -- decimals beyond their precision ----------------------------------------------------------


@pytest.mark.parametrize(
    ("precision", "scale", "stored", "as_integer"),
    [
        (38, 10, -(2**127), False),  # DuckDB's cast of it aborted the whole database
        (38, 0, -(2**127), False),
        (38, 5, 10**38, False),
        (38, 5, 2**127 - 1, False),
        (20, 5, 10**38, False),
        (9, 2, -(2**31), True),
        (18, 2, -(2**63), True),
        (4, 2, 2**15 - 1, True),
    ],
)
def test_a_decimal_beyond_its_precision_reads_as_its_ranges_end_on_both_neighbours(
    tmp_path: Path, precision: int, scale: int, stored: int, as_integer: bool
) -> None:
    column = raw_decimals(precision, scale, [i * 10**scale for i in range(BASE)])
    odd = raw_decimals(precision, scale, [stored, 10**precision - 1, -(10**precision) + 1])
    with_target, without = _neighbours(tmp_path, column, odd, store_decimal_as_integer=as_integer)
    queries = [
        ("SELECT SUM(c) AS s, AVG(c) AS a FROM t", {"bounds": {"c": (0, 100)}}),
        ("SELECT c, COUNT(*) AS n FROM t GROUP BY c", {"delta": 1e-6}),
        ("SELECT COUNT(*) AS n FROM t WHERE c > 3", {}),
        ("SELECT MEDIAN(c) AS m FROM t", {"bounds": {"c": (0, 100)}}),
    ]
    for sql, options in queries:
        outcomes = [outcome(p, sql, **options) for p in (with_target, without)]
        assert outcomes == [("released", "")] * 2, (sql, outcomes)
    rows = _rows(with_target, 'SELECT CAST("c" AS VARCHAR) FROM "t" ORDER BY "uid"')
    digits = "9" * precision
    top = digits if scale == 0 else f"{digits[: precision - scale] or '0'}.{digits[-scale:]}"
    end = top if stored > 0 else f"-{top}"
    assert rows[BASE:] == [end, top, f"-{top}"]  # beyond the precision: the nearest end


# -- storages refused from the footer ---------------------------------------------------------


def _int96_neighbours(tmp: Path, odd: bytes) -> tuple[Path, Path]:
    paths = []
    for with_target in (True, False):
        raws = [int96(2_440_588 + i, 0) for i in range(BASE)] + ([odd] if with_target else [])
        uids = list(range(BASE)) + ([TARGET] if with_target else [])
        path = _path(tmp)
        write_int96(path, {"uid": pa.array(uids, pa.int64()), "g": [u % 2 for u in uids]},
                    "ts", raws)  # fmt: skip
        paths.append(path)
    return paths[0], paths[1]


@pytest.mark.parametrize(
    "odd",
    [int96(2**31 - 1, 0), int96(-(2**31), 0), int96(2_440_588, 2**63 - 1), int96(0, -1)],
)
def test_int96_timestamps_are_refused_free_from_the_footer_on_both_neighbours(
    tmp_path: Path, odd: bytes
) -> None:
    with_target, without = _int96_neighbours(tmp_path, odd)
    for sql in ("SELECT COUNT(*) AS n FROM t WHERE ts IS NOT NULL", "SELECT COUNT(*) AS n FROM t",
                "SELECT g, COUNT(*) AS n FROM t GROUP BY g"):  # fmt: skip
        outcomes = {outcome(p, sql, delta=1e-6) for p in (with_target, without)}
        assert len(outcomes) == 1, (sql, outcomes)
        ((kind, message),) = outcomes
        assert kind == "refused free"
        assert "column 'ts' is stored as INT96 timestamps" in message
        assert "timestamp('us')" in message


TIMES = (0).to_bytes(8, "little") + (2**40).to_bytes(8, "little")  # 0, and beyond one day


def _typed(array: pa.Array) -> pa.Table:
    return pa.table({"uid": pa.array(range(len(array)), pa.int64()), "c": array})


@pytest.mark.parametrize(
    ("array", "says"),
    [
        (pa.Array.from_buffers(pa.time64("us"), 2, [None, pa.py_buffer(TIMES)]),
         "is a Parquet TIME"),
        (pa.ExtensionArray.from_storage(pa.json_(), pa.array(['{"a": 1}', "not json {"])),
         "is a Parquet JSON column"),
        (pa.array([[1], [2]], pa.list_(pa.decimal128(38, 2))),
         "is a DECIMAL stored inside a nested value"),
        (pa.array([1, 2], pa.timestamp("ms")), "is stored as millisecond timestamps"),
    ],
)  # fmt: skip
def test_columns_duckdb_cannot_scan_totally_are_refused_from_the_footer(
    tmp_path: Path, array: pa.Array, says: str
) -> None:
    path = _path(tmp_path)
    pq.write_table(_typed(array), path)
    footer = read_footer(path)
    assert footer is not None
    assert "c" in footer.unreadable
    kind, message = outcome(path, "SELECT COUNT(*) AS n FROM t")
    assert kind == "refused free"
    assert f"column 'c' {says}" in message


def test_readable_storages_are_not_refused(tmp_path: Path) -> None:
    """The allow-list is not a blanket refusal: every common storage reads."""
    table = pa.table(
        {
            "uid": pa.array([1, 2], pa.int64()),
            "i8": pa.array([1, 2], pa.int8()), "u64": pa.array([1, 2], pa.uint64()),
            "f": pa.array([1.0, 2.0], pa.float32()), "h": pa.array([1, 2], pa.float16()),
            "d": pa.array([1, 2], pa.int32()).cast(pa.date32()),
            "us": pa.array([1, 2], pa.timestamp("us", tz="UTC")),
            "ns": pa.array([1, 2], pa.timestamp("ns")), "b": pa.array([b"x", b"y"]),
            "s": pa.array(["a", "b"]), "dec": pa.array([1, 2], pa.decimal128(38, 2)),
            "l": pa.array([["a"], []]),
            "m": pa.array([{"a": 1}, {}], pa.map_(pa.string(), pa.int64())),
            "bool": pa.array([True, False]),
        }
    )  # fmt: skip
    path = _path(tmp_path)
    pq.write_table(table, path)
    footer = read_footer(path)
    assert footer is not None
    assert footer.unreadable == {}
    assert outcome(path, "SELECT COUNT(*) AS n FROM t") == ("released", "")


# -- a glob of per-person files ---------------------------------------------------------------


def _person(folder: Path, uid: int, **extra: pa.Array) -> Path:
    path = folder / f"person-{uid:04d}.parquet"
    table = pa.table({"uid": pa.array([uid], pa.int64()), "x": pa.array([uid % 7 * 1.0]),
                      **extra})  # fmt: skip
    pq.write_table(table, path)
    return path


ODD_FILES: dict[str, Any] = {
    "another type": lambda f: pq.write_table(pa.table({"uid": ["not a number"], "x": [1.0]}), f),
    "one more column": lambda f: pq.write_table(
        pa.table({"uid": pa.array([TARGET], pa.int64()), "x": [1.0], "y": [2]}), f
    ),
    "int96 column": lambda f: write_int96(
        f, {"uid": pa.array([TARGET], pa.int64())}, "x", [int96(2**31 - 1, 0)]
    ),
    "not parquet": lambda f: f.write_bytes(b"uid,x\n1,2\n"),
    "strings not utf8": lambda f: pq.write_table(
        pa.table({"uid": pa.array([TARGET], pa.int64()), "x": unchecked_strings([b"\xff"])}), f
    ),
}


@pytest.mark.parametrize("odd", list(ODD_FILES))
def test_one_persons_parquet_file_of_another_layout_changes_only_its_own_rows(
    tmp_path: Path, odd: str, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "people"
    folder.mkdir()
    for uid in range(BASE):
        _person(folder, uid)
    glob = str(folder / "*.parquet")
    layout = keep("t", expand(glob), None, None).layout  # what the catalog records
    assert layout is not None
    sqls = ["SELECT COUNT(*) AS n FROM t", "SELECT SUM(x) AS s FROM t"]

    def answers() -> list[tuple[str, str]]:
        out = []
        for sql in sqls:
            session = veil.Session.on(
                DuckDBEngine({"t": glob}, layouts={"t": layout}),
                privacy_unit="uid", budget=veil.Budget(epsilon=10),
            )  # fmt: skip
            try:
                session.sql(sql, epsilon=1, bounds={"x": (0, 7)} if "SUM" in sql else None)
                out.append(("released", ""))
            except UserError as err:
                out.append(("refused free", str(err)))
            except QueryFailedError:
                out.append(("failed after the charge", ""))
            finally:
                session.close()
        return out

    before = answers()
    rows = sorted(DuckDBEngine({"t": glob}, layouts={"t": layout}).connection.sql(
        'SELECT * FROM "t"').fetchall())  # fmt: skip
    # the person's file, named to sort first (its layout would have been taken as the table's)
    ODD_FILES[odd](folder / "a-person.parquet")
    with caplog.at_level(logging.WARNING, logger="veil.sources"):
        assert answers() == before == [("released", "")] * 2
        engine = DuckDBEngine({"t": glob}, layouts={"t": layout})
        assert sorted(engine.connection.sql('SELECT * FROM "t"').fetchall()) == rows
    assert "a-person.parquet" in caplog.text  # the operator's log names the skipped file


def test_without_a_recorded_layout_files_that_differ_are_refused_at_registration(
    tmp_path: Path,
) -> None:
    """The one registering a table directly is its owner: told which file differs."""
    folder = tmp_path / "people"
    folder.mkdir()
    _person(folder, 1)
    ODD_FILES["one more column"](folder / "z.parquet")
    with pytest.raises(SchemaError, match=r"z\.parquet' differ from those of .*person-0001"):
        DuckDBEngine({"t": str(folder / "*.parquet")})


def test_a_file_added_to_the_glob_is_read_once_its_layout_is_the_tables(tmp_path: Path) -> None:
    folder = tmp_path / "people"
    folder.mkdir()
    for uid in range(3):
        _person(folder, uid)
    engine = DuckDBEngine({"t": str(folder / "*.parquet")})
    count = 'SELECT COUNT(*) FROM "t"'
    before = engine.data_version("t")
    _person(folder, 3)
    ODD_FILES["another type"](folder / "odd.parquet")
    assert engine.data_version("t") != before
    engine.check(__import__("sqlglot").parse_one(count, read="duckdb"))  # rebuilt here
    assert engine.connection.sql(count).fetchall() == [(4,)]
