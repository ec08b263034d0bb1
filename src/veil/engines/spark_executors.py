"""Can Spark's executors run veil's Python? Asked of the executors themselves, before any charge.

A query runs no Python on the executors (Spark executes plain SQL), but ``veil.perturb`` does:
its kernel runs in ``mapInArrow``, so every executor's Python must import veil, at the
driver's version, with pyarrow at the driver's version. Which Python that is is decided where
the driver cannot see it — the ``PYSPARK_PYTHON`` the driver's SparkContext started with
(``spark-submit`` sets it from ``spark.pyspark.python``; a SparkSession built in a running
Python ignores that setting), an archive the cluster unpacks (``spark.archives``), the
executors' machines — so :func:`check_executors` asks them: a tiny public job (one row per
default partition, no table read) whose function imports what the kernel needs on the executor
and reports its Python and the versions it found.

The job's function is built inside a function, so cloudpickle ships it *by value* (a
module-level function would be pickled by reference, and unpickling it would import veil on an
executor that may not have it): it names only the standard library and pyarrow (Spark's Arrow
worker imports pyarrow before calling it). A failure of the job itself (an executor that
cannot start the Python named, a Python without pyarrow, another Python version) is a report
too. Either way the answer is a :class:`veil.errors.MissingDependencyError` raised before
anything is reserved, naming what is missing and the fix; the job reads no data, so its error
text is quoted. A positive answer is cached per Spark application (its id and the Python its
executors start), so the check costs one job per application; executors added later (dynamic
allocation) are assumed to be like the ones asked.

Spark Connect: the client cannot choose the executors' Python (the server's ``PYSPARK_PYTHON``
does); the same job runs through the server (``mapInArrow`` works on Connect), and the fix
named is the server's.
"""

from __future__ import annotations

import json
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from veil import __version__
from veil.errors import MissingDependencyError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "ExecutorReport",
    "Imported",
    "check_executors",
    "executor_reports",
    "map_in_arrow",
    "problems",
]

JOB_GROUP = "veil-executor-check"
_MAX_TASKS = 64
_MAX_REASON = 600
_PASSED: set[tuple[str, str]] = set()
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Imported:
    """One module as an executor's Python imported it: its version, or the import's error."""

    module: str
    version: str | None  # None: the import failed
    error: str = ""  # "ModuleNotFoundError: No module named 'veil'"


@dataclass(frozen=True)
class ExecutorReport:
    """What one task of the check found on its executor."""

    executable: str
    python: str  # "3.11"
    imports: tuple[Imported, ...]

    @classmethod
    def from_json(cls, text: str) -> ExecutorReport:
        data = json.loads(text)
        return cls(
            executable=str(data["executable"]),
            python=str(data["python"]),
            imports=tuple(
                Imported(str(m), None if v is None else str(v), str(e))
                for m, v, e in data["imports"]
            ),
        )


