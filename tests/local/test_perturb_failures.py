"""``veil.perturb`` fails as a session query does (DESIGN §1, "Failure is an output").

What can be decided without reading a record is refused before the reservation, free and with
its reason; once records are read, a failure keeps the charge and raises a ``QueryFailedError``
that carries nothing the engine said — not in its message, not as ``__cause__`` or
``__context__`` — while the engine's error goes to the operator's log (``veil.withheld``).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import veil
from support import SeededSource
from veil.accounting.records import Record
from veil.errors import WITHHELD_LOGGER, QueryFailedError, SchemaError, log_withheld
from veil.local.perturb import perturb

SECRET = "secret-4711"


@pytest.fixture
def ledger() -> veil.Ledger:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "people", veil.Budget(epsilon=3))
    return ledger


@pytest.fixture
def failing_relation() -> duckdb.DuckDBPyRelation:
    """A relation whose query fails on one row's value, only when it runs (the error quotes
    the value)."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS SELECT * FROM (VALUES ('1'), ('2'), ('{SECRET}')) v(s)")
    return con.sql("SELECT CAST(s AS INTEGER) AS x FROM t")


def _failing_reader() -> pa.RecordBatchReader:
    """An Arrow stream whose second batch cannot be read; the error quotes a record."""
    schema = pa.schema([pa.field("x", pa.float64())])

    def batches() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch([pa.array([0.5, 0.7])], schema=schema)
        raise ValueError(f"cannot decode the record {SECRET!r}")

    return pa.RecordBatchReader.from_batches(schema, batches())


def _charge(ledger: veil.Ledger, **kwargs: object) -> veil.Perturbation:
    return perturb(
        epsilon=1,
        bounds={"x": (0, 10)},
        ledger=ledger,
        analyst="alice",
        dataset="people",
        **kwargs,  # type: ignore[arg-type]
    )


def _charges(ledger: veil.Ledger) -> list[Record]:
    return [r for r in ledger.history("alice", "people") if r.event == "charge"]


def _assert_reveals_nothing(error: QueryFailedError) -> None:
    assert SECRET not in str(error)
    assert "Conversion" not in str(error)
    assert error.__cause__ is None
    assert error.__context__ is None


def test_a_relation_that_fails_on_a_value_keeps_the_charge_and_withholds_the_engine_text(
    ledger: veil.Ledger, failing_relation: duckdb.DuckDBPyRelation
) -> None:
    with pytest.raises(QueryFailedError, match=r"the charge stays \(ε=1\).*withheld") as info:
        _charge(ledger, data=failing_relation)
    _assert_reveals_nothing(info.value)
    assert ledger.remaining("alice", "people") == veil.Budget(epsilon=2)
    [charge] = _charges(ledger)
    assert (charge.status, charge.loss) == ("committed", veil.Budget(epsilon=1))
    # the ledger stays usable and consistent: the next perturbation is charged on top
    _charge(ledger, data=pa.table({"x": [1.0, 2.0]}))
    assert ledger.remaining("alice", "people") == veil.Budget(epsilon=1)
    assert [r.status for r in _charges(ledger)] == ["committed", "committed"]


def test_an_arrow_stream_that_fails_mid_way_keeps_the_charge_and_withholds_its_text(
    ledger: veil.Ledger,
) -> None:
    with pytest.raises(QueryFailedError) as info:
        _charge(ledger, data=_failing_reader())
    _assert_reveals_nothing(info.value)
    assert ledger.remaining("alice", "people") == veil.Budget(epsilon=2)


def test_a_failure_without_a_ledger_is_withheld_too() -> None:
    with pytest.raises(QueryFailedError) as info:
        perturb(_failing_reader(), epsilon=1, bounds={"x": (0, 1)}, source=SeededSource(0))
    _assert_reveals_nothing(info.value)


def test_a_relation_of_the_wrong_type_is_refused_free_without_running_its_query(
    ledger: veil.Ledger,
) -> None:
    # the relation's query would fail on its third row if it ran; its type alone decides
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS SELECT * FROM (VALUES ('1'), ('{SECRET}')) v(s)")
    relation = con.sql("SELECT CAST(s AS INTEGER) AS x FROM t")
    with pytest.raises(SchemaError, match=r"categories of 'x' are not all values of its type"):
        perturb(
            relation,
            epsilon=1,
            categories={"x": ["a", "b"]},
            ledger=ledger,
            analyst="alice",
            dataset="people",
        )
    assert ledger.remaining("alice", "people") == veil.Budget(epsilon=3)
    assert _charges(ledger) == []


def test_a_relation_that_cannot_be_bound_is_refused_free(ledger: veil.Ledger) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT 1.5 AS x")
    relation = con.sql("SELECT x FROM t")
    con.execute("DROP TABLE t")
    with pytest.raises(SchemaError, match=r"cannot read the schema of the relation to perturb"):
        _charge(ledger, data=relation)
    assert ledger.remaining("alice", "people") == veil.Budget(epsilon=3)


