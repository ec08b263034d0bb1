"""Apache Spark as a veil engine: the same SQL trees, run where the data lives.

:class:`SparkEngine` implements :class:`veil.engines.base.Engine`. The session lowers a plan
to a sqlglot tree (one dialect-neutral lowering module); this engine generates it as Spark SQL,
runs it on the cluster and collects the result through Arrow. The result is the small table
of exact aggregates — one row per group — so only aggregated rows ever reach the driver.

Tables are Spark DataFrames, catalog table names, or Parquet/CSV/JSON/ORC paths (any URI Spark
can read: ``s3a://…``, ``hdfs://…``). Each is registered under a private temporary view name and
the tree's table references are rewritten to it, so the user's own views are never replaced.

pyspark is an optional extra (``pip install 'veil[spark]'``) imported only when an engine is
built; without it :class:`veil.errors.MissingDependencyError` says what to install.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import itertools
import os
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp
from sqlglot.errors import ErrorLevel

from veil.engines.base import Progress
from veil.engines.progress import watching
from veil.errors import (
    InvalidArgumentError,
    MissingDependencyError,
    SchemaError,
    UnsupportedQueryError,
)

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SparkEngine", "default_spark_session", "is_spark_dataframe", "require_pyspark"]

INSTALL_HINT = "pip install 'veil[spark]'"

_FILE_FORMATS = {
    ".parquet": "parquet",
    ".pq": "parquet",
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".ndjson": "json",
    ".orc": "orc",
}
_ENGINE_IDS = itertools.count()
_VERSIONS = itertools.count()
_QUERY_IDS = itertools.count()
_MAX_STATS = 2_000  # input files stat-ed one by one for the data version
# Spark's SQL configuration is per session; the ANSI switch in ``execute`` is guarded per process.
_CONF_LOCK = threading.RLock()


def require_pyspark() -> ModuleType:
    """Import and return ``pyspark.sql``, or raise ``MissingDependencyError`` with the hint."""
    try:
        return importlib.import_module("pyspark.sql")
    except ImportError as exc:
        raise MissingDependencyError(
            f"running veil on Apache Spark needs pyspark, which is not installed ({exc}); "
            f"install it with: {INSTALL_HINT}"
        ) from exc


def default_spark_session() -> SparkSession:
    """``SparkSession.builder.getOrCreate()``: the session ``spark-submit`` configured, a Spark
    Connect session when ``SPARK_REMOTE`` is set (``sc://host:15002``), else ``local[*]``."""
    sql = require_pyspark()
    session: SparkSession = sql.SparkSession.builder.appName("veil").getOrCreate()
    return session


def is_spark_dataframe(obj: object) -> bool:
    """True for a classic or Spark Connect DataFrame, without importing pyspark."""
    cls = type(obj)
    return cls.__name__ == "DataFrame" and cls.__module__.startswith("pyspark.sql")


def _looks_like_path(source: str) -> bool:
    return (
        "/" in source
        or "\\" in source
        or "://" in source
        or Path(source).suffix.lower() in _FILE_FORMATS
        or os.path.exists(source)
    )


def _read_path(spark: SparkSession, path: str) -> DataFrame:
    """A DataFrame over a file or directory; the format comes from the suffix (default Parquet)."""
    suffix = Path(path.rstrip("/")).suffix.lower()
    fmt = _FILE_FORMATS.get(suffix, "parquet")
    reader = spark.read.format(fmt)
    if fmt == "csv":
        sep = "\t" if suffix == ".tsv" else ","
        reader = reader.option("header", "true").option("inferSchema", "true").option("sep", sep)
    return reader.load(path)


class SparkEngine:
    """Runs veil's SQL trees on a Spark session and returns exact aggregates as Arrow.

    ``tables`` maps the names used in queries to a Spark ``DataFrame``, a catalog table name,
    or a path (Parquet, CSV with a header, JSON lines, ORC; a directory is read as Parquet).
    Works with classic Spark and with Spark Connect sessions.
    """

    dialect = "spark"

    def __init__(
        self, spark_session: SparkSession, tables: Mapping[str, DataFrame | str | os.PathLike[str]]
    ) -> None:
        require_pyspark()
        if not tables:
            raise InvalidArgumentError(
                "SparkEngine needs at least one table; pass tables={'people': df_or_path}"
            )
        self._spark = spark_session
        self._prefix = f"__veil_{os.getpid()}_{next(_ENGINE_IDS)}_"
        self._names: dict[str, str] = {}  # lower-cased → as given
        self._frames: dict[str, DataFrame] = {}
        self._views: dict[str, str] = {}
        for name, source in tables.items():
            if not isinstance(name, str) or not name:
                raise InvalidArgumentError(f"table names must be non-empty strings, got {name!r}")
            key = name.lower()  # Spark resolves identifiers case-insensitively
            if key in self._frames:
                raise InvalidArgumentError(
                    f"table {name!r} is given twice (Spark names are case-insensitive)"
                )
            frame = self._as_dataframe(name, source)
            view = f"{self._prefix}{len(self._views)}"
            frame.createOrReplaceTempView(view)
            self._names[key] = name
            self._frames[key] = frame
            self._views[key] = view

    def _as_dataframe(self, name: str, source: object) -> DataFrame:
        if is_spark_dataframe(source):
            owner = getattr(source, "sparkSession", self._spark)
            if owner is not self._spark:
                raise InvalidArgumentError(
                    f"table {name!r} is a DataFrame of another Spark session; pass the session "
                    "that created it, or a path or table name this session can read"
                )
            return source  # type: ignore[return-value]
        if isinstance(source, os.PathLike):
            source = os.fspath(source)
        if isinstance(source, str):
            if _looks_like_path(source):
                return _read_path(self._spark, source)
            return self._spark.table(source)
        raise InvalidArgumentError(
            f"table {name!r}: cannot read a {type(source).__name__} on Spark; pass a Spark "
            "DataFrame, a catalog table name or a Parquet/CSV path"
        )

    # -- the Engine protocol -----------------------------------------------------------------

    @property
    def tables(self) -> tuple[str, ...]:
        """The registered table names, as given (Spark resolves them case-insensitively)."""
        return tuple(self._names.values())

    def _frame(self, table: str) -> DataFrame:
        try:
            return self._frames[table.lower()]
        except KeyError:
            known = ", ".join(sorted(self._names.values()))
            raise SchemaError(
                f"unknown table {table!r}; the Spark engine has: {known}. "
                "Register it with tables={...}"
            ) from None

    def schema(self, table: str) -> pa.Schema:
        """The table's Arrow schema, from Spark's analysed plan (no data is read)."""
        frame = self._frame(table)
        types = importlib.import_module("pyspark.sql.pandas.types")
        result: pa.Schema = types.to_arrow_schema(frame.schema)
        return result

    def data_version(self, table: str) -> str:
        """A digest of the table's logical plan and of its input files' sizes and times.

        Files on any Hadoop file system are stat-ed through the JVM (classic Spark). When they
        cannot be (Spark Connect, or more than ``_MAX_STATS`` files), the version is a fresh
        token on every call: no cached answer is ever served for data that may have changed —
        the query is simply charged again. A table with no input files (an in-memory
        DataFrame) holds its data in the plan, which the digest covers.
        """
        frame = self._frame(table)
        files = sorted(frame.inputFiles())
        stats = self._file_stats(files)
        if stats is None:
            return f"uncached:{os.getpid()}:{time.time_ns()}:{next(_VERSIONS)}"
        digest = hashlib.sha256(str(frame.semanticHash()).encode())
        for path in files:
            digest.update(f"\0{path}\0{stats[path]}".encode())
        return digest.hexdigest()[:32]

    def _file_stats(self, files: list[str]) -> dict[str, str] | None:
        """``path → "size:mtime"``, or None when the files cannot be stat-ed cheaply."""
        if not files:
            return {}
        jvm: Any = getattr(self._spark, "_jvm", None)
        if jvm is None or len(files) > _MAX_STATS:  # Spark Connect has no JVM gateway
            return None
        conf = self._spark.sparkContext._jsc.hadoopConfiguration()
        stats: dict[str, str] = {}
        for path in files:
            jpath = jvm.org.apache.hadoop.fs.Path(path)
            status = jpath.getFileSystem(conf).getFileStatus(jpath)
            stats[path] = f"{status.getLen()}:{status.getModificationTime()}"
        return stats

    def sql(self, query: exp.Expression) -> str:
        """The Spark SQL text ``query`` runs as (table names replaced by private views)."""
        ctes = {cte.alias_or_name.lower() for cte in query.find_all(exp.CTE)}

        def rename(node: exp.Expression) -> exp.Expression:
            if not isinstance(node, exp.Table) or node.args.get("db") or node.args.get("catalog"):
                return node
            name = node.name.lower()
            if name in ctes:
                return node
            view = self._views.get(name)
            if view is None:
                self._frame(node.name)  # raises the SchemaError naming the known tables
            renamed = node.copy()
            renamed.set("this", exp.to_identifier(view, quoted=True))
            if not renamed.alias:
                renamed.set("alias", exp.TableAlias(this=exp.to_identifier(node.name)))
            return renamed

        tree = query.transform(rename)
        if not isinstance(tree, exp.Query):
            raise UnsupportedQueryError(
                f"the Spark engine runs queries only, not {type(query).__name__} nodes"
            )
        return tree.sql(dialect="spark", unsupported_level=ErrorLevel.RAISE)

    def check(self, query: exp.Expression) -> None:
        """Analyse ``query`` without running it (no private value is read): a type or name
        error is a ``SchemaError`` decided by the schema alone, raised before anything is
        charged."""
        errors = importlib.import_module("pyspark.errors")
        try:
            with self._ansi_off():
                self._spark.sql(self.sql(query)).schema  # noqa: B018 - forces analysis on Connect
        except errors.AnalysisException as exc:
            raise SchemaError(f"the query does not fit the table's columns: {exc}") from exc

    def execute(self, query: exp.Expression) -> pa.Table:
        """Run ``query`` with ANSI mode *off* and collect its (small) result as Arrow.

        ANSI mode is switched off for the duration of the query (the session's setting is
        restored after): under ANSI, Spark raises on a value that an implicit or explicit cast,
        a division or an extraction cannot handle, so whether the query fails would depend on
        private rows (``name = 12`` fails iff some name is not a number). Without it such a
        value gives NULL and the row is left out. A BIGINT sum then wraps instead of raising;
        the session certifies each fixed-point sum from the exact row count (rows·limit < 2^63,
        see ``Dialect.sum_wraps``) and refuses a NULL sum of a non-empty group (DESIGN §2:
        overflow is checked, not assumed).
        """
        return self._run(self.sql(query))

    def _run(self, text: str) -> pa.Table:
        errors = importlib.import_module("pyspark.errors")
        try:
            with self._ansi_off():
                return _collect(self._spark.sql(text))
        except errors.PySparkException as exc:
            translated = _translate(exc)
            if translated is exc:
                raise
            raise translated from exc

    def execute_with_progress(self, query: exp.Expression, progress: Progress) -> pa.Table:
        """:meth:`execute`, reporting the share of finished tasks to ``progress`` every ~100 ms.

        The query's jobs run under a job group of their own (the thread's previous group is
        restored after); the fraction is finished / all tasks of the stages Spark has planned
        for them so far, from the SparkContext's status tracker — so it can stall when a later
        stage is planned, never go back. On Spark Connect (no SparkContext) it stays unknown.
        See :class:`veil.engines.base.ProgressReporting` for the contract and what it reveals.
        """
        text = self.sql(query)
        context = self._context()
        if context is None:
            with watching(lambda: None, progress):
                return self._run(text)
        group = f"{self._prefix}q{next(_QUERY_IDS)}"
        key = "spark.jobGroup.id"
        previous = context.getLocalProperty(key)
        context.setLocalProperty(key, group)
        try:
            with watching(functools.partial(_tasks_done, context, group), progress):
                return self._run(text)
        finally:
            context.setLocalProperty(key, previous)  # type: ignore[arg-type] # None unsets it

    def _context(self) -> SparkContext | None:
        """The SparkContext, or None on Spark Connect (which has none)."""
        if getattr(self._spark, "_jvm", None) is None:
            return None
        context: SparkContext = self._spark.sparkContext
        return context

    @contextmanager
    def _ansi_off(self) -> Iterator[None]:
        key = "spark.sql.ansi.enabled"
        with _CONF_LOCK:
            previous = self._spark.conf.get(key, None)
            self._spark.conf.set(key, "false")
            try:
                yield
            finally:
                if previous is None:
                    self._spark.conf.unset(key)
                else:
                    self._spark.conf.set(key, previous)

    def close(self) -> None:
        """Drop the temporary views this engine registered."""
        for view in self._views.values():
            self._spark.catalog.dropTempView(view)
        self._views.clear()
        self._frames.clear()
        self._names.clear()

    def __enter__(self) -> SparkEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"SparkEngine(tables={sorted(self._names.values())})"


_OVERFLOW = ("ARITHMETIC_OVERFLOW", "NUMERIC_VALUE_OUT_OF_RANGE", "DECIMAL_PRECISION")
_BAD_CAST = ("CAST_INVALID_INPUT", "CAST_OVERFLOW")


def _translate(exc: Exception) -> Exception:
    """A veil user error for Spark's overflow and cast failures; anything else unchanged."""
    condition = ""
    for getter in ("getCondition", "getErrorClass"):
        method = getattr(exc, getter, None)
        if method is not None:
            condition = str(method() or "")
            break
    if condition.startswith(_OVERFLOW):
        return InvalidArgumentError(
            f"an aggregate overflowed on Spark ({condition}); the fixed-point sum no longer fits "
            "DECIMAL(38): declare narrower bounds for the summed column"
        )
    if condition.startswith(_BAD_CAST):
        return SchemaError(
            f"Spark could not convert a value to a number ({condition}); a numeric aggregate "
            "needs numeric data: clean or cast the column before querying it"
        )
    return exc


def _tasks_done(context: SparkContext, group: str) -> float | None:
    """Finished / all tasks of the stages of job group ``group``'s jobs (None: none yet)."""
    tracker = context.statusTracker()
    done = total = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                done += stage.numCompletedTasks
                total += stage.numTasks
    return done / total if total else None


def _collect(frame: DataFrame) -> pa.Table:
    """Collect a small DataFrame as Arrow: ``toArrow`` on Spark ≥ 4, else Arrow-backed pandas."""
    to_arrow = getattr(frame, "toArrow", None)
    if to_arrow is not None:
        table: pa.Table = to_arrow()
        return table
    spark = frame.sparkSession
    key = "spark.sql.execution.arrow.pyspark.enabled"
    with _CONF_LOCK:
        previous = spark.conf.get(key, None)
        spark.conf.set(key, "true")
        try:
            pdf = frame.toPandas()
        finally:
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)
    return pa.Table.from_pandas(pdf, preserve_index=False)