def _probe(
    modules: tuple[str, ...],
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The check's function for ``mapInArrow``; nested, so that cloudpickle ships its code."""

    def probe(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import importlib
        import json
        import sys

        import pyarrow

        for _ in batches:
            pass
        found: list[list[str | None]] = []
        for name in modules:
            try:
                module = importlib.import_module(name)
            except Exception as exc:  # any failure to import is the answer, not an error
                found.append([name, None, f"{type(exc).__name__}: {exc}"])
            else:
                found.append([name, str(getattr(module, "__version__", "")), ""])
        report = {
            "executable": sys.executable,
            "python": "{}.{}".format(*sys.version_info[:2]),
            "imports": found,
        }
        yield pyarrow.RecordBatch.from_pydict({"report": [json.dumps(report)]})

    return probe


def map_in_arrow(frame: Any, function: Any, schema: Any) -> Any:
    """``frame.mapInArrow(function, schema)``, without the pandas version warning it shares with
    ``pandas_udf`` (the function never touches pandas). pyspark refuses it on a driver without
    pandas (or pyarrow): a :class:`veil.errors.MissingDependencyError` with the extra to install."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore",
                message="PySpark does not yet fully support pandas",
                category=FutureWarning,
            )
            return frame.mapInArrow(function, schema)
    except ImportError as exc:
        raise MissingDependencyError(
            f"Spark's mapInArrow needs pandas and pyarrow on the driver ({exc}); install them "
            "with: pip install 'veil[spark]'"
        ) from None


def _is_connect(spark: Any) -> bool:
    return getattr(spark, "_jvm", None) is None


def executor_reports(spark: SparkSession, kernel: str) -> tuple[ExecutorReport, ...]:
    """Run the check's job (uncached) and return each distinct report. Raises whatever Spark
    raises when the job itself fails."""
    modules = ("pyarrow", "numpy", "veil", kernel)
    tasks = 1
    context = None if _is_connect(spark) else spark.sparkContext
    if context is not None:
        tasks = max(1, min(int(context.defaultParallelism), _MAX_TASKS))
    job = map_in_arrow(spark.range(tasks, numPartitions=tasks), _probe(modules), "report string")
    if context is None:
        rows = job.collect()
    else:
        keys = ("spark.jobGroup.id", "spark.job.description")
        previous = [context.getLocalProperty(k) for k in keys]
        context.setLocalProperty(keys[0], JOB_GROUP)
        context.setLocalProperty(keys[1], "veil: can the executors run perturb?")
        try:
            rows = job.collect()
        finally:
            for key, value in zip(keys, previous, strict=True):
                context.setLocalProperty(key, value)  # type: ignore[arg-type, unused-ignore] # None unsets it
    texts = sorted({str(row["report"]) for row in rows})
    return tuple(ExecutorReport.from_json(t) for t in texts)


def driver_needs() -> dict[str, str]:
    """The versions the executors must have: the driver's veil and pyarrow."""
    return {"veil": __version__, "pyarrow": pa.__version__}


def problems(report: ExecutorReport, needs: dict[str, str], python: str) -> list[str]:
    """What ``report`` lacks for the kernel: each module that did not import (with its error),
    each of ``needs`` at another version, another Python version than ``python`` (empty: it can
    run the kernel)."""
    found: list[str] = []
    if report.python != python:
        found.append(f"Python {report.python}, not the driver's {python}")
    for item in report.imports:
        want = needs.get(item.module)
        if item.version is None:
            found.append(f"no {item.module} ({item.error})")
        elif want is not None and item.version != want:
            found.append(f"{item.module} {item.version}, not the driver's {want}")
    return found


def _reason(exc: Exception) -> str:
    """A line of what made the check's job fail: a Python worker's exception (the last line of
    its traceback), or the first line of Spark's own (it names the task's failure)."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    line = (lines[0] if java is not None else lines[-1]) if lines else type(exc).__name__
    return line if len(line) <= _MAX_REASON else line[: _MAX_REASON - 1] + "…"


def _fix(spark: Any) -> str:
    """How to give the executors a Python with veil, for this kind of Spark."""
    want = driver_needs()
    have = f"veil {want['veil']} and pyarrow {want['pyarrow']}"
    if _is_connect(spark):
        return (
            "on Spark Connect the server chooses the executors' Python: its operator must start "
            f"it with PYSPARK_PYTHON naming a Python that has {have} (docs: 'Run on Apache "
            "Spark')"
        )
    context = spark.sparkContext
    configured = context.getConf().get("spark.pyspark.python", None)
    note = ""
    if configured and configured != context.pythonExec:
        note = (
            f" (spark.pyspark.python={configured!r} has no effect here: spark-submit reads it "
            "when it starts the driver; a SparkSession built in a running Python takes the "
            "executors' Python from PYSPARK_PYTHON only)"
        )
    if str(context.master).startswith("local"):
        return (
            f"set PYSPARK_PYTHON={sys.executable} in the environment before the SparkSession "
            f"starts{note}"
        )
    return (
        f"ship a Python environment with {have} to the executors: build veil-env.tar.gz as "
        "the docs' 'Run on Apache Spark' guide shows, then set PYSPARK_PYTHON=./env/bin/python "
        "before the SparkSession starts, with spark.archives=veil-env.tar.gz#env (spark-submit: "
        "--archives veil-env.tar.gz#env --conf spark.pyspark.python=./env/bin/python --conf "
        f"spark.pyspark.driver.python=python){note}"
    )


def _application(spark: Any) -> tuple[str, str] | None:
    """The cache key: the application's id and the Python its executors start (None: no id)."""
    try:
        app = str(spark.conf.get("spark.app.id", "") or "")
    except Exception:  # a Connect server that does not say: ask every time
        return None
    if not app:
        return None
    return (app, "" if _is_connect(spark) else str(spark.sparkContext.pythonExec))


def check_executors(spark: SparkSession, *, kernel: str, what: str = "perturb") -> None:
    """Refuse, free, a Spark whose executors cannot run veil's Python for ``what``.

    Contract: returns only if a job on the executors imported pyarrow, numpy, veil and the
    ``kernel`` module, with veil's and pyarrow's versions equal to the driver's and the same
    Python version; otherwise raises :class:`veil.errors.MissingDependencyError` naming what is
    missing and the fix. Reads no data and reserves nothing; a positive answer is cached per
    application (:func:`_application`).
    """
    key = _application(spark)
    with _LOCK:
        if key is not None and key in _PASSED:
            return
    head = (
        f"{what} runs veil's Python on Spark's executors (in mapInArrow), and they cannot run it: "
    )
    tail = "Nothing was charged. Fix: "
    try:
        reports = executor_reports(spark, kernel)
    except Exception as exc:  # the check's own job failed on the executors: that is the answer
        raise MissingDependencyError(
            f"{head}a check job on them failed: {_reason(exc)}. {tail}{_fix(spark)}"
        ) from None
    python = "{}.{}".format(*sys.version_info[:2])
    for report in reports:
        found = problems(report, driver_needs(), python)
        if found:
            raise MissingDependencyError(
                f"{head}their Python {report.executable!r} has {'; '.join(found)}. "
                f"{tail}{_fix(spark)}"
            )
    if key is not None:
        with _LOCK:
            _PASSED.add(key)
