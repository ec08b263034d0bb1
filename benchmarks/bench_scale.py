"""veil at every size against a baseline timed in the same run (issue 15's targets).

Run: ``python benchmarks/bench_scale.py [--repeat 5] [--only scalar|aggregates|small|groups|…]``
(``--only`` may be repeated). Each case is timed alternately with its baseline (so both see the
same load on a shared machine), ``--repeat`` times; the median of the runs is printed with the
ratio veil / baseline and the issue's target beside it.

Sections:

- ``scalar``: one release per call — ``laplace``, ``discrete_laplace``, ``gaussian`` of one
  value at the same ε every call, and the two Laplace ones at a new ε every call (baseline:
  numpy's ``Generator.laplace`` / ``normal`` of one value, the insecure float mechanism),
  ``laplace`` charged to an in-process :class:`ScratchLedger` (the exact charge without a
  database, whose cost is the ledger's own), the exponential mechanism over 10 k integer scores
  (baseline: numpy's ``Generator.choice`` with softmax weights computed per call), and
  ``laplace`` over batches of 1 … 10^6 values, per sample (baseline:
  ``Generator.laplace(size=n)``). Targets: ≤ 50 µs per Laplace / discrete Laplace call, ≤ 5 ms
  per exponential over 10 k candidates, and small batches paying the fixed cost of one call
  once, not per sample: every batch of n costs at most 1.5× (one value's call + n × the
  per-sample cost at 10^4). A batch of one cannot match a million's per-sample cost while a call
  costs tens of µs, so that is the reading measured.
- ``aggregates``: one query on the 1 M-row benchmark table of ``_data.py`` (one row per user
  kept, income in [0, 1e6], age in [0, 100], the 50 states a public key, ε = 1), ten aggregates
  per state (COUNT, SUM, AVG, VARIANCE and STDDEV of income and of age, COUNT(income)) and
  COUNT+SUM+AVG, end to end as a user sees it: a fresh session with an in-memory ledger (no
  cached answer), ``sql()``, then the printout ``str(result)`` (every value with its 95 % error
  bar). Baseline: plain DuckDB running the same bounded aggregation (one row per user by
  ``ROW_NUMBER()`` over a fresh salt, clamped values, float aggregates) into Arrow, as
  ``bench_query.py``'s. The session (its ledger, its catalog) is opened once per case; each
  query runs at a slightly different ε, so no answer comes from the cache and no error bar
  from an earlier query's noise law (the cold case). Target: ≤ 1.3× for ten aggregates. Also
  printed: the printout's share (the error bars), the SQL veil sends run on plain DuckDB (the
  engine's share, as ``bench_query.py``'s ``veil-sql``) and a second printout of one result.
- ``small``: a 10 k-row table (``_data.ensure_table(10_000)``), ``bench_query``'s query
  (COUNT, SUM, AVG per state, one row per user) against plain DuckDB's same bounded
  aggregation on the same connection: a new measurement on a warm session (a new ε each run,
  so never a cached answer; target ≤ 2×), the same query again (a cache hit; target ≤ 2×),
  and a new session then the query (no target: the session's own set-up, reported).
- ``groups``: ``SELECT k, COUNT(*) … GROUP BY k`` end to end through ``Session.sql`` (a fresh
  session with an in-memory ledger per run, so nothing is cached) over a DuckDB table of
  ``--group-rows`` rows (10 M by default), 10 rows per unit: 90 % of the units each in a key of
  its own and 10 % spread over 1 000 keys, so ~0.9 M candidate groups of which ~1 000 pass
  partition selection (ε = 1, δ = 10⁻⁶). Baseline: plain DuckDB's same bounded GROUP BY (one
  group per unit, chosen by a fresh salted hash as veil's bounding does, no noise) on the same
  connection. Then the same query with ``--public-keys`` declared public keys (100 k by
  default; every one of them is released, empty ones included), against plain DuckDB's GROUP
  BY of the rows with those keys. Each is run twice: through a fresh session (and grant) per
  run, then through one warm session at a new ε each run (as ``small`` and ``quantiles`` do;
  never the cache either way), CPU seconds and the load average printed beside. Target: ≤ 1.5×
  plain DuckDB for each.
- ``quantiles``: ``MEDIAN(income)`` per state (50 public keys) on the shared benchmark table
  (``_data.py``; ``--rows``, default 10 M rows, about 1.8 M users), each user bounded to one
  row (veil's defaults), end to end through ``Session.local(...).sql`` with a fresh session
  and dataset per run (its setup included), then on one warm session with a new ε each run
  (as ``small`` measures; never the cache either way); baseline: plain DuckDB on the same
  Parquet file and connection, the same per-user bounding (``ROW_NUMBER() OVER (PARTITION BY
  user_id ORDER BY hash(…)) <= 1``), income clamped to its bounds, then ``median``. Then the
  same with ``COUNT(*)`` and ``SUM(income)`` beside the MEDIAN (baseline: the three in one
  plain statement). Target ≤ 1.3× (issues 15, 17). Printed beside: the CPU seconds of each
  (the process's, every DuckDB thread included) and their ratio, which a shared machine's load
  moves less, and the 1-minute load average. Last, no target: the MEDIAN per (state, age),
  5,050 public groups, on the warm session — where the exponential mechanism's draws, once
  per group, weigh more than the scan.
- ``kinds``: each aggregate kind over many groups (COUNT and SUM, AVG and VARIANCE, MEDIAN,
  MIN and MAX per (state, age) — 5,050 public groups —, MODE(age) per state, and COUNT and
  MEDIAN with unknown keys), on the 1 M-row table through one warm session at a new ε each
  run, against plain DuckDB's same bounded aggregation; no target (where per-group work
  shows).
- ``maxgroups``: the engine time of veil's own statement (lowered with a fresh salt per run,
  as ``aggregates``' engine share) for ``SELECT state, COUNT(*), SUM(income) … GROUP BY
  state`` on the shared benchmark table (``--maxgroups-rows``, 1 M by default; the 50 states
  as public keys, income in [0, 1e6]), run on plain DuckDB at ``max_groups`` = 2, 3, 5 against
  the same statement at ``max_groups`` = 1 (``max_rows_per_group`` 1, and 3 against 1 at 3),
  interleaved (and ``max_rows_per_group`` = 3 against 1 at ``max_groups`` = 1, no target); then
  at ``max_groups`` = 3 with unknown keys (partition selection). Every user
  of that table lives in one state, so there the group bound never binds and costs only its
  ranking; the same cases then run on a view of the table in which each row's state is drawn
  from a hash of (user, income) — a user's 1–10 rows in as many states, nearly one row per
  (user, state), the bound binding for most users. Target: ``max_groups`` = 3 ≤ 2×
  ``max_groups`` = 1 (issue 15). CPU seconds and the load average beside, as ``quantiles``.
  Last, on each table, a floor no exact form reaches under: plain DuckDB keeping one row per
  (user, state) (``arg_min`` by a salted hash, then a count and a sum), the step any form that
  keeps each unit's first row in several groups makes or replaces by per-unit lists — before
  ranking a unit's groups, without veil's clamps — against the ``max_groups`` = 1 statement.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

import _results
import veil.mechanisms as mech
from veil import Budget, Result, Session
from veil.accounting.scratch import ScratchLedger

Job = Callable[[], object]


def interleaved(job: Job, baseline: Job, calls: int, repeat: int) -> tuple[float, float]:
    """Median seconds per call of ``job`` and of ``baseline`` over ``repeat`` alternating runs
    of ``calls`` calls each (after one warm-up call of each)."""
    job()
    baseline()
    mine, base = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            baseline()
        base.append((time.perf_counter() - start) / calls)
        start = time.perf_counter()
        for _ in range(calls):
            job()
        mine.append((time.perf_counter() - start) / calls)
    return statistics.median(mine), statistics.median(base)


def interleaved_cpu(job: Job, baseline: Job, repeat: int) -> tuple[float, float, float, float]:
    """:func:`interleaved` of one call each, with the process's CPU seconds (every thread's,
    DuckDB's included) beside the wall seconds: medians of (wall job, wall baseline, CPU job,
    CPU baseline). On a shared machine the CPU ratio moves less with the load than the wall
    one (another process's work is not counted; its cache misses still are)."""
    job()
    baseline()
    walls: tuple[list[float], list[float]] = ([], [])
    cpus: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeat):
        for i, run in ((1, baseline), (0, job)):
            wall, cpu = time.perf_counter(), time.process_time()
            run()
            walls[i].append(time.perf_counter() - wall)
            cpus[i].append(time.process_time() - cpu)
    medians = [statistics.median(x) for x in (*walls, *cpus)]
    return medians[0], medians[1], medians[2], medians[3]


