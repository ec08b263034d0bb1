"""One small local Spark session shared by every Spark test (import as ``spark_support``).

``local[2]``, two shuffle partitions, no UI, quiet logs: a session starts in a few seconds and
is reused by every test module in the run. Tests that need it skip loudly when pyspark or a
Java runtime is missing (``make test`` installs both: ``pip install '.[spark]'`` and
``scripts/ensure-java.sh``).
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from typing import Any

import pytest


def _java_available() -> bool:
    home = os.environ.get("JAVA_HOME")
    return bool(home and os.path.exists(os.path.join(home, "bin", "java"))) or bool(
        shutil.which("java")
    )


@functools.cache
def _session() -> Any:
    from pyspark.sql import SparkSession

    # Python workers must run this interpreter (the one with veil, numpy and pyarrow).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("veil-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def spark_session() -> Any:
    """The shared local session; skips the calling test if Spark cannot run here."""
    pytest.importorskip("pyspark", reason="pyspark is not installed: pip install 'veil[spark]'")
    if not _java_available():
        pytest.skip("no Java runtime for Spark: run scripts/ensure-java.sh")
    return _session()
