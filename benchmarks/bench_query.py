"""Time and peak memory of one bounded DP query on the 10 M-row table, veil vs plain DuckDB.

The query: per state, COUNT(*), SUM(income) and AVG(income) with income in [0, 1e6], each user
bounded to one row. Contenders, each run in a fresh subprocess (so its peak RSS, read from
``getrusage(RUSAGE_SELF).ru_maxrss``, is its own) and interleaved round by round so the load of
a shared machine hits them alike:

- ``duckdb``   plain DuckDB doing the same bounded aggregation (the baseline): one row per user
               chosen by ``ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY hash(salt, …))``,
               clamped income, float SUM/AVG.
- ``veil``     ``veil.Session.local(...).sql(...)`` end to end: a fresh session with a fresh
               in-memory ledger per run (so no answer comes from the cache), on one DuckDB
               connection per process, as the baseline's.
- ``veil-sql`` the SQL veil's ``explain`` says it sends, run on plain DuckDB — the engine's share
               of veil's time (veil − veil-sql = planning, noise and Python overhead).
- ``opendp``   OpenDP's Polars API on the same Parquet file, when ``opendp`` and ``polars`` are
               importable here or by ``--opendp-python`` (they are not veil dependencies).

Each process makes one cold run (lazy imports, first scan; reported apart) and ``--reps`` warm
timed runs; ratios compare the medians of the warm runs.

Then a same-process pass: ``duckdb``, ``veil`` and ``veil-sql`` are set up side by side in this
process, warmed once each, and timed alternately on the same Parquet file for
``--same-rounds`` rounds (the order rotating each round); ratios compare the medians. Both
passes' veil / DuckDB ratios are printed at the end.

    python benchmarks/bench_query.py [--rows 10_000_000] [--rounds 5] [--reps 2]
        [--same-rounds 7] [--only duckdb veil veil-sql opendp] [--opendp-python /path/to/python]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _data

QUERY = (
    "SELECT state, COUNT(*) AS n, SUM(income) AS total, AVG(income) AS mean "
    "FROM people GROUP BY state"
)
EPSILON = 1.0
DELTA = 1e-6  # for OpenDP's unit-of-privacy API; veil's keys are the public state list (pure ε)
LO, HI = _data.INCOME_BOUNDS
OPTIONS: dict[str, Any] = {
    "epsilon": EPSILON,
    "bounds": {"income": (LO, HI)},
    "domains": {"state": list(_data.STATES)},
}


def baseline_sql(path: Path, salt: int) -> str:
    """Plain DuckDB: the same bounded aggregation veil performs, without the noise."""
    return f"""
SELECT state, COUNT(*) AS n, SUM(income) AS total, AVG(income) AS mean
FROM (
  SELECT state, least(greatest(income, {LO}), {HI}) AS income,
         ROW_NUMBER() OVER (PARTITION BY user_id
                            ORDER BY hash({salt}, user_id, state, income)) AS rn
  FROM read_parquet('{path}')
)
WHERE rn <= 1
GROUP BY state
"""


def _rss_kib() -> int:
    """Current resident set size (KiB), from /proc on Linux; 0 elsewhere."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# ── contenders (each returns a no-argument function running the query once) ────────────────


def _setup_duckdb(path: Path) -> Callable[[], object]:
    import duckdb

    con = duckdb.connect()

    def run() -> object:
        salt = int.from_bytes(os.urandom(8), "little") >> 1  # a fresh secret salt per query
        return con.sql(baseline_sql(path, salt)).to_arrow_table()

    return run


def veil_session(path: Path, connection: Any = None) -> Any:
    """A fresh session over the benchmark table with an in-memory ledger (no cached answers),
    on ``connection`` if given (as the baseline, the warm runs reuse one DuckDB connection)."""
    import veil

    return veil.Session.local(
        tables={"people": str(path)},
        connection=connection,
        privacy_unit="user_id",
        budget=veil.Budget(epsilon=EPSILON),
        analyst="bench",
        ledger="sqlite://",
    )


def _setup_veil(path: Path) -> Callable[[], object]:
    import logging

    import duckdb

    logging.getLogger("veil").setLevel(logging.ERROR)  # each run spends its grant: no alerts
    con = duckdb.connect()

    def run() -> object:
        session = veil_session(path, con)
        return session.sql(QUERY, **OPTIONS)

    return run


def _setup_veil_sql(path: Path) -> Callable[[], object]:
    import duckdb

    from veil.compile import dialect, lower, to_sql
    from veil.plan.tree import aggregate_of

    # explain shows the SQL with a salt placeholder; lower it with a fresh salt per run, as veil
    agg = aggregate_of(veil_session(path).explain(QUERY, **OPTIONS).plan)
    con = duckdb.connect()
    con.execute(f"CREATE VIEW people AS SELECT * FROM read_parquet('{path}')")

    def run() -> object:
        salt = int.from_bytes(os.urandom(8), "little") >> 1
        sql = to_sql(lower(agg, dialect("duckdb"), salt=salt).main, "duckdb")
        return con.sql(sql).to_arrow_table()

    return run


