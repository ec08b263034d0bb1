"""Audit: per-person files in a glob — one person's file never decides a query's outcome.

DESIGN §1 and issue 33. A dataset is registered in a catalog over a glob of per-person files
(CSV or Parquet; its layout recorded then); the neighbour adds one person's file, drawn by
hypothesis among what a careless or hostile writer leaves: no header, another header or one
more column, an empty file, bytes that are not UTF-8 (in the header or in the rows), a Parquet
file with another column type, one more column, INT96 timestamps, strings that are not UTF-8,
DECIMALs beyond their precision, or bytes that are not Parquet at all — named to sort first
or last. Through :meth:`veil.Session.from_catalog` (what the service runs) the outcome of a
drawn query — released, refused free, failed after the charge — is the same on both
neighbours, nothing fails after the charge, and no message names a file or directory — on
DuckDB (``file`` sources) and on Spark (``spark`` sources: a local Spark reads the glob).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import veil
from parquet_support import int96, raw_decimals, unchecked_strings, write_int96
from veil.catalog import Catalog, Source
from veil.errors import QueryFailedError, UserError

RANDOM = os.environ.get("VEIL_HYPOTHESIS_RANDOM") == "1"
MARK = "zq_person_file"  # in the added file's name: no message may name it
HEADER = "uid,age,city"
_RUNS = itertools.count()

QUERIES: list[tuple[str, dict[str, Any]]] = [
    ("SELECT COUNT(*) AS n FROM people", {}),
    ("SELECT SUM(age) AS s, AVG(age) AS a FROM people", {"bounds": {"age": (0, 100)}}),
    ("SELECT city, COUNT(*) AS n FROM people GROUP BY city", {"delta": 1e-6}),
    ("SELECT COUNT(DISTINCT uid) AS n FROM people WHERE age > 30", {}),
    ("SELECT MEDIAN(age) AS m FROM people WHERE city = 'Lyon'", {"bounds": {"age": (0, 100)}}),
]

# -- CSV --------------------------------------------------------------------------------------

CSV_ODD: dict[str, bytes] = {
    "no header": b"999,40,Paris\n",
    "another header": b"uid,city,age\n999,Paris,40\n",
    "one more column": f"{HEADER},hiv\n999,40,Paris,1\n".encode(),
    "one column fewer": b"uid,age\n999,40\n",
    "empty": b"",
    "header only": f"{HEADER}\n".encode(),
    "not utf8 header": b"uid,\xffage,city\n999,40,Paris\n",
    "not utf8 row": f"{HEADER}\n".encode() + b"999,4\xff0,Par\xfeis\n",
    "crlf and bom": f"\ufeff{HEADER}\r\n999,40,Paris\r\n".encode(),
    "odd cells": f'{HEADER}\n999,"4,0",\n"unterminated,1,2\n,,,,,\n'.encode(),
    "a line over the limit": f"{HEADER}\n999,".encode() + b"9" * (2 * 1024 * 1024 + 5) + b",x\n",
}


# -- Parquet ----------------------------------------------------------------------------------


def _person_table(uid: int, age: Any, city: Any) -> pa.Table:
    return pa.table({"uid": pa.array([uid], pa.int64()), "age": age, "city": city})


PARQUET_ODD: dict[str, Callable[[Path], None]] = {
    "age as text": lambda f: pq.write_table(_person_table(999, ["forty"], ["Paris"]), f),
    "one more column": lambda f: pq.write_table(
        _person_table(999, pa.array([40], pa.int64()), ["Paris"]).append_column(
            "hiv", pa.array([1])
        ),
        f,
    ),
    "no city": lambda f: pq.write_table(pa.table({"uid": [999], "age": [40]}), f),
    "int96 age": lambda f: write_int96(
        f, {"uid": pa.array([999], pa.int64())}, "age", [int96(2**31 - 1, 0)]
    ),
    "city not utf8": lambda f: pq.write_table(
        _person_table(999, pa.array([40], pa.int64()), unchecked_strings([b"\xffPar\xfe"])), f
    ),
    "age a decimal beyond 38 digits": lambda f: pq.write_table(
        _person_table(999, raw_decimals(38, 0, [-(2**127)]), ["Paris"]), f
    ),
    "not parquet": lambda f: f.write_bytes(b"PAR1 but not really\x00\xff"),
    "empty": lambda f: f.write_bytes(b""),
}


@dataclass(frozen=True)
class GlobCase:
    kind: str  # "csv" or "parquet"
    engine: str  # "duckdb" or "spark"
    people: list[tuple[int, int, str]]  # (uid, age, city), one file each
    odd: str
    first: bool  # the odd file's name sorts before the others
    query: int


@st.composite
def glob_cases(draw: st.DrawFn, kind: str, engine: str) -> GlobCase:
    n = draw(st.integers(2, 6))
    people = [(u, draw(st.integers(0, 99)), draw(st.sampled_from(["Paris", "Lyon"])))
              for u in range(n)]  # fmt: skip
    odd = draw(st.sampled_from(sorted(CSV_ODD if kind == "csv" else PARQUET_ODD)))
    query = draw(st.integers(0, len(QUERIES) - 1))
    return GlobCase(kind, engine, people, odd, draw(st.booleans()), query)


def _suffix(case: GlobCase) -> str:
    return ".csv" if case.kind == "csv" else ".parquet"


def _write(folder: Path, case: GlobCase) -> str:
    """The people's files in ``folder``; the glob that reads them."""
    folder.mkdir(parents=True)
    for uid, age, city in case.people:
        path = folder / f"p{uid:03d}{_suffix(case)}"
        if case.kind == "csv":
            path.write_text(f"{HEADER}\n{uid},{age},{city}\n", encoding="utf-8")
        else:
            pq.write_table(_person_table(uid, pa.array([age], pa.int64()), [city]), path)
    return str(folder / f"*{_suffix(case)}")


