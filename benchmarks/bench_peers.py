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

A peer missing is skipped with a note; a peer whose call fails prints the failure (an API
change) and the rest goes on.

    python benchmarks/bench_peers.py [--users 1_000_000] [--reps 5] [--events-users 50_000]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from collections.abc import Callable
from fractions import Fraction
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
          f"{'time/state':>12}{'× plain':>9}{'CPU ×':>8}")  # fmt: skip
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
        print(f"{lib.name:<28}{statistics.fmean(overall):>11.2e}{statistics.fmean(per_state):>14.2e}"
              f"{statistics.fmean(ages):>11.2e}{t * 1000:>10.0f}ms{t / m(bases):>9.2f}"
              f"{m(cpus) / m(base_cpus):>8.2f}")  # fmt: skip
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
    for name, fn in runs:
        errors = _attempt(name, lambda fn=fn: [abs(fn(i) - want) / want for i in range(reps)])
        if errors is not None:
            print(f"{name:<28}{statistics.fmean(errors):>16.2e}")
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
            print(f"{name:<28}{statistics.fmean(released):>15,.0f}"
                  f"{statistics.median(errors) if errors else float('nan'):>13.2%}"
                  f"{statistics.median(times):>8.1f}s")  # fmt: skip
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
    for name, fn in runs:
        errors: list[float] = []
        for i in range(reps):
            got = _attempt(name, lambda fn=fn, i=i: fn(i))
            if got is None:
                break
            errors += [abs(got.get(k, 0.0) / v - 1) for k, v in truth.items()]
        if errors:
            print(f"{name:<36}{statistics.median(errors):>12.2%}")
    for note in notes:
        print(f"  {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=lambda s: int(s.replace("_", "")), default=1_000_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--events-users", type=lambda s: int(s.replace("_", "")), default=50_000)
    parser.add_argument(
        "--only", choices=("quantiles", "variance", "unknown-keys", "many-rows"), default=None
    )
    args = parser.parse_args()
    frame = people(args.users)
    if args.only in (None, "quantiles"):
        quantiles(frame, args.reps)
    if args.only in (None, "variance"):
        variance(frame, args.reps)
    if args.only in (None, "unknown-keys"):
        unknown_keys(frame, args.reps)
    if args.only in (None, "many-rows"):
        many_rows(args.events_users, args.reps)


if __name__ == "__main__":
    main()
