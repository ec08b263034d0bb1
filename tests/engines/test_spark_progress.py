"""Progress of a Spark query: the share of finished tasks of the query's own job group."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest
import sqlglot

from spark_support import spark_session
from veil.engines.spark import SparkEngine

pytestmark = pytest.mark.spark

# Each of the 24 tasks sleeps 60 ms on its first row (Thread.sleep through reflect), so the job
# lasts ≥ 0.7 s on local[2] however warm the JVM is: several 0.1 s polls see it part-way.
QUERY = sqlglot.parse_one(
    "SELECT COUNT(*) AS n, SUM(id % 7) AS s FROM big WHERE id % 1250000 <> 0 "
    "OR reflect('java.lang.Thread', 'sleep', CAST(60 AS BIGINT)) IS NULL",
    dialect="spark",
)


@pytest.fixture(scope="module")
def engine() -> Any:
    spark = spark_session()
    # 24 tasks on local[2]: several polls see some of them finished
    with SparkEngine(spark, {"big": spark.range(0, 30_000_000, numPartitions=24)}) as eng:
        yield eng


def test_spark_reports_increasing_fractions_ending_at_one_and_the_same_result(
    engine: SparkEngine,
) -> None:
    context = engine._spark.sparkContext
    context.setLocalProperty("spark.jobGroup.id", "the caller's group")
    plain = engine.execute(QUERY)
    reports: list[float | None] = []
    before = threading.active_count()
    try:
        watched = engine.execute_with_progress(QUERY, reports.append)
        assert context.getLocalProperty("spark.jobGroup.id") == "the caller's group"
    finally:
        context.setLocalProperty("spark.jobGroup.id", None)
    assert threading.active_count() == before
    assert watched.equals(plain)
    fractions = [f for f in reports if f is not None]
    assert all(a < b for a, b in itertools.pairwise(fractions)), reports
    assert fractions[-1] == 1.0
    assert any(0 < f < 1 for f in fractions), reports  # Spark's own count, not only our 1.0


def test_spark_errors_propagate_with_progress_and_the_watcher_stops(engine: SparkEngine) -> None:
    # fails on the last row only, in a task, after other tasks have finished
    failing = sqlglot.parse_one(
        "SELECT COUNT(*) AS n FROM big WHERE assert_true(id < 29999999) IS NULL", dialect="spark"
    )
    with pytest.raises(Exception) as plain:  # noqa: PT011 - whatever Spark raises, unchanged
        engine.execute(failing)
    reports: list[float | None] = []
    with pytest.raises(type(plain.value), match="id < 29999999"):
        engine.execute_with_progress(failing, reports.append)
    assert 1.0 not in reports
    assert not [t for t in threading.enumerate() if t.name == "veil-progress"]