def _add_odd(folder: Path, case: GlobCase) -> None:
    odd = folder / f"{'a' if case.first else 'z'}_{MARK}{_suffix(case)}"
    if case.kind == "csv":
        odd.write_bytes(CSV_ODD[case.odd])
    else:
        PARQUET_ODD[case.odd](odd)


def _outcome(tmp: Path, case: GlobCase, with_odd: bool) -> tuple[str, str, str]:
    """What the analyst learns on D (``with_odd``) or D′."""
    run = tmp / f"run{next(_RUNS)}"
    glob = _write(run / "data", case)
    catalog = Catalog(f"sqlite:///{run / 'ledger.db'}")
    schema = {"uid": "BIGINT", "age": "BIGINT"} if case.kind == "csv" else None
    source = Source("file", path=glob) if case.engine == "duckdb" else Source("spark", path=glob)
    catalog.add_dataset("people", source=source, privacy_unit="uid", schema=schema)
    if with_odd:  # the person's file arrives after registration, as per-person files do
        _add_odd(run / "data", case)
    catalog.ledger.grant("alice", "people", veil.Budget(epsilon=100, delta=1e-3))
    sql, options = QUERIES[case.query]
    try:
        session = veil.Session.from_catalog(catalog, "people", analyst="alice")
    except UserError as err:
        catalog.ledger.close()
        return ("refused free", type(err).__name__, str(err))
    before = session.remaining()
    try:
        session.sql(sql, epsilon=1, **options)
        return ("released", "", "")
    except QueryFailedError as err:
        return ("failed after the charge", "QueryFailedError", str(err))
    except UserError as err:
        kind = "refused free" if session.remaining() == before else "refused but charged"
        return (kind, type(err).__name__, str(err))
    finally:
        session.close()
        catalog.ledger.close()


ENGINES = [
    pytest.param("duckdb", 40, id="duckdb"),
    pytest.param("spark", 16, id="spark", marks=pytest.mark.spark),
]


@pytest.mark.slow  # hunts neighbours: 6-8 CPU s per kind on DuckDB, minutes on Spark
@pytest.mark.parametrize(("engine", "examples"), ENGINES)
@pytest.mark.parametrize("kind", ["csv", "parquet"])
def test_one_persons_file_in_a_glob_never_decides_the_outcome(
    kind: str, engine: str, examples: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp(f"globs-{kind}-{engine}")
    if engine == "spark":
        from spark_support import spark_session

        spark_session()  # the catalog's engine takes the active session

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=not RANDOM,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(case=glob_cases(kind, engine))
    def prop(case: GlobCase) -> None:
        with_odd = _outcome(tmp, case, True)
        without = _outcome(tmp, case, False)
        order = "first" if case.first else "last"
        where = f"{engine}, {kind}: {case.odd!r} ({order}), {QUERIES[case.query]}"
        assert with_odd == without, f"one person's file changed the outcome — {where}"
        assert with_odd[0] in ("released", "refused free"), f"{where}: {with_odd}"
        for text in (with_odd[2], without[2]):
            assert MARK not in text, f"{where}: {text}"
            assert str(tmp) not in text, f"{where}: {text}"

    prop()
