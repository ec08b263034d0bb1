"""The engines every cross-engine test runs on (import as ``harness``).

One small class per engine turns an Arrow table (plus casts, in the engine's SQL, into types
Arrow and Parquet cannot carry: DuckDB's HUGEINT, UUID, INTERVAL…, Spark's TIMESTAMP_NTZ and
day-time INTERVAL) into a :class:`veil.Session` over a table ``t``. A new engine adds a class
here and is then run by every test that iterates over :data:`HARNESSES` — the
neighbouring-outcome test among them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil

_FILES = itertools.count()


class Harness(Protocol):
    """How a test gets a session on one engine."""

    name: str

    def supports(self, table: pa.Table, casts: Mapping[str, str]) -> bool:
        """Whether this engine can hold ``table`` with ``casts`` (else the case is skipped)."""
        ...

    def session(
        self,
        table: pa.Table,
        casts: Mapping[str, str],
        tmp: Path,
        **options: Any,
    ) -> veil.Session:
        """A session over ``table`` registered as ``t``; ``casts`` maps a column to an
        expression of that column in the engine's SQL (``"CAST(g AS HUGEINT)"``); ``options``
        go to the session."""
        ...


class DuckDBHarness:
    """The embedded engine, over a native DuckDB table (so DuckDB-only types can be tested)."""

    name = "duckdb"

    def supports(self, table: pa.Table, casts: Mapping[str, str]) -> bool:
        return True

    def session(
        self, table: pa.Table, casts: Mapping[str, str], tmp: Path, **options: Any
    ) -> veil.Session:
        con = duckdb.connect()
        con.register("__source", table)
        columns = ", ".join(
            f'{casts[c]} AS "{c}"' if c in casts else f'"{c}"' for c in table.column_names
        )
        con.execute(f"CREATE TABLE t AS SELECT {columns} FROM __source")
        con.unregister("__source")
        return veil.Session.local({"t": "t"}, connection=con, **options)


class SparkHarness:
    """Apache Spark (``local[2]``), over a Parquet file written from the Arrow table (through
    the casts, a DataFrame of it)."""

    name = "spark"

    def supports(self, table: pa.Table, casts: Mapping[str, str]) -> bool:
        for f in table.schema:
            kind = f.type
            if pa.types.is_timestamp(kind) and kind.unit == "ns":
                return False  # Spark has no nanosecond timestamps
        return True

    def session(
        self, table: pa.Table, casts: Mapping[str, str], tmp: Path, **options: Any
    ) -> veil.Session:
        from spark_support import spark_session

        spark = spark_session()
        path = tmp / f"t{next(_FILES)}.parquet"
        pq.write_table(table, path)
        if not casts:
            return veil.Session.spark(spark, {"t": str(path)}, **options)
        columns = [f"{casts[c]} AS `{c}`" if c in casts else f"`{c}`" for c in table.column_names]
        frame = spark.read.parquet(str(path)).selectExpr(*columns)
        return veil.Session.spark(spark, {"t": frame}, **options)


class DuckDBParquetHarness:
    """The embedded engine over a Parquet file written from the Arrow table as it is — the
    way writers that do not validate write one (strings that are not UTF-8, DECIMALs beyond
    their precision: ``parquet_support``)."""

    name = "duckdb-parquet"

    def supports(self, table: pa.Table, casts: Mapping[str, str]) -> bool:
        return not casts

    def session(
        self, table: pa.Table, casts: Mapping[str, str], tmp: Path, **options: Any
    ) -> veil.Session:
        path = tmp / f"t{next(_FILES)}.parquet"
        pq.write_table(table, path)
        return veil.Session.local({"t": path}, **options)


class PostgresHarness:
    """PostgreSQL (the test server), over a table written into this run's schema with the
    types that hold the Arrow values exactly (``postgres_support.load``), then cast (a
    column of text into NUMERIC, say) in SQL."""

    name = "postgres"

    def supports(self, table: pa.Table, casts: Mapping[str, str]) -> bool:
        import postgres_support

        return postgres_support.supports(table)

    def session(
        self, table: pa.Table, casts: Mapping[str, str], tmp: Path, **options: Any
    ) -> veil.Session:
        import postgres_support

        qualified = postgres_support.load(table)
        if casts:
            columns = ", ".join(
                f'{casts[c]} AS "{c}"' if c in casts else f'"{c}"' for c in table.column_names
            )
            cast = f"{qualified}_cast"
            postgres_support.connection().execute(
                f"CREATE TABLE {cast} AS SELECT {columns} FROM {qualified}"
            )
            qualified = cast
        return veil.Session.postgres(postgres_support.PG_URL, {"t": qualified}, **options)


HARNESSES = [
    pytest.param(DuckDBHarness(), id="duckdb"),
    pytest.param(DuckDBParquetHarness(), id="duckdb-parquet"),
    pytest.param(SparkHarness(), id="spark", marks=pytest.mark.spark),
    pytest.param(PostgresHarness(), id="postgres", marks=pytest.mark.postgres),
]
"""Every engine, as pytest parameters (Spark marked ``spark``)."""
