"""Time of one bounded DP query on Spark ``local[2]``: veil on Spark vs plain Spark SQL.

The query is Q1, ``bench_query.py``'s: per state, COUNT(*), SUM(income) and AVG(income) with
income in [0, 1e6], each user bounded to one row, the 50 states declared as the key's public
domain, ε = 1 (pure), on the generated table (``_data.py``: ~rows/5.5 users with 1–10 rows
each, 50 skewed states, lognormal income). Contenders share one process and one Spark session
and are timed alternately, round by round in a rotating order, after a warm-up run each (the
JVM's JIT and Spark's caches); each run's wall time and CPU time (this process's and the
JVM's, from ``/proc``) are recorded, and the medians and ratios of both printed:

- ``spark``     plain Spark SQL doing the same bounded aggregation (the baseline): one row per
                user chosen by ``ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY
                xxhash64(salt, …))``, clamped income, float SUM/AVG.
- ``veil``      ``veil.Session.spark(...).sql(...)`` end to end over the same DataFrame (a fresh
                session and in-memory ledger per run, so no answer comes from the cache).
- ``veil-sql``  the SQL veil's ``explain`` says it sends, run as plain Spark SQL — the engine's
                share of veil's time.
- ``tumult``    Tumult Analytics on the same data, when it is importable (not a veil dependency).

    python benchmarks/bench_spark.py [--rows 1_000_000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _data
import _results

QUERY = (
    "SELECT state, COUNT(*) AS n, SUM(income) AS total, AVG(income) AS mean "
    "FROM people GROUP BY state"
)
EPSILON = 1.0
LO, HI = _data.INCOME_BOUNDS
OPTIONS: dict[str, Any] = {
    "epsilon": EPSILON,
    "bounds": {"income": (LO, HI)},
    "domains": {"state": list(_data.STATES)},
}


def baseline_sql(salt: int) -> str:
    """Plain Spark SQL: the same bounded aggregation veil performs, without the noise."""
    return f"""
