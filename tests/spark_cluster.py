"""A real Spark standalone cluster on loopback, and the Python environments its executors run.

Import as ``spark_cluster`` (tests/ is on the path). :func:`standalone` starts a master and one
worker (1 core, 1 GiB) with the ``bin/spark-class`` that pyspark's pip package ships (its
``sbin/`` has no ``start-master.sh``), bound to 127.0.0.1 on free ports, and stops both — and
the executors and Python workers they started, all in the worker's process group — when the
``with`` block ends, on failure too. The worker's environment has no ``PYTHONPATH`` and no
``PYSPARK_*`` variable, so its executors import only what the Python they run has.

:func:`build_environments` follows the README's recipe ("Running on Apache Spark"): veil's
wheel (``pip wheel --no-deps``), a virtual environment with the wheel and the driver's
pyarrow, packed with ``tar -czf``; and two Pythons without veil for the refusals.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

REPO = Path(__file__).resolve().parents[1]
JOB = Path(__file__).resolve().parent / "spark_cluster_job.py"
# Environment variables that would let an executor import what its own Python lacks, or pick
# its Python for it.
SCRUBBED = ("PYTHONPATH", "PYTHONHOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")
READY_TIMEOUT = 300.0  # a safety net on a loaded machine, not a speed requirement


def spark_home() -> Path:
    """pyspark's own directory, which holds ``bin/spark-class`` and ``jars/``."""
    pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed")
    return Path(pyspark.__file__).resolve().parent


def require_java() -> None:
    home = os.environ.get("JAVA_HOME")
    if not (home and Path(home, "bin", "java").exists()) and not shutil.which("java"):
        pytest.skip("no Java runtime for Spark: run scripts/ensure-java.sh")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without :data:`SCRUBBED`, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env.update(extra)
    return env


@dataclass(frozen=True)
class Cluster:
    master: str  # spark://127.0.0.1:PORT
    ui: str  # the master's web UI, whose /json/ says which workers are alive
    logs: Path

    def state(self) -> dict[str, object]:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=10) as response:
            state: dict[str, object] = json.load(response)
            return state

    def log_tail(self, lines: int = 40) -> str:
        out = []
        for log in sorted(self.logs.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process's group (the daemon, its executors and their Python workers),
    then SIGKILL if it has not ended after a minute."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)


@contextlib.contextmanager
def standalone(work: Path, *, path_first: Path) -> Iterator[Cluster]:
    """A master and one worker (1 core, 1 GiB for executors) on 127.0.0.1, stopped on exit.

    ``path_first`` is put first on the worker's ``PATH``: a bare ``python3`` (what Spark runs
    when ``PYSPARK_PYTHON`` is unset) resolves there."""
    require_java()
    home = spark_home()
    spark_class = str(home / "bin" / "spark-class")
    logs = work / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    env = clean_environment(
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_DAEMON_MEMORY="256m",
        PATH=f"{path_first}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    port, ui_port, worker_port, worker_ui = (free_port() for _ in range(4))
    cluster = Cluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}", logs)
    commands = {
        "master": [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            *("--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)),
        ],
        "worker": [
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            *("--host", "127.0.0.1", "--port", str(worker_port)),
            *("--webui-port", str(worker_ui), "--cores", "1", "--memory", "1g"),
            *("--work-dir", str(work / "worker"), cluster.master),
        ],
    }
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for name, command in commands.items():
            with open(logs / f"{name}.log", "wb") as log:
                processes.append(
                    subprocess.Popen(
                        command,
                        env=env,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,  # its own process group, stopped whole
                    )
                )
            _wait(cluster, processes, name)
        yield cluster
    finally:
        for process in reversed(processes):
            _stop(process)


def _wait(cluster: Cluster, processes: list[subprocess.Popen[bytes]], what: str) -> None:
    """Until the master answers (``what="master"``) or has one worker alive."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in processes):
            pytest.fail(f"the Spark {what} exited early:\n{cluster.log_tail()}")
        with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
            state = cluster.state()
            if what == "master" or state.get("aliveworkers") == 1:
                return
        time.sleep(0.5)
    pytest.fail(f"the Spark {what} did not start in {READY_TIMEOUT:.0f} s:\n{cluster.log_tail()}")


@dataclass(frozen=True)
class Environments:
    bare: Path  # a virtual environment with no package at all (no pyarrow)
    no_veil: Path  # a virtual environment with veil-env's packages (pyarrow…) but not veil
    veil_env: Path  # the recipe's environment, unpacked: veil's wheel and the driver's pyarrow
    archive: Path  # veil-env.tar.gz: veil_env packed for spark.archives / --archives


def _run(command: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def build_environments(root: Path) -> Environments:
    """The executors' Pythons, built from this checkout (see the module's docstring)."""
    python = sys.executable  # `python -m venv` bases a new environment on the base interpreter
    env = clean_environment()
    pip = ["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    pin = f"pyarrow=={pa.__version__}"
    bare = root / "bare"
    _run([python, "-m", "venv", "--without-pip", str(bare)], env)
    # the recipe: the wheel, a virtual environment with it, a tar.gz of that environment
    dist = root / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(REPO)],
        env=env,
    )
    (wheel,) = dist.glob("veil-*.whl")
    veil_env = root / "veil-env"
    _run([python, "-m", "venv", str(veil_env)], env)
    _run([str(veil_env / "bin" / "python"), *pip, str(wheel), pin], env)
    archive = root / "veil-env.tar.gz"
    _run(["tar", "-czf", str(archive), "-C", str(veil_env), "."], env)
    # the same packages without veil: links to veil-env's (installing them again would take
    # minutes on a loaded machine)
    no_veil = root / "no-veil"
    _run([python, "-m", "venv", "--without-pip", str(no_veil)], env)
    (packages,) = (veil_env / "lib").glob("python*/site-packages")
    (target,) = (no_veil / "lib").glob("python*/site-packages")
    for entry in packages.iterdir():
        if entry.name != "veil" and not entry.name.startswith("veil-"):
            (target / entry.name).symlink_to(entry)
    return Environments(bare, no_veil, veil_env, archive)
