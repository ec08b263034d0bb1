"""How long the ``veil`` command takes to start and to answer a tiny query.

Each command runs in a fresh process, ``--runs`` times in rotating order, and the median wall
time is printed beside the baseline timed in the same run: ``python -c pass`` (the
interpreter's own start). Targets (issue 9): ``veil --help`` under 0.3 s, a query on a 3-row
CSV under 0.8 s.

    python benchmarks/bench_cli.py [--runs 9]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _veil() -> list[str]:
    exe = Path(sys.executable).with_name("veil")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "veil.cli"]


def _time(cmd: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {done.stderr.decode()[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        csv = os.path.join(tmp, "three.csv")
        Path(csv).write_text("uid,x\n1,3\n2,5\n3,7\n")
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "veil --help": [*_veil(), "--help"],
            "veil query (3-row CSV)": [
                *_veil(),
                "query",
                "SELECT COUNT(*) AS n, SUM(x) AS s FROM t",
                "--table",
                f"t={csv}",
                "--column",
                "x:DOUBLE",
                "--bounds",
                "x=0:10",
                "--epsilon",
                "1",
                "--privacy-unit",
                "uid",
                "--format",
                "json",
            ],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        names = list(commands)
        for r in range(args.runs):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                times[name].append(_time(commands[name]))
    base = statistics.median(times["python -c pass"])
    targets = {"veil --help": 0.3, "veil query (3-row CSV)": 0.8}
    print(f"median of {args.runs} runs each, fresh processes, rotating order")
    print(f"{'command':28s} {'seconds':>8s} {'× python':>9s} {'target':>8s}")
    for name in names:
        med = statistics.median(times[name])
        target = targets.get(name)
        mark = "" if target is None else f"< {target:.1f} s" + (" ok" if med < target else " MISS")
        print(f"{name:28s} {med:8.3f} {med / base:9.1f} {mark:>8s}")


if __name__ == "__main__":
    main()