SCALAR: dict[str, dict[str, float]] = {}  # the scalar section's figures, for its result file


def row(case: str, seconds: float, baseline: float, target: str, unit: str = "µs/call") -> None:
    SCALAR[case] = {"veil_us": round(seconds * 1e6, 3), "numpy_us": round(baseline * 1e6, 4),
                    "ratio": round(seconds / baseline, 2)}  # fmt: skip
    print(
        f"{case:<34} {seconds * 1e6:>10.2f} {unit:<11} numpy {baseline * 1e6:>9.3f}  "
        f"ratio {seconds / baseline:>8.1f}×   target {target}"
    )


def scalar(repeat: int) -> None:
    print("== scalar releases (one call each; median of interleaved runs)")
    rng = np.random.default_rng()  # the insecure baselines, for comparison only

    def laplace() -> object:
        return mech.laplace(3.7, sensitivity=1, epsilon=0.5).value

    def discrete_laplace() -> object:
        return mech.discrete_laplace(3, sensitivity=1, epsilon=0.5).value

    def gaussian() -> object:
        return mech.gaussian(3.7, sensitivity=1, rho=0.5).value

    def np_laplace() -> object:
        return 3.7 + rng.laplace(0.0, 2.0)

    def np_normal() -> object:
        return 3.7 + rng.normal(0.0, 1.0)

    run = _results.Run("scale-scalar")
    secs, base = interleaved(laplace, np_laplace, 2000, repeat)
    row("laplace(x)", secs, base, f"≤ 50 µs/call: {'met' if secs <= 50e-6 else 'MISSED'}")
    secs, base = interleaved(discrete_laplace, np_laplace, 2000, repeat)
    row("discrete_laplace(x)", secs, base, f"≤ 50 µs/call: {'met' if secs <= 50e-6 else 'MISSED'}")
    # a new ε at every call (never one seen before in this process): no cached calibration,
    # no sampler plan made for it yet
    fresh = (Fraction(1, 2) + Fraction(i, 10**7) for i in itertools.count(1))

    def laplace_new() -> object:
        return mech.laplace(3.7, sensitivity=1, epsilon=next(fresh)).value

    def discrete_laplace_new() -> object:
        return mech.discrete_laplace(3, sensitivity=1, epsilon=next(fresh)).value

    secs, base = interleaved(laplace_new, np_laplace, 2000, repeat)
    row("laplace(x), a new ε", secs, base, f"≤ 50 µs/call: {'met' if secs <= 50e-6 else 'MISSED'}")
    secs, base = interleaved(discrete_laplace_new, np_laplace, 2000, repeat)
    row("discrete_laplace(x), a new ε", secs, base,
        f"≤ 50 µs/call: {'met' if secs <= 50e-6 else 'MISSED'}")  # fmt: skip
    scratch = ScratchLedger()
    scratch.grant("bench", "bench", Budget(epsilon=10**9))

    def charged() -> object:
        return mech.laplace(3.7, sensitivity=1, epsilon=0.5, ledger=scratch, analyst="bench",
                            dataset="bench").value  # fmt: skip

    secs, base = interleaved(charged, np_laplace, 2000, repeat)
    row("laplace(x), charged (scratch)", secs, base, "(the charge: reserve + commit)")
    secs, base = interleaved(gaussian, np_normal, 1000, repeat)
    row("gaussian(x, rho)", secs, base, "(none)")

    scores = rng.integers(0, 1000, 10_000)
    listed = scores.tolist()

    def exponential() -> object:
        return mech.exponential(scores, sensitivity=1, epsilon=0.5)

    def exponential_list() -> object:
        return mech.exponential(listed, sensitivity=1, epsilon=0.5)

    def np_choice() -> object:
        w = np.exp(0.25 * (scores - scores.max()))
        return rng.choice(scores.size, p=w / w.sum())

    cases = (("exponential(10k ints, array)", exponential), ("… (list)", exponential_list))
    for name, job in cases:
        secs, base = interleaved(job, np_choice, 20, repeat)
        row(name, secs, base, f"≤ 5 ms/call: {'met' if secs <= 5e-3 else 'MISSED'}")

    print("-- laplace over a batch, per sample")
    per_sample = {}
    for n in (1, 10, 100, 10_000, 1_000_000):
        values = np.full(n, 3.7)

        def batch(v: np.ndarray = values) -> object:
            return mech.laplace(v, sensitivity=1, epsilon=0.5).value

        def np_batch(v: np.ndarray = values) -> object:
            return v + rng.laplace(0.0, 2.0, v.size)

        calls = max(1, min(2000, 200_000 // n))
        secs, base = interleaved(batch, np_batch, calls, repeat if n < 10**6 else min(repeat, 3))
        per_sample[n] = secs / n
        row(f"laplace(batch of {n})", secs / n, base / n, "", unit="µs/sample")
    fixed, marginal = per_sample[1], per_sample[10_000]
    worst = max(per_sample[n] * n / (fixed + n * marginal) for n in per_sample)
    print(
        f"a batch of n costs ≈ fixed {fixed * 1e6:.1f} µs + n × {marginal * 1e6:.3f} µs: worst "
        f"batch {worst:.2f}× that model (target ≤ 1.5×, no per-sample overhead in small "
        f"batches): {'met' if worst <= 1.5 else 'MISSED'}"
    )
    run.add("repeat", repeat)
    run.add("cases", dict(SCALAR))
    run.add("worst_batch_over_model", round(worst, 3))
    run.write()


AGGREGATES = {
    "10 aggregates": (
        ("COUNT(*)", "count(*)"),
        ("SUM(income)", "sum(income)"),
        ("AVG(income)", "avg(income)"),
        ("VARIANCE(income)", "var_samp(income)"),
        ("STDDEV(income)", "stddev_samp(income)"),
        ("SUM(age)", "sum(age)"),
        ("AVG(age)", "avg(age)"),
        ("VARIANCE(age)", "var_samp(age)"),
        ("STDDEV(age)", "stddev_samp(age)"),
        ("COUNT(income)", "count(income)"),
    ),
    "COUNT+SUM+AVG": (
        ("COUNT(*)", "count(*)"),
        ("SUM(income)", "sum(income)"),
        ("AVG(income)", "avg(income)"),
    ),
}


def aggregates(repeat: int) -> None:
    import logging

    import duckdb

    import _data

    print("== aggregates per state, 1 M rows (query + printout vs plain DuckDB; median of runs)")
    logging.getLogger("veil").setLevel(logging.ERROR)  # each run spends its grant: no alerts
    path = _data.ensure_table(1_000_000)
    con, base_con = duckdb.connect(), duckdb.connect()
    bounds = {"income": _data.INCOME_BOUNDS, "age": (0, 100)}
    for case, columns in AGGREGATES.items():
        options: dict[str, object] = {
            "bounds": {c: b for c, b in bounds.items() if any(c in v for v, _ in columns)},
            "domains": {"state": list(_data.STATES)},
        }
        veil_sql = "SELECT state, " + ", ".join(
            f"{v} AS c{i}" for i, (v, _) in enumerate(columns)
        ) + " FROM people GROUP BY state"  # fmt: skip
        plain = ", ".join(f"{d} AS c{i}" for i, (_, d) in enumerate(columns))
        lo, hi = _data.INCOME_BOUNDS
        source = (
            f"SELECT state, least(greatest(income, {lo}), {hi}) AS income, "
            "least(greatest(age, 0), 100) AS age, ROW_NUMBER() OVER (PARTITION BY user_id "
            "ORDER BY hash({salt}, user_id, state, income)) AS rn "
            f"FROM read_parquet('{path}')"
        )

        def baseline(plain: str = plain, source: str = source) -> object:
            salt = int.from_bytes(os.urandom(8), "little") >> 1  # a fresh secret salt per query
            return base_con.sql(
                f"SELECT state, {plain} FROM ({source.format(salt=salt)}) WHERE rn <= 1 "
                "GROUP BY state"
            ).to_arrow_table()

        session = Session.local(
            tables={"people": str(path)}, connection=con, privacy_unit="user_id",
            budget=Budget(epsilon=10**6), analyst="bench", ledger="sqlite://",
        )  # fmt: skip
        query = _Printed(session, veil_sql, options)
        secs, base = interleaved(query, baseline, 1, repeat)
        shown = statistics.median(query.printouts)
        target = f"≤ 1.3×: {'met' if secs <= 1.3 * base else 'MISSED'}" if "10" in case else ""
        print(
            f"{case:<16} veil {secs * 1e3:7.1f} ms (printout {shown * 1e3:5.1f})  duckdb "
            f"{base * 1e3:7.1f} ms  ratio {secs / base:5.2f}×   target {target or '(none)'}"
        )
        engine = _engine_share(session, path, veil_sql, options)
        secs, base = interleaved(engine, baseline, 1, repeat)
        print(
            f"{'':<16} its engine SQL alone {secs * 1e3:7.1f} ms  duckdb {base * 1e3:7.1f} ms  "
            f"ratio {secs / base:5.2f}×   (the engine's share of veil's time)"
        )
        result = query()
        start = time.perf_counter()
        str(result)
        again = time.perf_counter() - start
        print(f"{'':<16} the same result printed again: {again * 1e3:.2f} ms")


def _engine_share(session: Session, path: object, sql: str, options: dict[str, object]) -> Job:
    """The SQL veil sends for ``sql`` (lowered with a fresh salt per run, as veil does), run on
    plain DuckDB: what the engine costs of veil's time, without planning, noise or bars."""
    import duckdb

    from veil.compile import dialect, lower, to_sql
    from veil.plan.tree import aggregate_of

    agg = aggregate_of(session.explain(sql, epsilon=1, **options).plan)  # type: ignore[arg-type]
    con = duckdb.connect()
    con.execute(f"CREATE VIEW people AS SELECT * FROM read_parquet('{path}')")

    def run() -> object:
        salt = int.from_bytes(os.urandom(8), "little") >> 1
        tree = lower(agg, dialect("duckdb"), salt=salt).main
        return con.sql(to_sql(tree, "duckdb")).to_arrow_table()

    return run


class _Printed:
    """One veil query and its printout, each call at a fresh ε (1 + k/4096): a noise law no
    earlier call had, so neither the ledger's cache nor an error-bar cache answers it."""

    def __init__(self, session: Session, sql: str, options: dict[str, object]) -> None:
        self.session, self.sql, self.options = session, sql, options
        self.calls = 0
        self.printouts: list[float] = []

    def __call__(self) -> Result:
        self.calls += 1
        eps = 1 + Fraction(self.calls, 4096)
        result = self.session.sql(self.sql, epsilon=eps, **self.options)  # type: ignore[arg-type]
        start = time.perf_counter()
        str(result)
        self.printouts.append(time.perf_counter() - start)
        return result


def small(repeat: int) -> None:
    """A 10 k-row table: the fixed costs of one query, against plain DuckDB's same bounded
    aggregation (``bench_query``'s baseline, a fresh salt per run) on the same connection."""
    import logging
    import os

    import duckdb

    import _data
    import bench_query
    import veil

    print("== a 10 k-row table, one query (median of interleaved runs)")
    logging.getLogger("veil").setLevel(logging.ERROR)
    path = _data.ensure_table(10_000)
    con = duckdb.connect()

    def plain() -> object:
        salt = int.from_bytes(os.urandom(8), "little") >> 1
        return con.sql(bench_query.baseline_sql(path, salt)).to_arrow_table()

    session = veil.Session.local(
        tables={"people": str(path)},
        connection=con,
        privacy_unit="user_id",
        budget=veil.Budget(epsilon=10**9),
        analyst="bench",
        ledger="sqlite://",
    )
    options = {k: v for k, v in bench_query.OPTIONS.items() if k != "epsilon"}
    fresh = itertools.count(1)

    def new_measurement() -> object:  # a new ε each run: never an answer from the cache
        return session.sql(bench_query.QUERY, epsilon=f"1/{next(fresh)}", **options)

    def cache_hit() -> object:
        return session.sql(bench_query.QUERY, epsilon="1/2", **options)

    def new_session() -> object:
        return bench_query.veil_session(path, con).sql(bench_query.QUERY, **bench_query.OPTIONS)

    cases: tuple[tuple[str, Job, str], ...] = (
        ("a new measurement (warm session)", new_measurement, "2"),
        ("the same query: a cache hit", cache_hit, "2"),
        ("a new session, then the query", new_session, ""),
    )
    for name, job, target in cases:
        secs, base = interleaved(job, plain, 10, repeat)
        met = "met" if secs <= float(target or "inf") * base else "MISSED"
        verdict = f"≤ {target}×: {met}" if target else "(none)"
        print(f"{name:<34} {secs * 1e3:>8.2f} ms   plain DuckDB {base * 1e3:>7.2f} ms  "
              f"ratio {secs / base:>5.1f}×   target {verdict}")  # fmt: skip
    session.close()


def _group_table(con: Any, rows: int) -> int:
    """The ``groups`` table ``t(user_id, k)`` in ``con``; returns its number of units."""
    units = rows // 10
    crowded = units // 10  # the last 10 % of the units share 1 000 keys
    con.execute(
        f"CREATE OR REPLACE TABLE t AS SELECT i // 10 AS user_id, "
        f"CASE WHEN i // 10 < {units - crowded} THEN i // 10 ELSE (i // 10) % 1000 END AS k "
        f"FROM range({rows}) r(i)"
    )
    return units


def _grouped(con: Any, domains: dict[str, list[int]] | None) -> tuple[Job, Job]:
    """The ``groups`` query through a fresh session (and grant) per run, and through one warm
    session at a new ε each run (never an answer from the cache)."""
    import logging

    import veil

    logging.getLogger("veil").setLevel(logging.ERROR)  # each run spends its grant: no alerts
    options: dict[str, Any] = {}
    if domains is None:
        options["delta"] = 1e-6
    else:
        options["domains"] = domains
    query = "SELECT k, COUNT(*) AS n FROM t GROUP BY k"

    def session(budget: veil.Budget) -> veil.Session:
        return veil.Session.local(
            tables={"t": "t"}, connection=con, privacy_unit="user_id", analyst="bench",
            budget=budget, ledger="sqlite://",
        )  # fmt: skip

    def run() -> object:
        return session(veil.Budget(epsilon=1, delta=1e-6)).sql(query, epsilon=1, **options)

    warm = session(veil.Budget(epsilon=10**9, delta=Fraction(1, 1000)))
    fresh = itertools.count(1)

    def warm_run() -> object:
        return warm.sql(query, epsilon=1 + Fraction(next(fresh), 4096), **options)

    return run, warm_run


def _plain_grouped(con: Any, keys: int | None) -> Job:
    """Plain DuckDB: one group per unit by a fresh salted hash, then the GROUP BY (and, with
    public keys, only the ``keys`` declared ones)."""
    where = "" if keys is None else f"WHERE k < {keys}"

    def run() -> object:
        salt = int.from_bytes(os.urandom(8), "little") >> 1
        return con.sql(
            f"SELECT k, COUNT(*) AS n FROM (SELECT k, ROW_NUMBER() OVER (PARTITION BY user_id "
            f"ORDER BY hash({salt}, user_id, k)) AS rn FROM t {where}) WHERE rn <= 1 GROUP BY k"
        ).to_arrow_table()

    return run


def groups(repeat: int, rows: int = 10_000_000, public: int = 100_000) -> None:
    import duckdb

    con = duckdb.connect()
    units = _group_table(con, rows)
    candidates = con.sql("SELECT count(DISTINCT k) FROM t").fetchall()[0][0]
    print(
        f"== groups: {rows:,} rows, {units:,} units, {candidates:,} "
        f"candidate keys (median of {repeat} interleaved runs, end to end)"
    )
    selection, selection_warm = _grouped(con, None)
    public_keys, public_keys_warm = _grouped(con, {"k": list(range(public))})
    cases = (
        ("partition selection, new session", selection, _plain_grouped(con, None)),
        ("partition selection, warm session", selection_warm, _plain_grouped(con, None)),
        (f"{public:,} public keys, new session", public_keys, _plain_grouped(con, public)),
        (f"{public:,} public keys, warm session", public_keys_warm, _plain_grouped(con, public)),
    )
    for name, job, baseline in cases:
        secs, base, cpu, cpu_base = interleaved_cpu(job, baseline, repeat)
        ratio = secs / base
        print(
            f"{name:<38} {secs:>7.3f} s   plain DuckDB {base:>7.3f} s   ratio {ratio:>5.2f}×   "
            f"target ≤ 1.5×: {'met' if ratio <= 1.5 else 'MISSED'}   (CPU {cpu:.3f} / "
            f"{cpu_base:.3f} s: {cpu / cpu_base:.2f}×; load {os.getloadavg()[0]:.1f})"
        )


def quantiles(repeat: int, rows: int = 10_000_000) -> None:
    import duckdb

    import _data
    import veil

    path = _data.ensure_table(rows)
    print(f"== quantiles: per state on {rows:,} rows, one row per user (median of {repeat} runs)")
    con = duckdb.connect()
    lo, hi = _data.INCOME_BOUNDS
    runs = [0]

    def session() -> veil.Session:
        runs[0] += 1  # a fresh dataset each run: fresh noise, never the cache
        return veil.Session.local(
            tables={"people": str(path)}, connection=con, dataset=f"people{runs[0]}",
            privacy_unit="user_id", budget=veil.Budget(epsilon=10), self_grant=True,
            bounds={"income": _data.INCOME_BOUNDS}, domains={"state": list(_data.STATES)},
        )  # fmt: skip

    def plain(aggregates: str) -> str:
        return (
            f"SELECT state, {aggregates} FROM (SELECT state, least(greatest(income, {lo}), {hi})"
            " AS income, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY hash(7, user_id, "
            f"state, income)) AS rn FROM read_parquet('{path}')) WHERE rn <= 1 GROUP BY state"
        )

    cases = (
        ("MEDIAN per state", "MEDIAN(income) AS m", "median(income)"),
        (
            "COUNT, SUM, MEDIAN per state",
            "COUNT(*) AS n, SUM(income) AS s, MEDIAN(income) AS m",
            "count(*), sum(income), median(income)",
        ),
    )
    warm = session()  # one session for the warm rows: a new ε each run, never the cache
    fresh = itertools.count(2)
    for name, mine, theirs in cases:
        query = f"SELECT state, {mine} FROM people GROUP BY state"
        baseline_sql = plain(theirs)

        def job(q: str = query) -> object:
            return session().sql(q, epsilon=1).rows

        def warm_job(q: str = query) -> object:
            return warm.sql(q, epsilon=f"1/{next(fresh)}").rows

        def baseline(q: str = baseline_sql) -> object:
            return con.execute(q).fetchall()

        for label, run in ((f"{name}, new session", job), (f"{name}, warm session", warm_job)):
            secs, base, cpu, cpu_base = interleaved_cpu(run, baseline, repeat)
            ratio = secs / base
            print(
                f"{label:<44} {secs * 1e3:>8.1f} ms   plain DuckDB {base * 1e3:>7.1f} ms  "
                f"ratio {ratio:>5.2f}×   target ≤ 1.3×: {'met' if ratio <= 1.3 else 'MISSED'}   "
                f"(CPU {cpu * 1e3:.0f} / {cpu_base * 1e3:.0f} ms: {cpu / cpu_base:.2f}×; "
                f"load {os.getloadavg()[0]:.1f})"
            )
    # many groups: the draws' cost per group, not the scan, is what this row shows
    ages = {"age": list(range(101))}  # (the table's ages: 0–100, one per user)

    def many() -> object:
        query = "SELECT state, age, MEDIAN(income) AS m FROM people GROUP BY state, age"
        return warm.sql(query, epsilon=f"1/{next(fresh)}", domains=ages).rows

    def many_plain() -> object:
        return con.execute(plain("median(income)").replace("state", "state, age")).fetchall()

    secs, base, cpu, cpu_base = interleaved_cpu(many, many_plain, repeat)
    print(
        f"{'MEDIAN per (state, age): 5,050 groups, warm':<44} {secs * 1e3:>8.1f} ms   plain "
        f"DuckDB {base * 1e3:>7.1f} ms  ratio {secs / base:>5.2f}×   target (none)   (CPU "
        f"{cpu * 1e3:.0f} / {cpu_base * 1e3:.0f} ms: {cpu / cpu_base:.2f}×; load "
        f"{os.getloadavg()[0]:.1f})"
    )
    con.close()


MAXGROUPS = (  # (max_groups, max_rows_per_group) against (the same) with max_groups = 1
    ((3, 1), (1, 1)),
    ((2, 1), (1, 1)),
    ((5, 1), (1, 1)),
    ((3, 3), (1, 3)),
    ((1, 3), (1, 1)),  # no target: rows per group, not groups
)


def maxgroups(repeat: int, rows: int = 1_000_000) -> None:
    import logging

    import duckdb

    import _data
    from veil.compile import dialect, lower, to_sql
    from veil.plan.tree import aggregate_of

    logging.getLogger("veil").setLevel(logging.ERROR)
    path = _data.ensure_table(rows)
    print(
        f"== max_groups: veil's statement on plain DuckDB, {rows:,} rows, against max_groups = 1 "
        f"(median of {repeat} interleaved runs)"
    )
    session = Session.local(
        tables={"people": str(path)}, connection=duckdb.connect(), privacy_unit="user_id",
        budget=Budget(epsilon=10**6, delta=Fraction(1, 10**6)), analyst="bench",
        ledger="sqlite://",
    )  # fmt: skip
    sql = "SELECT state, COUNT(*) AS n, SUM(income) AS total FROM people GROUP BY state"
    states = "[" + ", ".join(f"'{s}'" for s in _data.STATES) + "]"
    shapes = (
        ("one state per user", f"SELECT * FROM read_parquet('{path}')"),
        (
            "a state per row",
            f"SELECT user_id, list_extract({states}, 1 + CAST(hash(user_id, income) % 50 AS "
            f"INTEGER)) AS state, age, income FROM read_parquet('{path}')",
        ),
    )
    for shape, view in shapes:
        con = duckdb.connect()
        con.execute(f"CREATE VIEW people AS {view}")
        pairs = con.sql("SELECT count(*) FROM (SELECT DISTINCT user_id, state FROM people)")
        print(f"-- {shape}: {(pairs.fetchall()[0][0] or 0) / rows:.2f} (user, state) per row")

        def statement(g: int, r: int, public: bool = True, con: Any = con) -> Job:
            options: dict[str, Any] = {
                "bounds": {"income": _data.INCOME_BOUNDS},
                "max_groups": g,
                "max_rows_per_group": r,
            }
            if public:
                options["domains"] = {"state": list(_data.STATES)}
            else:
                options["delta"] = 1e-6  # partition selection
            explained = session.explain(sql, epsilon=1, **options)
            agg = aggregate_of(explained.plan)  # type: ignore[arg-type]

            def run() -> object:
                salt = int.from_bytes(os.urandom(8), "little") >> 1  # fresh, as veil's
                tree = lower(agg, dialect("duckdb"), salt=salt).main
                return con.sql(to_sql(tree, "duckdb")).fetchall()

            return run

        cases = [
            (f"G = {g}, R = {r} against G = 1, R = {r1}", statement(g, r), statement(1, r1), g)
            for (g, r), (_, r1) in MAXGROUPS
        ]
        cases.append(
            ("G = 3 against G = 1, unknown keys", statement(3, 1, False), statement(1, 1, False), 3)
        )

        def pairs(con: Any = con) -> object:  # the floor: one row per (user, state), plain
            salt = int.from_bytes(os.urandom(8), "little") >> 1
            return con.sql(
                f"SELECT count(*), sum(x) FROM (SELECT arg_min(income, hash({salt}, user_id, "
                f"state, income)) AS x FROM people WHERE state IN ({states[1:-1]}) "
                "GROUP BY user_id, state)"
            ).fetchall()

        cases.append(("floor: one row per (user, state)", pairs, statement(1, 1), 0))
        for label, job, baseline, g in cases:
            secs, base, cpu, cpu_base = interleaved_cpu(job, baseline, repeat)
            ratio = secs / base
            target = f"≤ 2×: {'met' if ratio <= 2 else 'MISSED'}" if g == 3 else "(none)"
            print(
                f"{label:<36} {secs * 1e3:>7.1f} ms against {base * 1e3:>7.1f} ms  ratio "
                f"{ratio:>5.2f}×   target {target}   (CPU {cpu * 1e3:.0f} / "
                f"{cpu_base * 1e3:.0f} ms: {cpu / cpu_base:.2f}×; load {os.getloadavg()[0]:.1f})"
            )
        con.close()
    session.close()


KINDS = (  # (label, veil's aggregates, plain DuckDB's, grouped by, public keys)
    ("COUNT, SUM per (state, age)", "COUNT(*) AS n, SUM(income) AS t", "count(*), sum(income)",
     "state, age", True),
    ("AVG, VARIANCE per (state, age)", "AVG(income) AS a, VARIANCE(income) AS v",
     "avg(income), var_samp(income)", "state, age", True),
    ("MEDIAN per (state, age)", "MEDIAN(income) AS m", "median(income)", "state, age", True),
    ("MIN, MAX per (state, age)", "MIN(income) AS a, MAX(income) AS b",
     "min(income), max(income)", "state, age", True),
    ("MODE(age) per state", "MODE(age) AS m", "mode(age)", "state", True),
    ("COUNT per (state, age), unknown keys", "COUNT(*) AS n", "count(*)", "state, age", False),
    ("MEDIAN per (state, age), unknown keys", "MEDIAN(income) AS m", "median(income)",
     "state, age", False),
)  # fmt: skip


def kinds(repeat: int, rows: int = 1_000_000) -> None:
    """Each aggregate kind over many groups — the 5,050 (state, age) pairs, or the 50 states
    for MODE — on one warm session at a new ε each run, against plain DuckDB's same bounded
    aggregation (one row per user, income clamped); no target: where per-group work shows."""
    import logging
    import warnings

    import duckdb

    import _data

    logging.getLogger("veil").setLevel(logging.ERROR)
    path = _data.ensure_table(rows)
    print(f"== aggregate kinds over many groups, {rows:,} rows (median of {repeat} runs)")
    con = duckdb.connect()
    session = Session.local(
        tables={"people": str(path)}, connection=con, privacy_unit="user_id",
        budget=Budget(epsilon=10**9, delta=Fraction(1, 1000)), analyst="bench",
        ledger="sqlite://",
    )  # fmt: skip
    lo, hi = _data.INCOME_BOUNDS
    domains = {"state": list(_data.STATES), "age": list(range(101))}
    fresh = itertools.count(1)
    for label, mine, theirs, by, public in KINDS:
        query = f"SELECT {by}, {mine} FROM people GROUP BY {by}"
        options: dict[str, Any] = {"bounds": {"income": _data.INCOME_BOUNDS, "age": (0, 100)}}
        if public:
            options["domains"] = {k: domains[k] for k in by.split(", ")}
        else:
            options["delta"] = Fraction(1, 10**6)
        plain_sql = (
            f"SELECT {by}, {theirs} FROM (SELECT state, age, least(greatest(income, {lo}), "
            f"{hi}) AS income, ROW_NUMBER() OVER (PARTITION BY user_id ORDER BY hash(7, "
            f"user_id, state, age, income)) AS rn FROM read_parquet('{path}')) WHERE rn <= 1 "
            f"GROUP BY {by}"
        )

        def job(q: str = query, o: dict[str, Any] = options) -> object:
            with warnings.catch_warnings():  # (a bound the query does not read is ignored)
                warnings.simplefilter("ignore")
                return session.sql(q, epsilon=f"1/{next(fresh)}", **o).rows

        def baseline(q: str = plain_sql) -> object:
            return con.execute(q).fetchall()

        secs, base, cpu, cpu_base = interleaved_cpu(job, baseline, repeat)
        print(
            f"{label:<38} {secs * 1e3:>7.1f} ms   plain DuckDB {base * 1e3:>6.1f} ms  ratio "
            f"{secs / base:>5.2f}×   (CPU {cpu * 1e3:.0f} / {cpu_base * 1e3:.0f} ms: "
            f"{cpu / cpu_base:.2f}×; load {os.getloadavg()[0]:.1f})"
        )
    session.close()
    con.close()


SECTIONS: dict[str, Callable[..., None]] = {
    "scalar": scalar,
    "aggregates": aggregates,
    "small": small,
    "groups": groups,
    "quantiles": quantiles,
    "maxgroups": maxgroups,
    "kinds": kinds,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", choices=sorted(SECTIONS), action="append")
    parser.add_argument("--group-rows", type=int, default=10_000_000)
    parser.add_argument("--public-keys", type=int, default=100_000)
    parser.add_argument(
        "--rows", type=lambda s: int(s.replace("_", "")), default=10_000_000,
        help="rows of the quantiles section's table",
    )  # fmt: skip
    parser.add_argument(
        "--maxgroups-rows", type=lambda s: int(s.replace("_", "")), default=1_000_000,
        help="rows of the maxgroups section's table",
    )  # fmt: skip
    args = parser.parse_args()
    for name in args.only or list(SECTIONS):
        if name == "quantiles":
            quantiles(args.repeat, args.rows)
        elif name == "groups":
            groups(args.repeat, args.group_rows, args.public_keys)
        elif name == "maxgroups":
            maxgroups(args.repeat, args.maxgroups_rows)
        else:
            SECTIONS[name](args.repeat)


if __name__ == "__main__":
    main()