def _setup_opendp(path: Path) -> Callable[[], object]:
    """OpenDP's Polars API (tested with opendp 0.16 / polars 1.36): one row per user by
    ``truncate_per_group(1)``, public state keys, ε = 1 (and δ for its unit-of-privacy
    accounting). OpenDP needs the data in memory (it refuses a Parquet scan), so each timed run
    reads the file, as the other contenders scan it."""
    import opendp.prelude as dp
    import polars as pl

    dp.enable_features("contrib")
    margin = dp.polars.Margin(
        by=["state"], invariant="keys", max_length=10**9, max_groups=len(_data.STATES)
    )

    def run() -> object:
        context = dp.Context.compositor(
            data=pl.read_parquet(path).lazy(),
            privacy_unit=dp.unit_of(contributions=1, identifier=pl.col("user_id")),
            privacy_loss=dp.loss_of(epsilon=EPSILON, delta=DELTA),
            split_evenly_over=1,
            margins=[margin],
        )
        query = (
            context.query()
            .truncate_per_group(1)
            .group_by("state")
            .agg(dp.len(), pl.col("income").fill_null(0.0).dp.sum((LO, HI)))
        )
        return query.release().collect()

    return run


CONTENDERS: dict[str, Callable[[Path], Callable[[], object]]] = {
    "duckdb": _setup_duckdb,
    "veil": _setup_veil,
    "veil-sql": _setup_veil_sql,
    "opendp": _setup_opendp,
}


def worker(name: str, path: Path, reps: int) -> dict[str, Any]:
    """In this fresh process: one cold run (lazy imports, first scan), then ``reps`` timed warm
    runs; the peak RSS covers them all."""
    run = CONTENDERS[name](path)
    base = _rss_kib()
    start = time.perf_counter()
    run()
    cold = time.perf_counter() - start
    times, cpus = [], []
    for _ in range(reps):
        gc.collect()
        cpu = _cpu_seconds()
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
        cpus.append(_cpu_seconds() - cpu)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {
        "name": name,
        "cold": cold,
        "times": times,
        "cpus": cpus,
        "peak_kib": peak,
        "base_kib": base,
    }


def same_process(names: list[str], path: Path, rounds: int) -> dict[str, dict[str, float]]:
    """Time ``names`` alternately in this one process on the same file: each set up and warmed
    once, then ``rounds`` rounds in which each runs once, the order rotating so that no
    contender always goes first. Returns the medians (and best) of wall and CPU time."""
    runs = {name: CONTENDERS[name](path) for name in names}
    for run in runs.values():
        run()  # warm: lazy imports, first scan, DuckDB's caches
    walls: dict[str, list[float]] = {name: [] for name in runs}
    cpus: dict[str, list[float]] = {name: [] for name in runs}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            gc.collect()
            cpu = _cpu_seconds()
            start = time.perf_counter()
            runs[name]()
            walls[name].append(time.perf_counter() - start)
            cpus[name].append(_cpu_seconds() - cpu)
    return {
        name: {
            "median_s": statistics.median(walls[name]),
            "min_s": min(walls[name]),
            "cpu_s": statistics.median(cpus[name]),
        }
        for name in runs
    }


