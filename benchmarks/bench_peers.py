"""veil against its peers at equal ε on the issue-17 benchmark: quantiles, variance, unknown
keys and many rows per user, in one run (issue 17).

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
  process: DuckDB ``median(least(greatest(income, 0), 1e6))`` grouped by state over the same
  data, run just before each timed release (interleaved, so both meet the same machine and
  caches): the median wall times' ratio is what the issue's target, ≤ 1.3×, is about, the CPU
  ratio (the process's CPU seconds, DuckDB's threads included) beside it; each veil run opens
  a fresh session and dataset (fresh noise, never the cache), so its time includes that
  set-up.

Peers: diffprivlib (``tools.median``: its continuous exponential mechanism, sampling inside
the intervals between sorted values), OpenDP (``make_private_quantile`` over 1,025 evenly
spaced candidates, as in the issue's measurement). PipelineDP, Tumult and SmartNoise are
reported as skipped unless installed (their quantile APIs need Spark/Beam-style setups this
script does not build).

Then, in the same run:

- **variance**: the income variance overall at ε = 1 (bounds [0, 1e6]), mean relative error
  over ``--reps`` runs: veil ``VARIANCE(income)``, diffprivlib ``tools.var``, OpenDP
  ``make_variance`` + Laplace (its sized domain: n public, neighbours by substitution);
- **unknown keys**: ``COUNT(*) GROUP BY state, age`` (50 × 101 keys, many rare) with no public
  key list at ε = 1, δ = 1e-6, one row per user: the keys released and the median relative
  count error over them — veil's partition selection, PipelineDP's private partition selection
  (``DPEngine.aggregate`` without public partitions), OpenDP ``make_count_by`` +
  ``then_laplace_threshold``;
- **many rows per user**: ``bench_contributions.events`` (1–20 rows per user over 1–12 of 12
  states), ``COUNT(*) GROUP BY state`` over the 12 public states at ε = 1: the median relative
  error per state (bias and noise) at a total-rows bound of 5 (veil ``max_rows=5``, PipelineDP
  ``max_contributions=5``), and veil's ``limits="auto"`` / ``"auto_groups"``.

And first, **Q1** — the accuracy table of the README (issues 4 and 40): ``COUNT(*)``,
``SUM(income)`` and ``AVG(income)`` per state over the 50 public states at ε = 1, income in
[0, 1e6], one row per user of the same table (``--q1-users``, default 182,000: the 1 M-row
table's users), the median relative error over states × ``--reps`` runs against the exact
values, for veil and every peer installed (PipelineDP ``DPEngine.aggregate`` with COUNT, SUM
and MEAN; OpenDP used naively, a count and a sum at ε/2 each and their ratio; diffprivlib's
``count_nonzero``, ``sum`` and ``mean`` at ε/3 each — its mean takes n as public; SmartNoise
SQL with every state released (``censor_dims: false``, δ = 1e-6 as it requires); Tumult
Analytics, three queries at ε/3 on Spark), with veil's ratio on each row (veil's error over
the peer's: below 1, veil is more accurate). Then **where veil's optimum is**: the same
errors computed from the noise laws alone (no data read beyond the exact per-state counts
and sums) as the share of ε the noisy count takes and the sum's centre vary, veil's own
split marked — a budget split or estimator beating veil's would show there.

Each peer is optional. A peer missing is skipped with a note naming it; a peer whose call
fails prints the failure (an API change) and the rest goes on. Peers pin conflicting
versions (Tumult wants numpy < 2, diffprivlib ≥ 2): run the script in one environment per
group and read the rows together. The figures of the last run go to
``benchmarks/results/peers.json`` (``--results``).

    python benchmarks/bench_peers.py [--users 1_000_000] [--reps 5] [--events-users 50_000]
        [--q1-users 182_000] [--only q1|quantiles|variance|unknown-keys|many-rows]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pandas as pd

import veil
from _data import INCOME_BOUNDS, ROWS_PER_USER_MEAN, STATES, ensure_table

EPSILON = 1.0
AGE_BOUNDS = (0, 100)
RESULTS: dict[str, Any] = {}  # what --results writes: each section's figures


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


def ratio(veil: float | None, peer: float) -> str:
    """veil's error over the peer's (below 1: veil is more accurate), as printed on each row."""
    if veil is None:
        return ""
    return f"{veil / peer:.2f}" if peer > 0 else "—"


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
        # (the DuckDB table the baseline reads too, not the DataFrame it was made from)
        return veil.Session.local(
            tables={"people": "people"}, connection=self.con, dataset=f"people{self.run}",
            budget=veil.Budget(epsilon=100), self_grant=True,
            bounds={"income": INCOME_BOUNDS, "age": AGE_BOUNDS},
            domains={"state": list(STATES)}, **self.options,
        )  # fmt: skip

    def _epsilon(self) -> Fraction | float:
        return EPSILON

    def median(self) -> float:
        sql = "SELECT MEDIAN(income) AS m FROM people"
        r = self._session().sql(sql, epsilon=self._epsilon())
        return float(r.rows[0][0])

    def by_state(self, column: str) -> dict[str, float]:
        sql = f"SELECT state, MEDIAN({column}) AS m FROM people GROUP BY state"
        r = self._session().sql(sql, epsilon=self._epsilon())
        return {row[0]: float(row[1]) for row in r.rows}


class VeilWarm(Veil):
    """veil in one session opened once (a service's steady state): each run is still a new
    measurement, fresh noise and charged, never the cache — its ε is 1 + k/2^40 for the k-th
    run (the same accuracy to 12 digits), which makes it a new question."""

    name = "veil (one session)"

    def __init__(self, frame: pd.DataFrame) -> None:
        super().__init__(frame)
        self.session = super()._session()  # opened (ledger included) before any timed run

    def _session(self) -> veil.Session:
        return self.session

    def _epsilon(self) -> Fraction:
        self.run += 1
        return Fraction(EPSILON) + Fraction(self.run, 2**40)


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


class PlainMedian:
    """A plain bounded median per state in DuckDB (no privacy): the time baseline, run once
    before each timed release (interleaved, so both see the same machine)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.con = duckdb.connect()
        self.con.register("people_frame", frame)
        self.con.execute("CREATE TABLE people AS SELECT * FROM people_frame")
        lo, hi = INCOME_BOUNDS
        self.sql = (
            f"SELECT state, median(least(greatest(income, {lo}), {hi})) FROM people GROUP BY state"
        )
        self.con.execute(self.sql).fetchall()  # warm

    def once(self) -> tuple[float, float]:
        """Seconds of one run: wall and CPU (the process's, DuckDB's threads included)."""
        return cpu_timed(lambda: self.con.execute(self.sql).fetchall())[1:]


def cpu_timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    cpu, start = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start, time.process_time() - cpu


def quantiles(frame: pd.DataFrame, reps: int) -> None:
    want = truth(frame)
    plain = PlainMedian(frame)
    print(f"\n## quantiles at ε = {EPSILON:g} ({len(frame):,} users, {reps} runs)")
    print(
        "time/state: one per-state income release, median over the runs; × plain: against a "
        "plain DuckDB bounded median per state run just before each (wall; CPU beside)"
    )
    print(f"{'library':<28}{'income':>11}{'income/state':>14}{'age/state':>11}"
          f"{'time/state':>12}{'× plain':>9}{'CPU ×':>8}   veil × (three errors)")  # fmt: skip
    first: list[float] | None = None  # veil's errors: each peer's row prints veil's over its
    libraries: list[Callable[[pd.DataFrame], Any]] = [
        Veil,
        VeilWarm,
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
    every: list[tuple[float, float]] = []  # the baseline's runs, wall and CPU
    for make in libraries:
        lib = _attempt(getattr(make, "name", "a peer"), lambda make=make: make(frame))
        if lib is None:
            continue
        overall, per_state, ages, times, cpus, bases, base_cpus = [], [], [], [], [], [], []
        for _ in range(reps):
            overall.append(abs(lib.median() - want["income"]) / want["income"])
            base, base_cpu = plain.once()
            every.append((base, base_cpu))
            got, seconds, cpu = cpu_timed(lambda lib=lib: lib.by_state("income"))
            per_state.append(relative(got, want["income_by_state"]))
            times.append(seconds)
            cpus.append(cpu)
            bases.append(base)
            base_cpus.append(base_cpu)
            ages.append(relative(lib.by_state("age"), want["age_by_state"]))
        t, m = statistics.median(times), statistics.median
        errs = [statistics.fmean(overall), statistics.fmean(per_state), statistics.fmean(ages)]
        mine = lib.name.startswith("veil")
        shown = "" if mine or first is None else ", ".join(
            ratio(v, e) for v, e in zip(first, errs, strict=True)
        )  # fmt: skip
        if first is None and mine:
            first = errs
        RESULTS.setdefault("quantiles", {})[lib.name] = errs
        print(f"{lib.name:<28}{errs[0]:>11.2e}{errs[1]:>14.2e}"
              f"{errs[2]:>11.2e}{t * 1000:>10.0f}ms{t / m(bases):>9.2f}"
              f"{m(cpus) / m(base_cpus):>8.2f}   {shown}")  # fmt: skip
    if every:
        wall, cpu = (statistics.median(v) for v in zip(*every, strict=True))
        print(f"  plain DuckDB median per state: {wall * 1000:.1f} ms, CPU {cpu * 1000:.1f} ms "
              "(the baseline, over every library's runs)")  # fmt: skip
    for note in notes:
        print(f"  {note}")


# ── variance, unknown keys, many rows per user ───────────────────────────────────────────────


_BROKEN: dict[str, str] = {}  # a peer that is installed but does not import: its error


def _installed(module: str) -> bool:
    """True when ``module`` is installed and imports; one that fails to import (a dependency
    of the wrong version, say) counts as missing, its error printed once."""
    if importlib.util.find_spec(module.split(".")[0]) is None:
        return False
    if module not in _BROKEN:
        try:
            importlib.import_module(module)
            _BROKEN[module] = ""
        except Exception as error:  # a peer failing must not stop the comparison
            _BROKEN[module] = f"{type(error).__name__}: {str(error)[:120]}"
            print(f"  {module}: installed but does not import ({_BROKEN[module]})")
    return not _BROKEN[module]


def _attempt(label: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, or None with the failure printed (a peer's API changed, say)."""
    try:
        return fn()
    except Exception as error:  # a peer failing must not stop the comparison
        print(f"  {label}: failed ({type(error).__name__}: {str(error)[:120]})")
        return None


def _fresh(tables: dict[str, Any], run: int, **options: Any) -> veil.Session:
    return veil.Session.local(
        tables, dataset=f"peers{run}", budget=veil.Budget(epsilon=100, delta=1e-3),
        self_grant=True,
        **options,
    )  # fmt: skip


def variance(frame: pd.DataFrame, reps: int) -> None:
    lo, hi = INCOME_BOUNDS
    income = frame["income"].clip(lo, hi).to_numpy(dtype=float)
    want = float(np.var(income))
    print(f"\n## variance of income at ε = {EPSILON:g} ({len(frame):,} users, {reps} runs)")
    print(f"{'library':<28}{'relative error':>16}")
    runs: list[tuple[str, Callable[[int], float]]] = []

    def veil_var(run: int) -> float:
        s = _fresh({"people": frame}, run, bounds={"income": INCOME_BOUNDS})
        r = s.sql("SELECT VARIANCE(income) AS v FROM people", epsilon=EPSILON)
        return float(r.rows[0][0])

    runs.append(("veil", veil_var))
    notes: list[str] = []
    if _installed("diffprivlib"):
        from diffprivlib import tools  # type: ignore[import-untyped]

        runs.append(("diffprivlib", lambda _run: float(
            tools.var(income, epsilon=EPSILON, bounds=INCOME_BOUNDS))))  # fmt: skip
    else:
        notes.append("diffprivlib: skipped (not installed)")
    if _installed("opendp"):
        import opendp.prelude as dp  # type: ignore[import-untyped]

        dp.enable_features("contrib")

        def made() -> Any:
            space = (
                dp.vector_domain(dp.atom_domain(bounds=(lo, hi)), size=len(income)),
                dp.symmetric_distance(),
            )
            return dp.binary_search_chain(
                lambda s: dp.t.make_variance(*space) >> dp.m.then_laplace(s),
                d_in=2,
                d_out=EPSILON,
            )

        chain = _attempt("opendp", made)
        if chain is not None:
            runs.append(("opendp", lambda _run: float(chain(income.tolist()))))
    else:
        notes.append("opendp: skipped (not installed)")
    notes += [f"{p}: skipped (no variance adapter here)" for p in ("PipelineDP", "Tumult",
                                                                    "SmartNoise")]  # fmt: skip
    mine: float | None = None
    for name, fn in runs:
        errors = _attempt(name, lambda fn=fn: [abs(fn(i) - want) / want for i in range(reps)])
        if errors is not None:
            e = statistics.fmean(errors)
            RESULTS.setdefault("variance", {})[name] = e
            shown = "" if name == "veil" else f"   veil × {ratio(mine, e)}"
            mine = e if name == "veil" else mine
            print(f"{name:<28}{e:>16.2e}{shown}")
    for note in notes:
        print(f"  {note}")


def unknown_keys(frame: pd.DataFrame, reps: int) -> None:
    delta = 1e-6
    keys = (frame["state"] + "-" + frame["age"].astype(str)).to_numpy()
    want = pd.Series(keys).value_counts().to_dict()
    print(f"\n## unknown keys: COUNT(*) GROUP BY state, age at ε = {EPSILON:g}, δ = {delta:g} "
          f"({len(frame):,} users, {len(want):,} keys present, {reps} runs)")  # fmt: skip
    print(f"{'library':<28}{'keys released':>15}{'count error':>13}{'time':>9}")
    runs: list[tuple[str, Callable[[int], dict[str, float]]]] = []
    table = pd.DataFrame({"user_id": frame["user_id"], "k": keys})

    def veil_keys(run: int) -> dict[str, float]:
        s = _fresh({"people": table}, run, privacy_unit="user_id")
        r = s.sql("SELECT k, COUNT(*) AS n FROM people GROUP BY k", epsilon=EPSILON, delta=delta)
        return {row[0]: float(row[1]) for row in r.rows}

    runs.append(("veil", veil_keys))
    notes: list[str] = []
    if _installed("pipeline_dp"):
        import pipeline_dp  # type: ignore[import-untyped]

        rows = list(zip(table["user_id"].tolist(), keys.tolist(), strict=True))

        def pdp(_run: int) -> dict[str, float]:
            accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON,
                                                           total_delta=delta)  # fmt: skip
            engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
            params = pipeline_dp.AggregateParams(
                noise_kind=pipeline_dp.NoiseKind.LAPLACE, metrics=[pipeline_dp.Metrics.COUNT],
                max_partitions_contributed=1, max_contributions_per_partition=1,
            )  # fmt: skip
            extract = pipeline_dp.DataExtractors(
                privacy_id_extractor=lambda r: r[0], partition_extractor=lambda r: r[1],
                value_extractor=lambda r: 0,
            )  # fmt: skip
            result = engine.aggregate(rows, params, extract)
            accountant.compute_budgets()
            return {k: float(m.count) for k, m in result}

        runs.append(("pipeline_dp", pdp))
    else:
        notes.append("PipelineDP: skipped (not installed)")
    if _installed("opendp"):
        import opendp.prelude as dp

        dp.enable_features("contrib")

        def odp_chain() -> Any:
            count_by = dp.t.make_count_by(
                dp.vector_domain(dp.atom_domain(T=str)), dp.symmetric_distance()
            )
            scale = 1.0 / EPSILON  # one row per user: one key moves by one

            def meets(t: int) -> bool:
                return bool((count_by >> dp.m.then_laplace_threshold(scale, t)).map(1)[1] <= delta)

            threshold = dp.binary_search(meets, bounds=(1, 1_000_000), T=int)
            return count_by >> dp.m.then_laplace_threshold(scale, threshold)

        chain = _attempt("opendp", odp_chain)
        if chain is not None:
            listed = keys.tolist()
            runs.append(("opendp (laplace threshold)", lambda _run: {
                str(k): float(v) for k, v in chain(listed).items()}))  # fmt: skip
    else:
        notes.append("opendp: skipped (not installed)")
    notes += [f"{p}: skipped (not installed)" for m, p in (("tmlt.analytics", "Tumult"),
              ("snsql", "SmartNoise")) if not _installed(m)]  # fmt: skip
    keys_veil: float | None = None
    for name, fn in runs:
        released, errors, times = [], [], []
        for i in range(reps):
            got, seconds = timed(lambda fn=fn, i=i, name=name: _attempt(name, lambda: fn(i)))
            if got is None:
                break
            released.append(len(got))
            errors += [abs(v - want[k]) / want[k] for k, v in got.items() if k in want]
            times.append(seconds)
        if released:
            e = statistics.median(errors) if errors else float("nan")
            RESULTS.setdefault("unknown_keys", {})[name] = [statistics.fmean(released), e]
            shown = "" if name == "veil" else f"   veil × {ratio(keys_veil, e)}"
            keys_veil = e if name == "veil" else keys_veil
            print(f"{name:<28}{statistics.fmean(released):>15,.0f}{e:>13.2%}"
                  f"{statistics.median(times):>8.1f}s{shown}")  # fmt: skip
    for note in notes:
        print(f"  {note}")


def many_rows(users: int, reps: int) -> None:
    from bench_contributions import STATES as EVENT_STATES
    from bench_contributions import events, true_counts

    table = events(users, 17)
    truth = true_counts(table)
    frame = table.to_pandas()
    domain = {"state": list(EVENT_STATES)}
    print(
        f"\n## many rows per user: COUNT(*) GROUP BY state at ε = {EPSILON:g} ({users:,} users,"
        f" {table.num_rows:,} rows, 1–20 rows each over 1–12 of 12 states, {reps} runs)"
    )
    print(f"{'library (bound)':<36}{'error/state':>12}")
    runs: list[tuple[str, Callable[[int], dict[str, float]]]] = []

    def veil_with(**options: Any) -> Callable[[int], dict[str, float]]:
        def run(i: int) -> dict[str, float]:
            s = _fresh({"events": frame}, 1000 + i, privacy_unit="user_id")
            r = s.sql("SELECT state, COUNT(*) AS n FROM events GROUP BY state",
                      epsilon=EPSILON, domains=domain, **options)  # fmt: skip
            return {row[0]: float(row[1]) for row in r.rows}

        return run

    # max_rows = 5 alone (the session's max_groups and max_rows_per_group raised not to bind)
    runs.append(("veil (max_rows=5)", veil_with(max_rows=5, max_groups=5, max_rows_per_group=5)))
    runs.append(("veil (limits='auto')", veil_with(limits="auto")))
    runs.append(("veil (limits='auto_groups')", veil_with(limits="auto_groups")))
    notes: list[str] = []
    if _installed("pipeline_dp"):
        import pipeline_dp

        rows = list(zip(frame["user_id"].tolist(), frame["state"].tolist(), strict=True))

        def pdp(_run: int) -> dict[str, float]:
            accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=0)
            engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
            params = pipeline_dp.AggregateParams(
                noise_kind=pipeline_dp.NoiseKind.LAPLACE, metrics=[pipeline_dp.Metrics.COUNT],
                max_contributions=5,
            )  # fmt: skip
            extract = pipeline_dp.DataExtractors(
                privacy_id_extractor=lambda r: r[0], partition_extractor=lambda r: r[1],
                value_extractor=lambda r: 0,
            )  # fmt: skip
            result = engine.aggregate(rows, params, extract, public_partitions=list(EVENT_STATES))
            accountant.compute_budgets()
            return {k: float(m.count) for k, m in result}

        runs.append(("pipeline_dp (max_contributions=5)", pdp))
    else:
        notes.append("PipelineDP: skipped (not installed)")
    notes += [f"{p}: skipped (no total-rows adapter here)" for p in ("opendp", "diffprivlib",
              "Tumult", "SmartNoise")]  # fmt: skip
    rows_veil: float | None = None
    for name, fn in runs:
        errors: list[float] = []
        for i in range(reps):
            got = _attempt(name, lambda fn=fn, i=i: fn(i))
            if got is None:
                break
            errors += [abs(got.get(k, 0.0) / v - 1) for k, v in truth.items()]
        if errors:
            e = statistics.median(errors)
            RESULTS.setdefault("many_rows", {})[name] = e
            shown = (
                f"   veil (max_rows=5) × {ratio(rows_veil, e)}" if name.startswith("pipe") else ""
            )
            rows_veil = e if name == "veil (max_rows=5)" else rows_veil
            print(f"{name:<36}{e:>12.2%}{shown}")
    for note in notes:
        print(f"  {note}")


# ── Q1: COUNT, SUM, AVG per state ───────────────────────────────────────────────────────────

Q1 = (
    "SELECT state, COUNT(*) AS n, SUM(income) AS total, AVG(income) AS mean FROM people "
    "GROUP BY state"
)
PerState = dict[str, tuple[float, float, float]]  # state → (count, sum, mean)


def _q1_truth(frame: pd.DataFrame) -> PerState:
    income = frame["income"].clip(*INCOME_BOUNDS)
    grouped = income.groupby(frame["state"])
    return {
        k: (float(n), float(t), float(t) / n)
        for k, n, t in zip(grouped.size().index, grouped.size(), grouped.sum(), strict=True)
    }


def _q1_errors(got: PerState, want: PerState) -> tuple[list[float], list[float], list[float]]:
    out: tuple[list[float], list[float], list[float]] = ([], [], [])
    for k, truth in want.items():
        released = got.get(k, (0.0, 0.0, 0.0))
        for i in range(3):
            out[i].append(abs(released[i] - truth[i]) / abs(truth[i]))
    return out


def _q1_peers(frame: pd.DataFrame) -> tuple[list[tuple[str, Callable[[int], PerState]]], list[str]]:
    """Each installed peer's Q1 at ε = 1 (row privacy: one row per user), and the notes."""
    runs: list[tuple[str, Callable[[int], PerState]]] = []
    notes: list[str] = []
    groups = {s: g["income"].to_numpy(dtype=float) for s, g in frame.groupby("state")}
    if _installed("pipeline_dp"):
        import pipeline_dp

        rows = list(zip(frame["user_id"].tolist(), frame["state"].tolist(),
                        frame["income"].astype(float).tolist(), strict=True))  # fmt: skip

        def pdp(_run: int) -> PerState:
            accountant = pipeline_dp.NaiveBudgetAccountant(total_epsilon=EPSILON, total_delta=0)
            engine = pipeline_dp.DPEngine(accountant, pipeline_dp.LocalBackend())
            m = pipeline_dp.Metrics
            params = pipeline_dp.AggregateParams(
                noise_kind=pipeline_dp.NoiseKind.LAPLACE, metrics=[m.COUNT, m.SUM, m.MEAN],
                max_partitions_contributed=1, max_contributions_per_partition=1,
                min_value=INCOME_BOUNDS[0], max_value=INCOME_BOUNDS[1],
            )  # fmt: skip
            extract = pipeline_dp.DataExtractors(
                privacy_id_extractor=lambda r: r[0], partition_extractor=lambda r: r[1],
                value_extractor=lambda r: r[2],
            )  # fmt: skip
            result = engine.aggregate(rows, params, extract, public_partitions=list(STATES))
            accountant.compute_budgets()
            return {k: (float(v.count), float(v.sum), float(v.mean)) for k, v in result}

        runs.append(("pipeline_dp", pdp))
    else:
        notes.append("PipelineDP: skipped (not installed: pip install pipeline-dp)")
    if _installed("opendp"):
        import opendp.prelude as dp

        dp.enable_features("contrib")

        def odp_chains() -> tuple[Any, Any]:
            rows = dp.vector_domain(dp.atom_domain(T=float)), dp.symmetric_distance()
            count = dp.binary_search_chain(
                lambda s: dp.t.make_count(*rows) >> dp.m.then_laplace(s), d_in=1,
                d_out=EPSILON / 2,
            )  # fmt: skip
            bounded = (
                dp.vector_domain(dp.atom_domain(bounds=INCOME_BOUNDS)),
                dp.symmetric_distance(),
            )
            total = dp.binary_search_chain(
                lambda s: dp.t.make_sum(*bounded) >> dp.m.then_laplace(s), d_in=1,
                d_out=EPSILON / 2,
            )  # fmt: skip
            return count, total

        chains = _attempt("opendp", odp_chains)
        if chains is not None:
            lists = {k: np.clip(v, *INCOME_BOUNDS).tolist() for k, v in groups.items()}

            def odp(_run: int) -> PerState:
                out = {}
                for k, v in lists.items():
                    n, t = float(chains[0](v)), float(chains[1](v))
                    out[k] = (n, t, t / max(n, 1.0))
                return out

            runs.append(("opendp (naive: n, sum at ε/2)", odp))
    else:
        notes.append("OpenDP: skipped (not installed: pip install opendp)")
    if _installed("diffprivlib"):
        from diffprivlib import tools

        third = EPSILON / 3

        def dpl(_run: int) -> PerState:
            return {
                k: (
                    float(tools.count_nonzero(np.ones(len(v)), epsilon=third)),
                    float(tools.sum(v, epsilon=third, bounds=INCOME_BOUNDS)),
                    float(tools.mean(v, epsilon=third, bounds=INCOME_BOUNDS)),
                )
                for k, v in groups.items()
            }

        runs.append(("diffprivlib (ε/3 each; n public)", dpl))
        notes.append(
            "diffprivlib treats n as public (bounded DP): its count is truncated at the true "
            "size, its mean divides by it; not the same guarantee as the others'"
        )
    else:
        notes.append("diffprivlib: skipped (not installed: pip install diffprivlib)")
    if _installed("snsql"):
        import snsql

        meta = {"bench": {"public": {"people": {
            "row_privacy": True, "censor_dims": False, "state": {"type": "string"},
            "income": {"type": "float", "lower": INCOME_BOUNDS[0], "upper": INCOME_BOUNDS[1],
                       "nullable": False},
            "user_id": {"type": "int"},
        }}}}  # fmt: skip
        people = frame[["user_id", "state", "income"]]

        sql = Q1.replace("FROM people", "FROM public.people")
        # SmartNoise spends its ε on each column: the whole query costs 3ε (get_privacy_cost),
        # so each column gets ε/3 for the same total as the others
        probe = snsql.from_df(people, privacy=snsql.Privacy(epsilon=1.0, delta=1e-6), metadata=meta)
        per_column = EPSILON / float(probe.get_privacy_cost(sql)[0])

        def snq(_run: int) -> PerState:
            privacy = snsql.Privacy(epsilon=per_column, delta=1e-6)
            reader = snsql.from_df(people, privacy=privacy, metadata=meta)
            out = reader.execute(sql)
            return {r[0]: (float(r[1]), float(r[2]), float(r[3])) for r in out[1:]}

        runs.append((f"smartnoise-sql (ε/{EPSILON / per_column:g} a column)", snq))
    else:
        notes.append("SmartNoise: skipped (not installed: pip install smartnoise-sql)")
    if _installed("tmlt.analytics"):
        tumult = _attempt("tumult", lambda: _tumult_q1(frame))
        if tumult is not None:
            runs.append(("tumult (ε/3 each, Spark)", tumult))
    else:
        notes.append("Tumult: skipped (not installed: pip install tmlt.analytics)")
    return runs, notes


def _tumult_q1(frame: pd.DataFrame) -> Callable[[int], PerState]:
    """Tumult Analytics on a local Spark session: three queries per run at ε/3 each."""
    from pyspark.sql import SparkSession
    from tmlt.analytics import AddOneRow, KeySet, PureDPBudget, QueryBuilder
    from tmlt.analytics import Session as TumultSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # Spark's workers: this Python
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    sdf = spark.createDataFrame(frame[["user_id", "state", "income"]])
    keys = KeySet.from_dict({"state": list(STATES)})
    lo, hi = INCOME_BOUNDS

    def run(_run: int) -> PerState:
        session = TumultSession.from_dataframe(
            privacy_budget=PureDPBudget(EPSILON), source_id="people", dataframe=sdf,
            protected_change=AddOneRow(),
        )  # fmt: skip
        third = PureDPBudget(EPSILON / 3)
        grouped = lambda: QueryBuilder("people").groupby(keys)  # noqa: E731
        n = session.evaluate(grouped().count(), third).toPandas()
        t = session.evaluate(grouped().sum("income", lo, hi), third).toPandas()
        m = session.evaluate(grouped().average("income", lo, hi), third).toPandas()
        out = {}
        for (k, c), (_, s_), (_, a) in zip(n.values, t.values, m.values, strict=True):
            out[str(k)] = (float(c), float(s_), float(a))
        return out

    return run


def _veil_q1(frame: pd.DataFrame) -> tuple[Callable[[int], PerState], list[Any]]:
    usage: list[Any] = []

    def run(i: int) -> PerState:
        s = _fresh({"people": frame}, 5000 + i, bounds={"income": INCOME_BOUNDS})
        r = s.sql(Q1, epsilon=EPSILON, domains={"state": list(STATES)})
        usage[:] = r.usage
        return {row[0]: (float(row[1]), float(row[2]), float(row[3])) for row in r.rows}

    return run, usage


def q1(frame: pd.DataFrame, reps: int) -> None:
    want = _q1_truth(frame)
    print(f"\n## Q1: COUNT, SUM, AVG of income per state at ε = {EPSILON:g} ({len(frame):,} "
          f"users, one row each, 50 public states, income in [0, 1e6], {reps} runs)")  # fmt: skip
    print("median relative error over states × runs; veil ×: veil's error over the peer's")
    print(f"{'library':<36}{'count':>10}{'sum':>10}{'mean':>10}   {'veil × (count, sum, mean)':<26}"
          f"{'time':>7}")  # fmt: skip
    veil_run, usage = _veil_q1(frame)
    peers, notes = _q1_peers(frame)
    table: dict[str, list[float]] = {}
    for name, fn in [("veil", veil_run), *peers]:
        errors: tuple[list[float], list[float], list[float]] = ([], [], [])
        times = []
        for i in range(reps):
            got, seconds = timed(lambda fn=fn, i=i, name=name: _attempt(name, lambda: fn(i)))
            if got is None:
                break
            times.append(seconds)
            for acc, new in zip(errors, _q1_errors(got, want), strict=True):
                acc += new
        if not times:
            continue
        medians = [statistics.median(e) for e in errors]
        table[name] = medians
        ratio = ""
        if name != "veil":
            pairs = zip(table["veil"], medians, strict=True)
            ratio = ", ".join(f"{v / p:.2f}" if p > 0 else "—" for v, p in pairs)
        print(f"{name:<36}{medians[0]:>10.2e}{medians[1]:>10.2e}{medians[2]:>10.2e}   "
              f"{ratio:<26}{statistics.median(times):>6.1f}s")  # fmt: skip
    for note in notes:
        print(f"  {note}")
    RESULTS["q1"] = {"users": len(frame), "reps": reps, "epsilon": EPSILON,
                     "median_relative_error": table}  # fmt: skip
    if usage:
        q1_split(want, usage)


def q1_split(want: PerState, usage: list[Any]) -> None:
    """Where veil's optimum is: the median relative errors of Q1's count, sum and mean
    computed from the noise laws alone (Laplace of the calibrated scales, 400 draws a state)
    as the count's share of ε and the sum's centre vary; veil's split marked ◀."""
    lo, hi = INCOME_BOUNDS
    count_eps = next(float(Fraction(u.loss.epsilon)) for u in usage if u.measurement == "count")
    share = count_eps / EPSILON
    rng = np.random.default_rng(40)
    states = list(want.values())
    n = np.array([s[0] for s in states])[:, None]
    total = np.array([s[1] for s in states])[:, None]
    print(f"\n  where the optimum is (noise laws alone; veil's split: the count takes "
          f"{share:.0%} of ε, the sum centred at the midpoint)")  # fmt: skip
    print(f"  {'centre':<10}{'count share':>12}{'count':>10}{'sum':>10}{'mean':>10}")
    rows: list[dict[str, float]] = []
    shares = sorted({*(round(x, 2) for x in np.arange(0.1, 0.95, 0.1)), round(share, 3)})
    for centre in ((lo + hi) / 2, lo):
        reach = max(hi - centre, centre - lo)
        for f in shares:
            eps_n, eps_s = f * EPSILON, (1 - f) * EPSILON
            z_n = rng.laplace(0, 1 / eps_n, (len(states), 400))
            z_s = rng.laplace(0, reach / eps_s, (len(states), 400))
            err_n = np.abs(z_n) / n
            err_t = np.abs(z_s + centre * z_n) / total
            mean = total / n
            released = centre + (total - centre * n + z_s) / np.maximum(n + z_n, 1)
            err_m = np.abs(np.clip(released, lo, hi) - mean) / mean
            row = {"centre": centre, "count_share": f, "count": float(np.median(err_n)),
                   "sum": float(np.median(err_t)), "mean": float(np.median(err_m))}  # fmt: skip
            rows.append(row)
            mark = " ◀" if centre == (lo + hi) / 2 and f == round(share, 3) else ""
            print(f"  {centre:<10g}{f:>12.2f}{row['count']:>10.2e}{row['sum']:>10.2e}"
                  f"{row['mean']:>10.2e}{mark}")  # fmt: skip
    for column in ("sum", "mean"):
        best = min(rows, key=lambda r: r[column])
        print(f"  best {column}: centre {best['centre']:g}, count share {best['count_share']:.2f}:"
              f" {best[column]:.2e}")  # fmt: skip
    RESULTS["q1_split"] = {"veil_count_share": share, "grid": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=lambda s: int(s.replace("_", "")), default=1_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--events-users", type=lambda s: int(s.replace("_", "")), default=50_000)
    parser.add_argument("--q1-users", type=lambda s: int(s.replace("_", "")), default=182_000)
    parser.add_argument(
        "--only",
        choices=("q1", "quantiles", "variance", "unknown-keys", "many-rows"),
        default=None,
    )
    parser.add_argument(
        "--results", type=Path,
        default=Path(__file__).resolve().parent / "results" / "peers.json",
        help="where the figures of this run go (JSON)",
    )  # fmt: skip
    args = parser.parse_args()
    if args.only in (None, "q1"):
        q1(people(args.q1_users), args.reps)
    if args.only == "q1":
        _write(args.results)
        return
    frame = people(args.users)
    if args.only in (None, "quantiles"):
        quantiles(frame, args.reps)
    if args.only in (None, "variance"):
        variance(frame, args.reps)
    if args.only in (None, "unknown-keys"):
        unknown_keys(frame, args.reps)
    if args.only in (None, "many-rows"):
        many_rows(args.events_users, args.reps)
    _write(args.results)


def _write(path: Path) -> None:
    """The figures of this run, with the peers found and missing, as JSON."""
    found = {m: _installed(m) for m in ("pipeline_dp", "opendp", "diffprivlib", "snsql",
                                         "tmlt.analytics")}  # fmt: skip
    RESULTS["peers_installed"] = found
    RESULTS["when"] = time.strftime("%Y-%m-%d")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(RESULTS, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"\nfigures written to {path.name}")


if __name__ == "__main__":
    main()
