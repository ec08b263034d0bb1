"""How long the ``veil`` command takes to start and to answer a tiny query, wall and CPU.

Each command runs in a fresh process, ``--runs`` times in rotating order; the medians of its
wall time and of its CPU time (user + system, from the child's own resource usage) are
printed beside the baseline timed in the same run: ``python -c pass`` (the interpreter's own
start). Before timing, veil's modules are compiled to bytecode (``compileall``) and every
command runs once untimed, so no run pays for compiling what a warm install has compiled.

The query runs twice over: as installed, and with pandas hidden (an import hook makes
``import pandas`` fail, as on a machine without it). pyarrow imports pandas on its first
conversion of a Python or numpy value when pandas is there; veil's query path avoids those
conversions, so the two should cost the same — the ratio between them is printed, and
whether the query loaded pandas. Targets (issue 9): ``veil --help`` under 0.3 s, a query on
a 3-row CSV under 0.8 s (wall).

    python benchmarks/bench_cli.py [--runs 9]
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _results

HIDE_PANDAS = (
    "import sys\n"
    "class _NoPandas:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'pandas' or name.startswith('pandas.'):\n"
    "            raise ModuleNotFoundError(name)\n"
    "sys.meta_path.insert(0, _NoPandas())\n"
)
RUN_CLI = (
    "import sys\n"
    "sys.argv = ['veil', *sys.argv[1:]]\n"
    "import veil.cli\n"
    "try:\n"
    "    veil.cli.main()\n"
    "finally:\n"
    "    sys.stderr.write(f'pandas loaded: {\"pandas\" in sys.modules}\\n')\n"
)


def _veil() -> list[str]:
    exe = Path(sys.executable).with_name("veil")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "veil.cli"]


def _time(cmd: list[str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of ``cmd`` in a fresh process, and its standard error."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.decode()[-500:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu, done.stderr.decode()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--results", type=Path, default=None, help="JSON file of the figures")
    args = parser.parse_args()
    run = _results.Run("cli")
    import veil

    package = Path(veil.__file__).parent
    compileall.compile_dir(str(package), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        csv = os.path.join(tmp, "three.csv")
        Path(csv).write_text("uid,x\n1,3\n2,5\n3,7\n")
        query = [
            "query", "SELECT COUNT(*) AS n, SUM(x) AS s FROM t", "--table", f"t={csv}",
            "--column", "x:DOUBLE", "--bounds", "x=0:10", "--epsilon", "1",
            "--privacy-unit", "uid", "--format", "json",
        ]  # fmt: skip
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "veil --help": [*_veil(), "--help"],
            "veil query (3-row CSV)": [sys.executable, "-c", RUN_CLI, *query],
            "… with pandas hidden": [sys.executable, "-c", HIDE_PANDAS + RUN_CLI, *query],
        }
        loaded = "pandas loaded: True" in _time(commands["veil query (3-row CSV)"])[2]
        for cmd in commands.values():
            _time(cmd)  # untimed: the OS's file cache, any bytecode still missing
        walls: dict[str, list[float]] = {name: [] for name in commands}
        cpus: dict[str, list[float]] = {name: [] for name in commands}
        names = list(commands)
        for r in range(args.runs):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                wall, cpu, _ = _time(commands[name])
                walls[name].append(wall)
                cpus[name].append(cpu)
    base_wall = statistics.median(walls["python -c pass"])
    base_cpu = statistics.median(cpus["python -c pass"])
    targets = {"veil --help": 0.3, "veil query (3-row CSV)": 0.8}
    print(
        f"median of {args.runs} runs each, fresh processes, rotating order, bytecode compiled "
        f"first; load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{'command':26s} {'wall s':>7s} {'× python':>9s} {'CPU s':>7s} {'× python':>9s}  target")
    for name in names:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        target = targets.get(name)
        mark = "" if target is None else f"< {target:.1f} s" + (" ok" if wall < target else " MISS")
        print(
            f"{name:26s} {wall:7.3f} {wall / base_wall:9.1f} {cpu:7.3f} {cpu / base_cpu:9.1f}  "
            f"{mark}"
        )
    shown = statistics.median(cpus["veil query (3-row CSV)"])
    hidden = statistics.median(cpus["… with pandas hidden"])
    print(
        f"the query loads pandas: {'yes' if loaded else 'no'}; its CPU with pandas installed / "
        f"hidden: {shown / hidden:.2f}×"
    )
    run.add("runs", args.runs)
    run.add("bytecode_compiled_first", True)
    run.add("query_loads_pandas", loaded)
    run.add(
        "median_seconds",
        {
            name: {"wall": round(statistics.median(walls[name]), 4),
                   "cpu": round(statistics.median(cpus[name]), 4)}
            for name in names
        },
    )  # fmt: skip
    run.add("query_cpu_pandas_installed_over_hidden", round(shown / hidden, 3))
    run.write(args.results)


if __name__ == "__main__":
    main()