def _cpu_seconds() -> float:
    """User + system CPU time of this process, all threads (steadier than wall time on a
    loaded machine: it does not count the time other processes hold the cores)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def available(name: str) -> str | None:
    """None if the contender can run here, else the reason it cannot."""
    probes = {"opendp": "import opendp, polars", "veil": "import veil; veil.Session.local"}
    probe = probes.get(name) or (probes["veil"] if name == "veil-sql" else "")
    if not probe:
        return None
    proc = subprocess.run(
        [python_for(name), "-c", probe], capture_output=True, text=True, check=False
    )
    if proc.returncode == 0:
        return None
    return (proc.stderr.strip().splitlines() or ["?"])[-1]


OTHER_PYTHON: dict[str, str] = {}  # contender → interpreter (``--opendp-python``)


def python_for(name: str) -> str:
    return OTHER_PYTHON.get(name, sys.executable)


def spawn(name: str, path: Path, reps: int) -> dict[str, Any]:
    cmd = [python_for(name), __file__, "--worker", name, "--path", str(path), "--reps", str(reps)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{proc.stderr}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=lambda s: int(s.replace("_", "")), default=10_000_000)
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per contender")
    parser.add_argument("--reps", type=int, default=2, help="warm timed runs per process")
    parser.add_argument(
        "--same-rounds", type=int, default=7, help="rounds of the same-process pass (0: skip)"
    )
    parser.add_argument("--only", nargs="*", default=list(CONTENDERS), choices=list(CONTENDERS))
    parser.add_argument(
        "--opendp-python",
        help="a Python interpreter with opendp and polars installed (default: this one)",
    )
    parser.add_argument("--worker", choices=list(CONTENDERS), help=argparse.SUPPRESS)
    parser.add_argument("--path", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker:
        print(json.dumps(worker(args.worker, args.path, args.reps)))
        return

    if args.opendp_python:
        OTHER_PYTHON["opendp"] = args.opendp_python
    path = _data.ensure_table(args.rows)
    print(f"table: {args.rows:,} rows, {path.stat().st_size / 2**20:.0f} MiB Parquet ({path})")
    print(f"query: {QUERY}")
    print(f"  ε={EPSILON}, public state list, income in [{LO:g}, {HI:g}], 1 row per user")
    names = []
    for name in args.only:
        reason = available(name)
        if reason:
            print(f"  skipping {name}: {reason}")
        else:
            names.append(name)
    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for _ in range(args.rounds):
        for name in names:
            results[name].append(spawn(name, path, args.reps))

    summary = {}
    for name, runs in results.items():
        times = [t for r in runs for t in r["times"]]
        summary[name] = {
            "median_s": statistics.median(times),
            "cpu_s": statistics.median(c for r in runs for c in r["cpus"]),
            "cold_s": statistics.median(r["cold"] for r in runs),
            "min_s": min(times),
            "peak_mib": max(r["peak_kib"] for r in runs) / 1024,
            "work_mib": max(r["peak_kib"] - r["base_kib"] for r in runs) / 1024,
        }
    base = summary.get("duckdb")
    print(
        f"\n{'contender':<10} {'median s':>9} {'min s':>7} {'cold s':>7} {'CPU s':>6} "
        f"{'Mrows/s':>8} {'peak RSS MiB':>13} {'above setup':>12} {'time ×':>7} {'CPU ×':>6} "
        f"{'mem ×':>6}"
    )
    for name, s in summary.items():
        ratio_t = s["median_s"] / base["median_s"] if base else float("nan")
        ratio_c = s["cpu_s"] / base["cpu_s"] if base else float("nan")
        ratio_m = s["peak_mib"] / base["peak_mib"] if base else float("nan")
        print(
            f"{name:<10} {s['median_s']:9.2f} {s['min_s']:7.2f} {s['cold_s']:7.2f} "
            f"{s['cpu_s']:6.2f} {args.rows / s['median_s'] / 1e6:8.1f} {s['peak_mib']:13.0f} "
            f"{s['work_mib']:12.0f} {ratio_t:7.2f} {ratio_c:6.2f} {ratio_m:6.2f}"
        )
    print(
        "\nTimes are warm runs (the first run of each process, 'cold', is shown apart); 'CPU s' "
        "is the median user+system CPU time of a warm run (all threads), steadier than wall "
        "time when other processes share the cores. "
        "'peak RSS' is the process's ru_maxrss (interpreter and imports included); 'above "
        "setup' subtracts the RSS after imports and setup. Ratios are against 'duckdb' "
        "(plain DuckDB with the same bounding), measured in this run."
    )

    together = [n for n in ("duckdb", "veil", "veil-sql") if n in names]
    if args.same_rounds <= 0 or "duckdb" not in together or len(together) < 2:
        return
    same = same_process(together, path, args.same_rounds)
    print(
        f"\nSame process: {', '.join(together)} timed alternately in this process on the same "
        f"file, warm, {args.same_rounds} rounds (medians)"
    )
    print(f"{'contender':<10} {'median s':>9} {'min s':>7} {'CPU s':>6} {'time ×':>7} {'CPU ×':>6}")
    ref = same["duckdb"]
    for name, s in same.items():
        print(
            f"{name:<10} {s['median_s']:9.2f} {s['min_s']:7.2f} {s['cpu_s']:6.2f} "
            f"{s['median_s'] / ref['median_s']:7.2f} {s['cpu_s'] / ref['cpu_s']:6.2f}"
        )
    if "veil" in same and base:
        apart, near = summary["veil"], same["veil"]
        print(
            "\nveil / plain DuckDB doing the same bounded aggregation:\n"
            f"  separate processes: {apart['median_s'] / base['median_s']:.2f}× time, "
            f"{apart['cpu_s'] / base['cpu_s']:.2f}× CPU, "
            f"{apart['peak_mib'] / base['peak_mib']:.2f}× peak memory\n"
            f"  same process:       {near['median_s'] / ref['median_s']:.2f}× time, "
            f"{near['cpu_s'] / ref['cpu_s']:.2f}× CPU"
        )


if __name__ == "__main__":
    main()
