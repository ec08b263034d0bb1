"""Progress of long scans: the watcher, the DuckDB engine's reports, the session's pass-through.

The long query scans a DuckDB ``range()`` through a function that holds the scan at three points
until the engine's own progress (polled every ~100 ms) has been reported there, so the reports
during the scan are the same on a fast machine and a loaded one.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import sqlglot
from sqlglot import exp

import veil
from support import SeededSource
from veil.engines.base import Engine, Progress, ProgressReporting
from veil.engines.duckdb import DuckDBEngine
from veil.engines.fake import FakeEngine
from veil.engines.progress import watching
from veil.errors import InvalidArgumentError, QueryFailedError, SchemaError

SUM_QUERY = "SELECT COUNT(*) AS n, SUM(hash(id) % 1000) AS s FROM big"


def tree(sql: str) -> exp.Expression:
    return sqlglot.parse_one(sql, dialect="duckdb")


def watchers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "veil-progress"]


def big_engine(rows: int) -> DuckDBEngine:
    con = duckdb.connect()
    con.execute(f"CREATE VIEW big AS SELECT range AS id FROM range({rows})")
    return DuckDBEngine({"big": "big"}, connection=con)


@dataclass(frozen=True)
class LongScan:
    """One run of a gated query with progress, and the same query without."""

    rows: int
    plain: pa.Table
    with_progress: pa.Table
    reports: list[float | None]
    threads_before: int
    threads_after: int


class Gates:
    """``gate(id)``, a DuckDB function that is 0 and, while armed, holds the scan at a quarter,
    a half and three quarters of the rows until the engine has reported a fraction that far
    along (less :data:`SLACK`): the reports during the scan do not depend on the machine's
    speed. The scan runs on one DuckDB thread, so its progress is where the gate holds it."""

    SLACK = 0.05

    def __init__(self, rows: int) -> None:
        self.at = [rows // 4, rows // 2, 3 * rows // 4]
        self.reports: list[float | None] = []
        self.armed = False
        self._news = threading.Condition()

    def report(self, fraction: float | None) -> None:
        with self._news:
            self.reports.append(fraction)
            self._news.notify_all()

    def gate(self, ids: pa.Array) -> pa.Array:
        low, high = pc.min(ids).as_py(), pc.max(ids).as_py()
        for k, row in enumerate(self.at):
            if self.armed and low <= row <= high:
                want = (k + 1) / 4 - self.SLACK
                with self._news:  # a safety net only: the scan goes on once it is reported
                    assert self._news.wait_for(lambda w=want: self._reached(w), timeout=120)
        return pc.multiply(ids, 0)

    def _reached(self, want: float) -> bool:
        last = self.reports[-1] if self.reports else None
        return last is not None and last >= want


GATED_QUERY = "SELECT COUNT(*) AS n, SUM(hash(id) % 1000 + gate(id)) AS s FROM big"


@pytest.fixture(scope="module")
def long_scan() -> Iterator[LongScan]:
    rows = 4_000_000
    gates = Gates(rows)
    con = duckdb.connect()
    con.execute(f"CREATE VIEW big AS SELECT range AS id FROM range({rows})")
    con.execute("SET threads = 1")
    con.create_function("gate", gates.gate, ["BIGINT"], "BIGINT", type="arrow")
    engine = DuckDBEngine({"big": "big"}, connection=con)
    plain = engine.execute(tree(GATED_QUERY))
    before = threading.active_count()
    gates.armed = True
    with_progress = engine.execute_with_progress(tree(GATED_QUERY), gates.report)
    gates.armed = False
    after = threading.active_count()
    yield LongScan(rows, plain, with_progress, gates.reports, before, after)
    engine.close()


def test_duckdb_reports_increasing_fractions_ending_at_one(long_scan: LongScan) -> None:
    reports = long_scan.reports
    assert reports[-1] == 1.0
    fractions = [f for f in reports if f is not None]
    assert reports[: len(reports) - len(fractions)] in ([], [None])  # None only first
    assert all(a < b for a, b in itertools.pairwise(fractions)), fractions
    during = [f for f in fractions if 0 < f < 1]  # what DuckDB said while scanning
    assert len(during) >= 3, reports
    assert max(during) >= 0.5, reports  # the engine's own count got far, not only our 1.0


def test_duckdb_results_are_identical_with_and_without_progress(long_scan: LongScan) -> None:
    assert long_scan.with_progress.equals(long_scan.plain)
    assert long_scan.plain.to_pylist() == [
        {"n": long_scan.rows, "s": long_scan.plain.column("s")[0].as_py()}
    ]


def test_the_watcher_thread_is_gone_when_execute_returns(long_scan: LongScan) -> None:
    assert long_scan.threads_after == long_scan.threads_before
    assert watchers() == []


def test_duckdb_errors_propagate_unchanged_and_the_watcher_stops() -> None:
    engine = big_engine(5_000_000)
    # the cast fails on the last row only: the scan runs a while before DuckDB raises
    failing = tree(
        "SELECT SUM(CAST(CASE WHEN id = 4999999 THEN 'x' ELSE '1' END AS INTEGER)) AS s FROM big"
    )
    reports: list[float | None] = []
    before = threading.active_count()
    with pytest.raises(SchemaError, match="the data does not fit the query: Conversion Error"):
        engine.execute_with_progress(failing, reports.append)
    assert threading.active_count() == before
    assert watchers() == []
    assert 1.0 not in reports  # no success is reported for a failed query
    with pytest.raises(SchemaError, match="the data does not fit the query: Conversion Error"):
        engine.execute(failing)  # the same error as without progress
    engine.close()


def test_a_failing_callback_stops_its_reports_and_is_raised_after_the_query() -> None:
    engine = big_engine(1000)
    calls: list[float | None] = []

    def broken(fraction: float | None) -> None:
        calls.append(fraction)
        raise RuntimeError("the display is gone")

    with pytest.raises(RuntimeError, match="the display is gone"):
        engine.execute_with_progress(tree(SUM_QUERY), broken)
    assert len(calls) == 1
    assert watchers() == []
    assert engine.execute(tree(SUM_QUERY)).to_pylist()[0]["n"] == 1000  # engine still usable
    engine.close()


@pytest.mark.parametrize("setting", [False, True])
def test_duckdb_progress_settings_of_a_given_connection_are_restored(setting: bool) -> None:
    con = duckdb.connect()
    con.execute(f"SET enable_progress_bar = {str(setting).lower()}")
    con.execute("CREATE VIEW big AS SELECT range AS id FROM range(1000)")
    engine = DuckDBEngine({"big": "big"}, connection=con)
    engine.execute_with_progress(tree(SUM_QUERY), lambda _: None)
    settings = ("enable_progress_bar", "enable_progress_bar_print")
    row = con.execute(f"SELECT {', '.join(f'current_setting({s!r})' for s in settings)}").fetchone()
    assert row == (setting, True)
    con.close()


def test_engines_that_report_progress_implement_the_optional_protocol() -> None:
    duck = big_engine(10)
    fake = FakeEngine({"t": pa.table({"x": [1]})})
    assert isinstance(duck, Engine)
    assert isinstance(duck, ProgressReporting)
    assert isinstance(fake, Engine)
    assert not isinstance(fake, ProgressReporting)
    duck.close()


# -- the watcher --------------------------------------------------------------------------


def test_the_watcher_reports_only_news_clamped_to_the_unit_interval() -> None:
    answers = iter([-1.0, float("nan"), 0.2, 0.1, 0.2, 0.7, 1.5])
    done = threading.Event()

    def poll() -> float | None:
        value = next(answers, None)
        if value is None:
            done.set()
        return value

    reports: list[float | None] = []
    with watching(poll, reports.append, interval=0.001):
        assert done.wait(120)  # a safety net: the polls end when the answers do
    assert reports == [None, 0.2, 0.7, 1.0]


def test_a_poll_that_raises_counts_as_unknown_and_does_not_stop_the_watcher() -> None:
    answers = iter([0.1, "fail", 0.4])
    done = threading.Event()

    def poll() -> float | None:
        value = next(answers, None)
        if value is None:
            done.set()
        if value == "fail":
            raise duckdb.ConnectionException("connection closed")
        return value if isinstance(value, float) else None

    reports: list[float | None] = []
    with watching(poll, reports.append, interval=0.001):
        assert done.wait(120)  # a safety net: the polls end when the answers do
    assert reports == [0.1, 0.4, 1.0]


def test_the_watcher_reports_no_success_when_the_body_raises() -> None:
    reports: list[float | None] = []
    polled = threading.Event()

    def report(fraction: float | None) -> None:
        reports.append(fraction)
        polled.set()

    def scan() -> None:
        with watching(lambda: 0.3, report):
            assert polled.wait(120)  # the body fails after a poll, however slow the machine
            raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):
        scan()
    assert reports == [0.3]
    assert watchers() == []


# -- the session ----------------------------------------------------------------------------


def small_session(seed: int) -> veil.Session:
    rows = 200_000
    table = pa.table({"x": [(i * 37) % 1000 for i in range(rows)]})
    return veil.Session.local(
        {"t": table}, budget=veil.Budget(epsilon=10), source=SeededSource(seed)
    )


QUANTILE = "SELECT COUNT(*) AS n, MEDIAN(x) AS m FROM t"


def test_session_passes_progress_through_the_plans_one_statement() -> None:
    # the counts, the median and the mode's candidates are one statement: one scan
    reports: list[float | None] = []
    with small_session(5) as session:
        query = "SELECT COUNT(*) AS n, MEDIAN(x) AS m, MODE(x) AS o FROM t"
        session.sql(query, epsilon=1, bounds={"x": (0, 1000)}, progress=reports.append)
    fractions = [f for f in reports if f is not None]
    assert fractions, reports
    assert all(a < b for a, b in itertools.pairwise(fractions)), reports
    assert fractions[-1] == 1.0


class _Reporting:
    """A statement that reports ``fractions`` (None first) as it runs."""

    def __init__(self, fractions: list[float | None]) -> None:
        self.fractions = fractions

    def run(self, progress: Progress | None) -> pa.Table:
        for f in self.fractions:
            if progress is not None:
                progress(f)
        return pa.table({"n": [1]})


def test_progress_sees_several_statements_as_one_scan() -> None:
    """Statements beside ``together`` (``Lowered.separate``), if any: each an equal share,
    None only before the first fraction, then strictly increasing fractions."""
    from veil.session import _execute_all

    reports: list[float | None] = []
    first = _Reporting([None, 0.5, 0.5, 1.0])
    second = _Reporting([None, 0.25, 1.0])
    tables = _execute_all([first, second], reports.append)
    assert len(tables) == 2
    assert reports == [None, 0.25, 0.5, 0.625, 1.0]


def test_session_results_do_not_depend_on_progress() -> None:
    with small_session(7) as quiet, small_session(7) as watched:
        a = quiet.sql(QUANTILE, epsilon=1, bounds={"x": (0, 1000)})
        b = watched.sql(QUANTILE, epsilon=1, bounds={"x": (0, 1000)}, progress=lambda _: None)
        assert a.rows == b.rows
        assert a.cost == b.cost
        assert quiet.remaining() == watched.remaining()


def test_session_never_calls_progress_on_an_engine_that_cannot_report() -> None:
    engine = FakeEngine({"t": pa.table({"x": [1, 2, 3]})})
    ledger = veil.Ledger("sqlite://")
    ledger.grant("a", "t", veil.Budget(epsilon=1))
    session = veil.Session(engine, ledger=ledger, analyst="a", dataset="t")
    reports: list[float | None] = []
    result = session.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5, progress=reports.append)
    assert reports == []
    assert len(engine.calls) == 1
    assert result.columns == ("n",)


def test_session_refuses_a_progress_that_is_not_callable_before_charging() -> None:
    with small_session(1) as session:
        before = session.remaining()
        with pytest.raises(InvalidArgumentError, match="progress must be a function"):
            session.sql("SELECT COUNT(*) AS n FROM t", epsilon=1, progress=0.5)  # type: ignore[arg-type]
        assert session.remaining() == before


def test_a_failing_progress_callback_fails_the_query_and_the_charge_stays() -> None:
    def broken(_: float | None) -> None:
        raise RuntimeError("the display is gone")

    with small_session(2) as session:
        with pytest.raises(QueryFailedError, match="the charge stays"):
            session.sql("SELECT COUNT(*) AS n FROM t", epsilon=1, progress=broken)
        assert session.remaining() == veil.Budget(epsilon=9)
