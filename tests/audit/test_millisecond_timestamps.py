"""Audit regression: a Parquet TIMESTAMP stored in milliseconds (or written from seconds, which
pyarrow stores as milliseconds) is converted to microseconds by Spark's and DuckDB's readers,
and a value beyond about ±292,000 years overflows there. A query reading the column failed
after the charge only when such a row existed. The footer's declared type decides it instead:
a query that reads the column is refused free on both neighbours; one that does not is
answered."""

from __future__ import annotations

import itertools
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from veil.errors import QueryFailedError, SchemaError

_FILES = itertools.count()
_EXTREME = {"ms": 2**62, "s": 2**62 // 1000}  # beyond the microsecond range once converted
ENGINES = ["duckdb", pytest.param("spark", marks=pytest.mark.spark)]


def _file(tmp: Path, unit: str, with_target: bool) -> str:
    uids = list(range(1, 40))
    stamps = [1_000 * i for i in uids]
    if with_target:
        uids.append(99)
        stamps.append(_EXTREME[unit])
    table = pa.table(
        {
            "uid": uids,
            "g": [u % 2 for u in uids],
            "ts": pa.array(stamps, pa.timestamp(unit)),
        }
    )
    path = tmp / f"stamps-{next(_FILES)}.parquet"
    pq.write_table(table, path)
    return str(path)


def _session(engine: str, path: str) -> veil.Session:
    options = {"privacy_unit": "uid", "budget": veil.Budget(epsilon=100, delta=1e-6)}
    if engine == "duckdb":
        return veil.Session.local({"t": path}, **options)  # type: ignore[arg-type]
    from spark_support import spark_session

    return veil.Session.spark(spark_session(), {"t": path}, **options)  # type: ignore[arg-type]


def _outcome(engine: str, path: str, query: str) -> tuple[str, str]:
    s = _session(engine, path)
    before = s.remaining()
    try:
        s.sql(query, epsilon=1, delta=1e-7)
    except QueryFailedError:
        return ("failed", "")
    except SchemaError as err:
        assert s.remaining() == before, "a refused query was charged"
        return ("refused", str(err))
    return ("released", "")


READING = [
    "SELECT COUNT(*) FROM t WHERE ts IS NOT NULL",
    "SELECT ts, COUNT(*) FROM t GROUP BY ts",
]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("unit", ["ms", "s"])
def test_a_query_reading_a_millisecond_column_is_refused_free_on_both_neighbours(
    engine: str, unit: str, tmp_path: Path
) -> None:
    for query in READING:
        outcomes = {_outcome(engine, _file(tmp_path, unit, t), query) for t in (True, False)}
        assert len(outcomes) == 1, outcomes
        ((kind, message),) = outcomes
        assert kind == "refused"
        assert "'ts' is stored as millisecond timestamps" in message
        assert "timestamp('us')" in message


@pytest.mark.spark
def test_on_spark_a_query_that_does_not_read_the_column_is_answered_on_both_neighbours(
    tmp_path: Path,
) -> None:
    for query in ("SELECT COUNT(*) FROM t", "SELECT g, COUNT(*) FROM t GROUP BY g"):
        for with_target in (True, False):
            assert _outcome("spark", _file(tmp_path, "ms", with_target), query) == ("released", "")


def test_on_duckdb_any_query_on_such_a_table_is_refused_free_on_both_neighbours(
    tmp_path: Path,
) -> None:
    """DuckDB's reader fails on veil's queries even when they do not name the column."""
    for query in ("SELECT COUNT(*) FROM t", "SELECT g, COUNT(*) FROM t GROUP BY g"):
        outcomes = {_outcome("duckdb", _file(tmp_path, "ms", t), query) for t in (True, False)}
        assert len(outcomes) == 1, outcomes
        ((kind, message),) = outcomes
        assert kind == "refused"
        assert "'ts' is stored as millisecond timestamps" in message


def test_a_microsecond_file_checked_first_does_not_let_a_millisecond_one_through(
    tmp_path: Path,
) -> None:
    """The session remembers a (table, schema, measurement) that passed its check; the Arrow
    schema of a millisecond file is the microsecond one, so the stored types key it too."""
    micro = tmp_path / "micro.parquet"
    pq.write_table(
        pa.table({"uid": [1, 2], "g": [0, 1], "ts": pa.array([1, 2], pa.timestamp("us"))}), micro
    )
    query = READING[0]
    assert _outcome("duckdb", str(micro), query) == ("released", "")
    kind, _ = _outcome("duckdb", _file(tmp_path, "ms", True), query)
    assert kind == "refused"