def test_a_relation_that_reads_well_is_released_and_charged_once(ledger: veil.Ledger) -> None:
    con = duckdb.connect()
    relation = con.sql("SELECT CAST(range AS INTEGER) AS x FROM range(100)")
    out = _charge(ledger, data=relation)
    assert out.data.num_rows == 100
    assert out.data.schema == pa.schema([pa.field("x", pa.float64(), nullable=False)])
    assert ledger.remaining("alice", "people") == veil.Budget(epsilon=2)


def test_the_withheld_engine_error_is_logged_for_the_operator_and_only_there(
    ledger: veil.Ledger,
    failing_relation: duckdb.DuckDBPyRelation,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger=WITHHELD_LOGGER)
    with pytest.raises(QueryFailedError) as info:
        _charge(ledger, data=failing_relation)
    _assert_reveals_nothing(info.value)
    (record,) = [r for r in caplog.records if r.name == WITHHELD_LOGGER]
    assert record.levelno == logging.ERROR
    [charge] = _charges(ledger)
    message = record.getMessage()
    assert SECRET in message  # the engine's own words, for the operator
    assert "ConversionException" in message
    assert "analyst 'alice'" in message
    assert "dataset 'people'" in message
    assert f"reservation {charge.id}" in message
    assert "perturb x (laplace, ε=1)" in message
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], duckdb.ConversionException)
    # the traceback goes with the record (whatever formatter the operator's handler uses)
    assert "Traceback (most recent call last)" in logging.Formatter().format(record)
    assert getattr(record, "veil_reservation", None) == charge.id
    assert getattr(record, "veil_analyst", None) == "alice"
    assert getattr(record, "veil_dataset", None) == "people"


def test_a_released_perturbation_logs_nothing(
    ledger: veil.Ledger, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=WITHHELD_LOGGER)
    _charge(ledger, data=pa.table({"x": [1.0, 2.0]}))
    assert [r for r in caplog.records if r.name == WITHHELD_LOGGER] == []


@pytest.mark.system
def test_a_withheld_error_is_printed_nowhere_until_the_operator_configures_logging() -> None:
    # Python's last-resort handler would print an unhandled ERROR record on stderr (the
    # analyst's terminal); with nothing configured the record must go nowhere, and with a
    # root handler configured it must reach it.
    program = textwrap.dedent(
        f"""
        import logging, sys
        from veil.errors import log_withheld
        def fail():
            raise ValueError({SECRET!r})
        try:
            fail()
        except ValueError as exc:
            error = exc
        log_withheld(error, analyst="alice", dataset="people", query="perturb x")
        print("unconfigured done", file=sys.stderr)
        logging.basicConfig(stream=sys.stdout, format="%(name)s %(levelname)s %(message)s")
        log_withheld(error, analyst="alice", dataset="people", query="perturb x")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stderr == "unconfigured done\n"
    assert done.stdout.startswith(
        "veil.withheld ERROR withheld from analyst 'alice': perturb x on dataset 'people' "
        f"failed after reserving (reservation None): ValueError: {SECRET}\n"
    )
    assert "Traceback (most recent call last)" in done.stdout
    assert "in fail" in done.stdout


def test_log_withheld_records_the_error_it_is_given(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger=WITHHELD_LOGGER)
    error = RuntimeError("lost the connection to the engine")
    log_withheld(error, analyst=None, dataset=None, query="SELECT 1", reservation=7)
    (record,) = caplog.records
    assert record.name == "veil.withheld"
    assert record.getMessage() == (
        "withheld from analyst None: SELECT 1 on dataset None failed after reserving "
        "(reservation 7): RuntimeError: lost the connection to the engine"
    )
    assert record.exc_info == (RuntimeError, error, None)
    assert getattr(record, "veil_query", None) == "SELECT 1"


@pytest.mark.parametrize(
    ("bounds", "rule"),
    [
        ((-1e308, 1e308), "veil supports bounds within ±1e100"),
        ((0, 1e101), "veil supports bounds within ±1e100"),
        ((0, 1e-300), "by at least 1e-100"),
    ],
    ids=["1e308", "1e101", "1e-300"],
)
def test_bounds_outside_the_supported_range_are_refused_free_as_a_session_does(
    ledger: veil.Ledger, bounds: tuple[float, float], rule: str
) -> None:
    """Bounds (−1e308, 1e308) released −inf, with numpy's overflow warning — a failure after
    the charge under ``-W error``: perturb holds bounds to the session's range, before it
    reserves."""
    table = pa.table({"x": [1.0, -3.0, 1e300]})
    with pytest.raises(veil.BoundsError, match=rf"bounds for 'x' are .*: .*{rule}"):
        perturb(
            table, epsilon=1, bounds={"x": bounds}, ledger=ledger, analyst="alice", dataset="people"
        )
    assert ledger.remaining("alice", "people") == veil.Budget(epsilon=3)
    assert not _charges(ledger)


def test_at_the_edges_of_the_range_every_released_value_is_a_finite_double() -> None:
    table = pa.table({"x": [1e308, -1e308, 0.0, float("nan"), None] * 200})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = perturb(table, epsilon=1e-12, bounds={"x": (-1e100, 1e100)})
    values = out.data.column("x").to_numpy()
    assert np.isfinite(values).all()
