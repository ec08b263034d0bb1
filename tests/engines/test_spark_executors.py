"""The check that Spark's executors can run veil's Python, before ``perturb`` charges anything.

The probe function runs here in-process too (it is plain Python over Arrow batches); the
refusals on executors that lack veil or pyarrow are tested on a real standalone cluster in
tests/test_spark_cluster.py.
"""

from __future__ import annotations

import sys
from typing import Any

import pyarrow as pa
import pytest

import veil
from spark_support import spark_session
from veil.engines.spark_executors import (
    JOB_GROUP,
    ExecutorReport,
    Imported,
    check_executors,
    driver_needs,
    executor_reports,
    problems,
)
from veil.engines.spark_executors import _probe as probe_for

PYTHON = "{}.{}".format(*sys.version_info[:2])
KERNEL = "veil.local.perturb"


def _report(**versions: str | None) -> ExecutorReport:
    imports = tuple(
        Imported(m, v, "" if v is not None else f"ModuleNotFoundError: No module named '{m}'")
        for m, v in versions.items()
    )
    return ExecutorReport("/opt/python/bin/python3", PYTHON, imports)


def _good() -> dict[str, str | None]:
    return {"pyarrow": pa.__version__, "numpy": "2.0.0", "veil": veil.__version__, KERNEL: ""}


def test_an_executor_with_the_drivers_veil_and_pyarrow_has_no_problem() -> None:
    assert problems(_report(**_good()), driver_needs(), PYTHON) == []


def test_an_executor_without_veil_is_named_with_its_import_error() -> None:
    found = problems(_report(**{**_good(), "veil": None}), driver_needs(), PYTHON)
    assert found == ["no veil (ModuleNotFoundError: No module named 'veil')"]


def test_other_versions_of_veil_pyarrow_or_python_are_problems() -> None:
    report = _report(**{**_good(), "veil": "0.0.1", "pyarrow": "1.0.0"})
    older = ExecutorReport(report.executable, "3.9", report.imports)
    assert problems(older, driver_needs(), PYTHON) == [
        f"Python 3.9, not the driver's {PYTHON}",
        f"pyarrow 1.0.0, not the driver's {pa.__version__}",
        f"veil 0.0.1, not the driver's {veil.__version__}",
    ]


def test_the_probe_reports_this_python_and_what_it_imports() -> None:
    probe = probe_for(("pyarrow", "veil", "no_such_module_anywhere"))
    (batch,) = list(probe(iter([pa.record_batch({"id": [0]})])))
    report = ExecutorReport.from_json(batch.column("report")[0].as_py())
    assert report.executable == sys.executable
    assert report.python == PYTHON
    assert report.imports == (
        Imported("pyarrow", pa.__version__),
        Imported("veil", veil.__version__),
        Imported(
            "no_such_module_anywhere",
            None,
            "ModuleNotFoundError: No module named 'no_such_module_anywhere'",
        ),
    )


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


def _check_jobs(spark: Any) -> int:
    return len(spark.sparkContext.statusTracker().getJobIdsForGroup(JOB_GROUP))


@pytest.mark.spark
def test_the_probe_runs_on_the_workers_that_spark_starts(spark: Any) -> None:
    before = _check_jobs(spark)
    reports = executor_reports(spark, KERNEL)
    assert _check_jobs(spark) == before + 1  # one job, in the check's group
    assert {r.executable for r in reports} == {spark.sparkContext.pythonExec}
    for report in reports:
        assert problems(report, driver_needs(), PYTHON) == []


@pytest.mark.spark
def test_a_passed_check_is_not_run_again_in_the_same_application(spark: Any) -> None:
    check_executors(spark, kernel=KERNEL)  # runs the job unless an earlier test passed it
    once = _check_jobs(spark)
    check_executors(spark, kernel=KERNEL)
    check_executors(spark, kernel=KERNEL)
    assert _check_jobs(spark) == once


def test_the_spark_extra_installs_what_perturb_needs_on_the_driver() -> None:
    import tomllib
    from pathlib import Path

    from packaging.requirements import Requirement

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    extra = tomllib.loads(pyproject.read_text())["project"]["optional-dependencies"]["spark"]
    wants = {r.name: r for r in map(Requirement, extra)}
    # pyspark's mapInArrow refuses a driver without pandas; its sql extra pins the pandas and
    # pyarrow versions that pyspark release supports
    assert "sql" in wants["pyspark"].extras
    assert "pandas" in wants
