"""Stratified noise against one global bound: the relative error of each income layer's SUM
and AVG at equal ε, and the time of a release, in one process.

The data: the California PUMS sample (``../shared/data/pums_california_1000.csv``, 1 000
people, ``income`` in [0, 420 500]; row-level privacy, bounds [0, 500 000] declared), or with
``--synthetic`` a public lognormal income table of ``--rows`` rows (median 40 000, σ = 1,
clipped to the bounds; seeded numpy, public data). The first seed's five income layers:

    SELECT BIN(income, 0, 10000, 25000, 50000, 100000, 500000) AS layer,
           SUM(income) AS s, AVG(income) AS a FROM t GROUP BY layer

*stratified*: as written — each layer's sum is calibrated to the layer's own width
(``veil.compile.strata``); *global* (the baseline): the same layers and rows, binned on a copy
``income2`` of the column, so every layer's sum is calibrated to the one global bound. Both at
ε = ``--epsilon`` (1), the same contribution bounding, the same split rule. Each variant is run
once through a session (``veil.audit.query_runs.run``: the engine's exact statistics), then
``--releases`` fresh releases are drawn from them with the operating system's CSPRNG. Printed
per layer: the true value, the median relative error |released − true|/true of each variant
and the ratio global/stratified (> 1: stratified is better); then the median time of one
release of each variant and their ratio.

    python benchmarks/bench_strata.py [--releases 400] [--epsilon 1] [--synthetic --rows N]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

EDGES = (0, 10_000, 25_000, 50_000, 100_000, 500_000)
BOUNDS = {"income": (0, 500_000), "income2": (0, 500_000)}
STRATIFIED = (
    "SELECT BIN(income, {e}) AS layer, SUM(income) AS s, AVG(income) AS a FROM t GROUP BY layer"
)
GLOBAL = (
    "SELECT BIN(income2, {e}) AS layer, SUM(income) AS s, AVG(income) AS a FROM t GROUP BY layer"
)
PUMS = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "pums_california_1000.csv"


def table(synthetic: bool, rows: int) -> pa.Table:
    if synthetic:
        rng = np.random.default_rng(2026)  # public synthetic data, not a DP noise source
        x = np.clip(np.round(rng.lognormal(np.log(40_000), 1.0, rows)), 0, 500_000)
    else:
        x = np.asarray(pacsv.read_csv(PUMS).column("income").to_pylist(), dtype=float)
    return pa.table({"income": x, "income2": x})


def truth(t: pa.Table) -> list[tuple[float, float]]:
    x = np.asarray(t.column("income").to_pylist(), dtype=float)
    out = []
    for i, (lo, hi) in enumerate(itertools.pairwise(EDGES)):
        last = i == len(EDGES) - 2
        inside = x[(x >= lo) & ((x <= hi) if last else (x < hi))]
        out.append((float(inside.sum()), float(inside.mean()) if len(inside) else float("nan")))
    return out


def variant(t: pa.Table, sql: str, epsilon: float, releases: int) -> tuple[Any, list[float]]:
    from veil.audit.query_runs import releases as draw
    from veil.audit.query_runs import run

    found = run(
        {"t": t},
        sql.format(e=", ".join(str(e) for e in EDGES)),
        salt=1,
        epsilon=Fraction(epsilon),
        delta=None,
        options={"bounds": BOUNDS},
    )
    if found.agg is None:
        raise SystemExit(f"the query was not released: {found.outcome.describe()}")
    values, times = [], []
    it = draw(found, releases)
    for _ in range(releases):
        start = time.perf_counter()
        r = next(it)
        times.append(time.perf_counter() - start)
        values.append(r.values)
    return values, times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--releases", type=int, default=400)
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--synthetic", action="store_true")
    p.add_argument("--rows", type=int, default=100_000)
    a = p.parse_args()
    t = table(a.synthetic, a.rows)
    exact = truth(t)
    strat, t_strat = variant(t, STRATIFIED, a.epsilon, a.releases)
    glob, t_glob = variant(t, GLOBAL, a.epsilon, a.releases)
    source = f"synthetic lognormal, {a.rows} rows" if a.synthetic else "PUMS California, 1000"
    print(f"{source}; ε = {a.epsilon:g}; {a.releases} releases per variant; bounds [0, 500000]")
    print(
        f"{'layer':>18} {'n':>6} {'true SUM':>12}  {'SUM rel. err (strat / global)':>30} "
        f"{'ratio':>7}  {'AVG rel. err (strat / global)':>30} {'ratio':>7}"
    )
    x = np.asarray(t.column("income").to_pylist(), dtype=float)
    for i, (s_true, a_true) in enumerate(exact):
        lo, hi = EDGES[i], EDGES[i + 1]
        n = int(((x >= lo) & ((x <= hi) if i == len(exact) - 1 else (x < hi))).sum())
        row = [f"[{lo}, {hi}{']' if i == len(exact) - 1 else ')'}", f"{n}", f"{s_true:.4g}"]
        for col, true in ((1, s_true), (2, a_true)):
            e_s = statistics.median(abs(v[i][col] - true) / true for v in strat)
            e_g = statistics.median(abs(v[i][col] - true) / true for v in glob)
            row += [f"{e_s:>14.3%} / {e_g:<13.3%}", f"{e_g / e_s:>6.1f}x"]
        print(
            f"{row[0]:>18} {row[1]:>6} {row[2]:>12}  {row[3]:>30} {row[4]:>7}  {row[5]:>30} "
            f"{row[6]:>7}"
        )
    ms, mg = statistics.median(t_strat) * 1e3, statistics.median(t_glob) * 1e3
    print(
        f"one release (noise + estimates): stratified {ms:.3f} ms, global {mg:.3f} ms "
        f"(ratio {ms / mg:.2f})"
    )


if __name__ == "__main__":
    main()
