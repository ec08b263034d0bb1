"""veil against its peers at equal ε on the issue-17 benchmark: quantiles (issue 17).

The table: the shared benchmark people table (``_data.py``: Zipf-skewed states, an integer
``age`` 0–100, a continuous lognormal ``income`` in cents, clipped to [0, 1e6]), one row per
user (``--users``, default 1 M), so row-level privacy is user-level privacy for every library.

Printed, per library installed (each peer is optional and skipped with a note when missing;
none is a veil dependency):

- the income median overall, the income median per state and the age median per state at
  ε = 1 (the per-state releases use parallel composition: ε = 1 per state, one row per user),
  as the mean relative error |released − true| / true over ``--reps`` runs (and states), the
  truth being the exact median of the clamped values;
- the time of one per-state income release against a plain bounded median in the same
  process: DuckDB ``median(least(greatest(income, 0), 1e6))`` grouped by state (the ratio is
  what the issue's target, ≤ 1.3×, is about).

Peers: diffprivlib (``tools.median``: its continuous exponential mechanism, sampling inside
the intervals between sorted values), OpenDP (``make_private_quantile`` over 1,025 evenly
spaced candidates, as in the issue's measurement). PipelineDP, Tumult and SmartNoise are
reported as skipped unless installed (their quantile APIs need Spark/Beam-style setups this
script does not build).

    python benchmarks/bench_peers.py [--users 1_000_000] [--reps 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable
from typing import Any

import duckdb
import numpy as np
import pandas as pd

import veil
from _data import INCOME_BOUNDS, ROWS_PER_USER_MEAN, STATES, ensure_table

EPSILON = 1.0
AGE_BOUNDS = (0, 100)


def people(users: int) -> pd.DataFrame:
    """One row per user of the shared benchmark table (about ``users`` users)."""
    path = ensure_table(int(users * ROWS_PER_USER_MEAN))
    con = duckdb.connect()
    try:
        sql = (
            f"SELECT DISTINCT ON (user_id) user_id, state, age, income FROM '{path}' "
            f"ORDER BY user_id LIMIT {users}"
        )
        return con.execute(sql).df()
    finally:
        con.close()


def truth(frame: pd.DataFrame) -> dict[str, Any]:
    lo, hi = INCOME_BOUNDS
    income = frame["income"].clip(lo, hi)
    age = frame["age"].clip(*AGE_BOUNDS)
    return {
        "income": float(income.median()),
        "income_by_state": income.groupby(frame["state"]).median().to_dict(),
        "age_by_state": age.groupby(frame["state"]).median().to_dict(),
    }


def relative(got: dict[str, float], want: dict[str, float]) -> float:
    return statistics.fmean(abs(got[k] - want[k]) / abs(want[k]) for k in want)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


# ── the libraries ────────────────────────────────────────────────────────────────────────────


class Veil:
    name = "veil"

    def __init__(self, frame: pd.DataFrame, buckets: int | None = None) -> None:
        self.con = duckdb.connect()
        self.con.register("people_frame", frame)
        self.con.execute("CREATE TABLE people AS SELECT * FROM people_frame")
        self.options: dict[str, Any] = {} if buckets is None else {"quantile_buckets": buckets}
        if buckets is not None:
            self.name = f"veil (grid {buckets})"
        self.frame = frame
        self.run = 0

    def _session(self) -> veil.Session:
        self.run += 1  # a fresh registration each run: fresh noise, never the cache
        return veil.Session.local(
            tables={"people": self.frame}, connection=self.con, dataset=f"people{self.run}",
            budget=veil.Budget(epsilon=100), self_grant=True,
            bounds={"income": INCOME_BOUNDS, "age": AGE_BOUNDS},
            domains={"state": list(STATES)}, **self.options,
        )  # fmt: skip

    def median(self) -> float:
        r = self._session().sql("SELECT MEDIAN(income) AS m FROM people", epsilon=EPSILON)
        return float(r.rows[0][0])

    def by_state(self, column: str) -> dict[str, float]:
        sql = f"SELECT state, MEDIAN({column}) AS m FROM people GROUP BY state"
        r = self._session().sql(sql, epsilon=EPSILON)
        return {row[0]: float(row[1]) for row in r.rows}


class Diffprivlib:
    name = "diffprivlib"

    def __init__(self, frame: pd.DataFrame) -> None:
        from diffprivlib import tools  # type: ignore[import-untyped]

        self.tools = tools
        self.frame = frame
        self.groups = {s: g for s, g in frame.groupby("state")}

    def _median(self, values: np.ndarray, bounds: tuple[float, float]) -> float:
        return float(self.tools.median(values, epsilon=EPSILON, bounds=bounds))

    def median(self) -> float:
        return self._median(self.frame["income"].to_numpy(), INCOME_BOUNDS)

    def by_state(self, column: str) -> dict[str, float]:
        bounds = INCOME_BOUNDS if column == "income" else AGE_BOUNDS
        return {
            s: self._median(g[column].to_numpy(dtype=float), bounds) for s, g in self.groups.items()
        }


class OpenDP:
    name = "opendp (1,025 candidates)"

    def __init__(self, frame: pd.DataFrame) -> None:
        import opendp.prelude as dp  # type: ignore[import-untyped]

        dp.enable_features("contrib")
        self.dp = dp
        self.frame = frame
        self.groups = {s: g for s, g in frame.groupby("state")}
        self.made: dict[str, Any] = {}

    def _mechanism(self, column: str) -> Any:
        if column not in self.made:
            dp = self.dp
            lo, hi = INCOME_BOUNDS if column == "income" else AGE_BOUNDS
            candidates = np.linspace(lo, hi, 1025).tolist()
            space = dp.vector_domain(dp.atom_domain(T=float, nan=False)), dp.symmetric_distance()
            self.made[column] = dp.binary_search_chain(
                lambda s: dp.m.make_private_quantile(
                    *space, dp.max_divergence(), candidates, 0.5, s
                ),
                d_in=1,
                d_out=EPSILON,
            )
        return self.made[column]

    def median(self) -> float:
        return float(self._mechanism("income")(self.frame["income"].tolist()))

    def by_state(self, column: str) -> dict[str, float]:
        m = self._mechanism(column)
        return {s: float(m(g[column].astype(float).tolist())) for s, g in self.groups.items()}


# ── the run ──────────────────────────────────────────────────────────────────────────────────


def plain_median(frame: pd.DataFrame) -> float:
    """Seconds of a plain bounded median per state in DuckDB (no privacy)."""
    con = duckdb.connect()
    con.register("people_frame", frame)
    con.execute("CREATE TABLE people AS SELECT * FROM people_frame")
    lo, hi = INCOME_BOUNDS
    sql = f"SELECT state, median(least(greatest(income, {lo}), {hi})) FROM people GROUP BY state"
    con.execute(sql).fetchall()  # warm
    times = [timed(lambda: con.execute(sql).fetchall())[1] for _ in range(5)]
    con.close()
    return statistics.median(times)


def quantiles(frame: pd.DataFrame, reps: int) -> None:
    want = truth(frame)
    base = plain_median(frame)
    print(f"\n## quantiles at ε = {EPSILON:g} ({len(frame):,} users, {reps} runs)")
    print(f"plain DuckDB median per state: {base * 1000:.1f} ms (the time baseline)")
    print(f"{'library':<28}{'income':>11}{'income/state':>14}{'age/state':>11}"
          f"{'time/state':>12}{'× plain':>9}")  # fmt: skip
    libraries: list[Callable[[pd.DataFrame], Any]] = [
        Veil,
        lambda f: Veil(f, buckets=1024),
    ]
    notes: list[str] = []
    for module, make in (("diffprivlib", Diffprivlib), ("opendp", OpenDP)):
        if importlib.util.find_spec(module) is None:
            notes.append(f"{make.name}: skipped (not installed: pip install {module})")
        else:
            libraries.append(make)
    for module, label in (("pipeline_dp", "PipelineDP"), ("tmlt.analytics", "Tumult"),
                          ("snsql", "SmartNoise")):  # fmt: skip
        present = importlib.util.find_spec(module.split(".")[0]) is not None
        notes.append(
            f"{label}: skipped ({'no quantile adapter here' if present else 'not installed'})"
        )
    for make in libraries:
        lib = make(frame)
        overall, per_state, ages, times = [], [], [], []
        for _ in range(reps):
            overall.append(abs(lib.median() - want["income"]) / want["income"])
            got, seconds = timed(lambda lib=lib: lib.by_state("income"))
            per_state.append(relative(got, want["income_by_state"]))
            times.append(seconds)
            ages.append(relative(lib.by_state("age"), want["age_by_state"]))
        t = statistics.median(times)
        print(f"{lib.name:<28}{statistics.fmean(overall):>11.2e}{statistics.fmean(per_state):>14.2e}"
              f"{statistics.fmean(ages):>11.2e}{t * 1000:>10.0f}ms{t / base:>9.2f}")  # fmt: skip
    for note in notes:
        print(f"  {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=lambda s: int(s.replace("_", "")), default=1_000_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    frame = people(args.users)
    quantiles(frame, args.reps)


if __name__ == "__main__":
    main()
