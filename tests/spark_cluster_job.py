"""A Spark driver program for tests/test_spark_cluster.py, run with ``spark-submit`` or ``python``.

``python spark_cluster_job.py CONFIG.json``: builds the SparkSession (``spark-submit`` or the
config's ``conf`` sets the master), runs one COUNT query and ``perturbs`` perturbations of the
Parquet table against the SQLite ledger named in the config, and prints one line
``VEIL-JOB {json}`` with each outcome, the Python the executors were started with, what the
executors reported (when perturb passed its check) and how many check jobs ran.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def main(config_path: str) -> None:
    from pyspark.sql import SparkSession

    import veil
    from veil.engines.spark_executors import JOB_GROUP, executor_reports
    from veil.errors import VeilError

    with open(config_path) as f:
        config = json.load(f)
    builder = SparkSession.builder.appName("veil-cluster-test")
    for key, value in config["conf"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    context = spark.sparkContext
    context.setLogLevel("ERROR")
    ledger = veil.Ledger(config["ledger"])
    out: dict[str, Any] = {"python_exec": context.pythonExec, "master": context.master}

    def attempt(run: Any) -> dict[str, Any]:
        try:
            return {"ok": True, **run()}
        except VeilError as exc:
            return {"ok": False, "error": type(exc).__name__, "message": str(exc)}

    def query() -> dict[str, Any]:
        with veil.Session.spark(
            spark, {"people": config["data"]}, analyst="alice", ledger=ledger, dataset="people"
        ) as session:
            result = session.sql("SELECT COUNT(*) AS n FROM people", epsilon=0.5)
            return {"n": float(result.to_arrow().column("n")[0].as_py())}

    def perturb() -> dict[str, Any]:
        released = veil.perturb(
            spark.read.parquet(config["data"]),
            epsilon=0.25,
            bounds={"x": (0, 1)},
            ledger=ledger,
            analyst="alice",
            dataset="people",
        )
        table = released.data.toArrow()
        return {"rows": table.num_rows, "columns": table.column_names}

    out["query"] = attempt(query)
    out["perturb"] = [attempt(perturb) for _ in range(config["perturbs"])]
    tracker = context.statusTracker()
    out["check_jobs"] = len(tracker.getJobIdsForGroup(JOB_GROUP))
    if out["perturb"][0]["ok"]:
        reports = executor_reports(spark, "veil.local.perturb")
        out["executors"] = [
            {"executable": r.executable, "imports": {i.module: i.version for i in r.imports}}
            for r in reports
        ]
    print("VEIL-JOB " + json.dumps(out), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