SELECT state, COUNT(*) AS n, SUM(income) AS total, AVG(income) AS mean
FROM (
  SELECT state, least(greatest(income, {LO}), {HI}) AS income,
         ROW_NUMBER() OVER (PARTITION BY user_id
                            ORDER BY xxhash64({salt}, user_id, state, income)) AS rn
  FROM people
)
WHERE rn <= 1
GROUP BY state
"""


def spark_session(cores: int) -> Any:
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("veil-bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(max(2, cores * 2)))
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _salt() -> int:
    return int.from_bytes(os.urandom(8), "little") >> 1  # a fresh secret salt per query


def setup_spark(spark: Any, path: Path) -> Callable[[], object]:
    spark.read.parquet(str(path)).createOrReplaceTempView("people")

    def run() -> object:
        return spark.sql(baseline_sql(_salt())).toArrow()

    return run


def veil_session(spark: Any, frame: Any) -> Any:
    """A fresh session (in-memory ledger: no cached answers) over the shared DataFrame."""
    import veil

    return veil.Session.spark(
        spark,
        tables={"people": frame},
        privacy_unit="user_id",
        budget=veil.Budget(epsilon=EPSILON),
        analyst="bench",
        ledger="sqlite://",
    )


def setup_veil(spark: Any, path: Path) -> Callable[[], object]:
    import logging

    logging.getLogger("veil").setLevel(logging.ERROR)  # each run spends its grant: no alerts
    frame = spark.read.parquet(str(path))  # created once, like the baseline's view

    def run() -> object:
        session = veil_session(spark, frame)
        return session.sql(QUERY, **OPTIONS)

    return run


def setup_veil_sql(spark: Any, path: Path) -> Callable[[], object]:
    from veil.compile import dialect, lower, to_sql
    from veil.plan.tree import aggregate_of

    explained = veil_session(spark, spark.read.parquet(str(path))).explain(QUERY, **OPTIONS)
    # explain shows the SQL with a salt placeholder; lower it with a fresh salt per run, as veil
    agg = aggregate_of(explained.plan)
    spark.read.parquet(str(path)).createOrReplaceTempView("people")

    def run() -> object:
        sql = to_sql(lower(agg, dialect("spark"), salt=_salt()).main, "spark")
        return spark.sql(sql).toArrow()

    return run


def setup_tumult(spark: Any, path: Path) -> Callable[[], object]:
    """Count, sum and average per state, one row per user, ε split in three (Tumult has no
    shared noisy count)."""
    from tmlt.analytics.constraints import MaxRowsPerID  # type: ignore[import-not-found]
    from tmlt.analytics.keyset import KeySet  # type: ignore[import-not-found]
    from tmlt.analytics.privacy_budget import PureDPBudget  # type: ignore[import-not-found]
    from tmlt.analytics.protected_change import AddRowsWithID  # type: ignore[import-not-found]
    from tmlt.analytics.query_builder import QueryBuilder  # type: ignore[import-not-found]
    from tmlt.analytics.session import Session  # type: ignore[import-not-found]

    frame = spark.read.parquet(str(path))
    states = KeySet.from_dict({"state": list(_data.STATES)})

    def run() -> object:
        session = Session.from_dataframe(
            privacy_budget=PureDPBudget(EPSILON),
            source_id="people",
            dataframe=frame,
            protected_change=AddRowsWithID("user_id"),
        )
        base = QueryBuilder("people").enforce(MaxRowsPerID(1)).groupby(states)
        part = PureDPBudget(EPSILON / 3)
        return [
            session.evaluate(base.count(), part).collect(),
            session.evaluate(base.sum("income", LO, HI), part).collect(),
            session.evaluate(base.average("income", LO, HI), part).collect(),
        ]

    return run


CONTENDERS: dict[str, Callable[[Any, Path], Callable[[], object]]] = {
    "spark": setup_spark,
    "veil": setup_veil,
    "veil-sql": setup_veil_sql,
    "tumult": setup_tumult,
}


def _cpu(jvm: int | None) -> float:
    """CPU seconds so far of this process (every thread) and of the JVM ``jvm`` (its
    ``/proc`` user + system ticks; 0 where there is no ``/proc``)."""
    total = time.process_time()
    if jvm is not None:
        try:
            fields = Path(f"/proc/{jvm}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            pass
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=lambda s: int(s.replace("_", "")), default=1_000_000)
    parser.add_argument("--rounds", type=int, default=7, help="timed runs per contender")
    parser.add_argument("--cores", type=int, default=2, help="local[N]")
    parser.add_argument("--only", nargs="*", default=list(CONTENDERS), choices=list(CONTENDERS))
    parser.add_argument("--results", type=Path, default=None, help="JSON file of the figures")
    args = parser.parse_args()
    run_record = _results.Run("spark")

    path = _data.ensure_table(args.rows)
    print(f"table: {args.rows:,} rows, {path.stat().st_size / 2**20:.0f} MiB Parquet")
    print(f"query: {QUERY}  [ε={EPSILON}, income in [{LO:g}, {HI:g}], 1 row/user, the 50 "
          "states declared]")  # fmt: skip
    start = time.perf_counter()
    spark = spark_session(args.cores)
    print(f"Spark {spark.version} local[{args.cores}] up in {time.perf_counter() - start:.1f} s")
    gateway = getattr(spark.sparkContext, "_gateway", None)
    jvm = getattr(getattr(gateway, "proc", None), "pid", None)

    runs: dict[str, Callable[[], object]] = {}
    for name in args.only:
        try:
            runs[name] = CONTENDERS[name](spark, path)
            runs[name]()  # warm-up (JIT, file listing); not timed
        except Exception as exc:  # a missing optional contender is reported, not fatal
            print(f"  skipping {name}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            runs.pop(name, None)
    times: dict[str, list[float]] = {n: [] for n in runs}
    cpus: dict[str, list[float]] = {n: [] for n in runs}
    names = list(runs)
    for r in range(args.rounds):  # the order rotates so that no contender always goes first
        for name in names[r % len(names) :] + names[: r % len(names)]:
            cpu, begin = _cpu(jvm), time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - begin)
            cpus[name].append(_cpu(jvm) - cpu)

    base = statistics.median(times["spark"]) if "spark" in times else float("nan")
    base_cpu = statistics.median(cpus["spark"]) if "spark" in cpus else float("nan")
    print(f"\n{'contender':<10} {'median s':>9} {'min s':>7} {'× spark':>8} {'CPU s':>7} "
          f"{'× spark':>8}   (CPU: Python and the JVM)")  # fmt: skip
    figures = {}
    for name, ts in times.items():
        med, cpu = statistics.median(ts), statistics.median(cpus[name])
        print(f"{name:<10} {med:9.2f} {min(ts):7.2f} {med / base:8.2f} {cpu:7.2f} "
              f"{cpu / base_cpu:8.2f}")  # fmt: skip
        figures[name] = {"wall_median_s": round(med, 3), "wall_min_s": round(min(ts), 3),
                         "cpu_median_s": round(cpu, 3)}  # fmt: skip
    run_record.add("rows", args.rows)
    run_record.add("rounds", args.rounds)
    run_record.add("cores", args.cores)
    run_record.add("query", "Q1: COUNT, SUM, AVG of income per declared state, 1 row/user, ε=1")
    run_record.add("contenders", figures)
    if "veil" in times and "spark" in times:
        ratio = statistics.median(times["veil"]) / base
        cpu_ratio = statistics.median(cpus["veil"]) / base_cpu
        best = min(times["veil"]) / min(times["spark"])
        verdict = "meets" if ratio <= 1.3 else "MISSES"
        print(
            f"\nveil on Spark / plain Spark SQL = {ratio:.2f}× by median wall, {best:.2f}× by "
            f"best run, {cpu_ratio:.2f}× by median CPU ({verdict} the 1.3× target)"
        )
        run_record.add("veil_over_spark", {"wall_median": round(ratio, 3),
                                           "wall_best": round(best, 3),
                                           "cpu_median": round(cpu_ratio, 3)})  # fmt: skip
    spark.stop()
    run_record.write(args.results)


if __name__ == "__main__":
    main()
