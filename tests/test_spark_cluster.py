"""veil on a real Spark standalone cluster: a master and one worker on loopback, started here.

Each test runs a driver program (``spark_cluster_job.py``) in a process of its own — with
``spark-submit`` or a plain ``python``, as a user would — against the cluster, with a SQLite
ledger that grants alice ε = 10 on ``people``, and reads the ledger afterwards:

- executors whose Python lacks veil (or pyarrow) still run queries (no Python there), and
  ``perturb`` is refused before anything is charged, saying what is missing and the fix;
- ``spark.pyspark.python`` set on a SparkSession's builder does not choose the executors'
  Python (only ``PYSPARK_PYTHON`` does), and the refusal says so;
- the README's recipe — veil's wheel in a virtual environment, packed with ``tar -czf`` and
  shipped with ``--archives``/``spark.archives``, ``PYSPARK_PYTHON=./env/bin/python`` — runs
  ``perturb`` on the executors, with spark-submit and from a Python driver; the executors' check
  runs once per application.

One worker with one core and 1 GiB; executors and drivers of 512 MiB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from spark_cluster import (
    JOB,
    REPO,
    Cluster,
    Environments,
    build_environments,
    clean_environment,
    spark_home,
    standalone,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS = 500
GRANT = Fraction(10)
QUERY = Fraction(1, 2)
PERTURB = Fraction(1, 4)
SMALL = {
    "spark.executor.memory": "512m",
    "spark.driver.memory": "512m",
    "spark.cores.max": "1",
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
}
JOB_TIMEOUT = 900  # a safety net for a loaded machine, not a speed requirement


@pytest.fixture(scope="module")
def environments(tmp_path_factory: pytest.TempPathFactory) -> Environments:
    spark_home()
    return build_environments(tmp_path_factory.mktemp("environments"))


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, environments: Environments
) -> Iterator[Cluster]:
    with standalone(tmp_path_factory.mktemp("cluster"), path_first=environments.bare / "bin") as c:
        yield c


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "people.parquet"
    pq.write_table(pa.table({"id": pa.array(range(ROWS), pa.int64()), "x": [0.5] * ROWS}), path)
    return path


def run_job(
    tmp_path: Path,
    cluster: Cluster,
    people: Path,
    *,
    submit: list[str] | None = None,
    conf: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    perturbs: int = 1,
) -> dict[str, Any]:
    """Run the driver program against ``cluster`` (with ``spark-submit`` and ``submit``'s
    options, else ``python``); its outcomes as printed."""
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    veil.Ledger(ledger).grant("alice", "people", veil.Budget(epsilon=GRANT))
    config = {
        "ledger": ledger,
        "data": str(people),
        "perturbs": perturbs,
        "conf": {**SMALL, **(conf or {})},
    }
    if submit is None:
        config["conf"]["spark.master"] = cluster.master
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    if submit is None:
        command = [sys.executable, str(JOB), str(path)]
    else:
        command = [*spark_submit(cluster), *submit, str(JOB), str(path)]
    stdout = run_driver(tmp_path, cluster, command, env or {})
    lines = [line for line in stdout.splitlines() if line.startswith("VEIL-JOB ")]
    assert len(lines) == 1, stdout
    outcome: dict[str, Any] = json.loads(lines[0].removeprefix("VEIL-JOB "))
    outcome["remaining"] = veil.Ledger(ledger).remaining("alice", "people").epsilon
    return outcome


def spark_submit(cluster: Cluster) -> list[str]:
    return [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master]


def run_driver(tmp_path: Path, cluster: Cluster, command: list[str], env: dict[str, str]) -> str:
    """Run a driver program with this checkout's veil on its path; its standard output."""
    environment = clean_environment(PYTHONPATH=str(REPO / "src"), SPARK_LOCAL_IP="127.0.0.1", **env)
    done = subprocess.run(
        command,
        env=environment,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=JOB_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(
            f"the driver program failed ({done.returncode}):\n{done.stdout[-4000:]}\n"
            f"{done.stderr[-8000:]}\n{cluster.log_tail()}"
        )
    return done.stdout


def test_executors_without_veil_run_queries_and_refuse_perturb_before_the_charge(
    tmp_path: Path, cluster: Cluster, people: Path, environments: Environments
) -> None:
    python = str(environments.no_veil / "bin" / "python")
    out = run_job(tmp_path, cluster, people, env={"PYSPARK_PYTHON": python})
    assert out["python_exec"] == python
    assert out["query"] == {"ok": True, "n": pytest.approx(ROWS, abs=200)}
    (refused,) = out["perturb"]
    assert refused["error"] == "MissingDependencyError"
    message = refused["message"]
    assert f"their Python {python!r} has no veil (ModuleNotFoundError: " in message
    assert "Nothing was charged" in message
    assert "PYSPARK_PYTHON=./env/bin/python" in message
    assert "spark.archives=veil-env.tar.gz#env" in message
    assert out["remaining"] == GRANT - QUERY  # the query's charge, nothing for perturb


def test_spark_pyspark_python_on_the_builder_is_ignored_and_the_refusal_says_so(
    tmp_path: Path, cluster: Cluster, people: Path, environments: Environments
) -> None:
    # a Python that could run perturb, named where Spark does not look for it: the executors
    # start `python3` (PYSPARK_PYTHON's default), which is the bare environment's on the worker
    good = str(environments.veil_env / "bin" / "python")
    out = run_job(tmp_path, cluster, people, conf={"spark.pyspark.python": good})
    assert out["python_exec"] == "python3"
    (refused,) = out["perturb"]
    assert refused["error"] == "MissingDependencyError"
    message = refused["message"]
    assert "a check job on them failed" in message
    assert "No module named 'pyarrow'" in message
    assert f"spark.pyspark.python={good!r} has no effect here" in message
    assert out["remaining"] == GRANT - QUERY


def _released(out: dict[str, Any], perturbs: int) -> None:
    assert out["query"] == {"ok": True, "n": pytest.approx(ROWS, abs=200)}
    assert out["perturb"] == [{"ok": True, "rows": ROWS, "columns": ["x"]}] * perturbs
    (executor,) = out["executors"]
    assert executor["executable"].endswith("/env/bin/python")  # inside the unpacked archive
    assert executor["imports"]["veil"] == veil.__version__
    assert executor["imports"]["pyarrow"] == pa.__version__
    assert out["check_jobs"] == 1  # once per application, however many perturbations
    assert out["remaining"] == GRANT - QUERY - perturbs * PERTURB


def test_the_readme_spark_submit_recipe_runs_perturb_on_the_executors(
    tmp_path: Path, cluster: Cluster, people: Path, environments: Environments
) -> None:
    submit = [
        *("--archives", f"{environments.archive}#env"),
        *("--conf", "spark.pyspark.python=./env/bin/python"),
        *("--conf", f"spark.pyspark.driver.python={sys.executable}"),
    ]
    out = run_job(tmp_path, cluster, people, submit=submit, perturbs=2)
    assert out["python_exec"] == "./env/bin/python"
    _released(out, 2)


def test_pyspark_python_and_spark_archives_from_a_python_driver_run_perturb(
    tmp_path: Path, cluster: Cluster, people: Path, environments: Environments
) -> None:
    out = run_job(
        tmp_path,
        cluster,
        people,
        conf={"spark.archives": f"{environments.archive}#env"},
        env={"PYSPARK_PYTHON": "./env/bin/python"},
    )
    assert out["python_exec"] == "./env/bin/python"
    _released(out, 1)


def test_the_cli_runs_under_spark_submit_through_the_readme_launcher(
    tmp_path: Path, cluster: Cluster, people: Path
) -> None:
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    veil.Ledger(ledger).grant("alice", "people", veil.Budget(epsilon=GRANT))
    launcher = tmp_path / "veil_submit.py"
    launcher.write_text("import sys\nfrom veil.cli import main\nsys.exit(main())\n")
    options = [f"--conf={key}={value}" for key, value in SMALL.items()]
    command = [
        *spark_submit(cluster),
        *options,
        f"--conf=spark.pyspark.driver.python={sys.executable}",
        str(launcher),
        *("query", "SELECT COUNT(*) AS n FROM people", "--engine", "spark"),
        *("--table", f"people={people}", "--epsilon", "0.5", "--format", "json"),
        *("--ledger", ledger, "--analyst", "alice", "--dataset", "people"),
    ]
    stdout = run_driver(tmp_path, cluster, command, {})
    answer, _ = json.JSONDecoder().raw_decode(stdout[stdout.index('{"columns"') :])
    assert answer["rows"][0][0] == pytest.approx(ROWS, abs=200)
    assert veil.Ledger(ledger).remaining("alice", "people").epsilon == GRANT - QUERY
