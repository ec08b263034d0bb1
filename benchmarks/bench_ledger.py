"""The ledger's charge rate against the same durable transactions done raw (issue 15).

One charge is what every released answer costs the ledger: ``reserve`` (check that the loss
fits and record the charge) then ``commit`` (store the answer for the cache), two durable
transactions. The baseline issues the same statements on the same tables through the bare
database driver (stdlib ``sqlite3``, ``psycopg``), in the same process, with the same
durability (SQLite: WAL, ``synchronous = FULL``, ``BEGIN IMMEDIATE``; PostgreSQL: the
budget row locked ``FOR UPDATE``, default ``synchronous_commit``):

    reserve: BEGIN; SELECT the budget row (FOR UPDATE); SELECT the dataset cap (FOR UPDATE);
             UPDATE the budget's running sums; INSERT the charge event; COMMIT
    commit:  BEGIN; SELECT the budget row (FOR UPDATE); SELECT the charge event;
             INSERT the answer; UPDATE the event's status; COMMIT

Also a cache hit (``cached_answer`` with the in-process memo cleared, so every lookup reads the
database), recorded at once or deferred, against the raw durable SELECT + INSERT of a hit.

Group commit (``Ledger(group_commit=True)``, the service's ledger): ``--threads`` threads of one
process charging one budget through one ledger object, their reserves and commits batched into
shared durable transactions, against the raw baseline above (one connection: SQLite has one
writer at a time, so raw threads would take turns on the same transactions); the target is
≥ 2,000 charges/s on SQLite.

Printed: charges/s for veil and raw (medians), their ratio (the median of the rounds' ratios;
the issue's target is ≥ 0.7×) on a SQLite
file and, when ``VEIL_BENCH_POSTGRES_URL`` (or ``VEIL_TEST_POSTGRES_URL``) names a PostgreSQL
server, on PostgreSQL — in a database of its own, ``veil_bench_ledger``, created there — with
1 and ``--processes`` processes charging one shared budget (the target: scaling with
processes). Rounds alternate veil and raw; medians over ``--rounds``.

    python benchmarks/bench_ledger.py [--seconds 2] [--rounds 3] [--processes 8] [--threads 8]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import veil
from veil.accounting import records

ANALYST, DATASET = "bench", "people"
LOSS = veil.Budget(epsilon="1/1000000")
ANSWER = {"rows": [[1, 2.5]], "bars": [[None, 0.5]]}


BENCH_DATABASE = "veil_bench_ledger"  # its own database: never a test's or a user's tables


def _bench_database(url: str) -> str:
    """The URL of a database of this benchmark's own on the server of ``url`` (created)."""
    import psycopg
    from sqlalchemy.engine import make_url

    with psycopg.connect(url, autocommit=True) as con:
        exists = con.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (BENCH_DATABASE,)
        ).fetchone()
        if exists is None:
            con.execute(f'CREATE DATABASE "{BENCH_DATABASE}"')
    return make_url(url).set(database=BENCH_DATABASE).render_as_string(hide_password=False)


def _fresh(url: str) -> None:
    """Drop veil's tables in the benchmark's own database, so each run starts from one
    grant."""
    import psycopg

    with psycopg.connect(url) as con:
        for t in ("answers", "alerts", "events", "dataset_caps", "datasets", "budgets"):
            con.execute(f"DROP TABLE IF EXISTS veil_{t} CASCADE")
        con.execute("DROP TABLE IF EXISTS veil_schema_version CASCADE")


def _grant(url: str) -> None:
    with veil.Ledger(url) as ledger:
        ledger.grant(ANALYST, DATASET, veil.Budget(epsilon=10**9), alert_thresholds=[])


def veil_charges(url: str, seconds: float) -> int:
    """reserve + commit in a loop for ``seconds``: the number done."""
    with veil.Ledger(url) as ledger:
        done, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            r = ledger.reserve(ANALYST, DATASET, LOSS, fingerprint=f"fp{os.getpid()}-{done}")
            r.commit(ANSWER)
            done += 1
        return done


def grouped_charges(url: str, seconds: float, threads: int) -> float:
    """Charges per second of ``threads`` threads doing reserve + commit in a loop through one
    ledger with group commit."""
    with veil.Ledger(url, group_commit=True) as ledger:
        counts = [0] * threads
        start = threading.Barrier(threads)

        def charge(worker: int) -> None:
            start.wait()
            done, end = 0, time.perf_counter() + seconds
            while time.perf_counter() < end:
                fp = f"g{os.getpid()}-{worker}-{done}"
                ledger.reserve(ANALYST, DATASET, LOSS, fingerprint=fp).commit(ANSWER)
                done += 1
            counts[worker] = done

        pool = [threading.Thread(target=charge, args=(w,)) for w in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    return sum(counts) / seconds


class _Raw:
    """The same two transactions through the bare driver."""

    def __init__(self, url: str) -> None:
        self.pg = url.startswith("postgresql")
        if self.pg:
            import psycopg

            self.con: Any = psycopg.connect(url, autocommit=True)
            self.mark, self.lock = "%s", " FOR UPDATE"
        else:
            path = url.removeprefix("sqlite:///")
            self.con = sqlite3.connect(path, isolation_level=None)
            self.con.execute("PRAGMA journal_mode = WAL")
            self.con.execute("PRAGMA synchronous = FULL")
            self.con.execute("PRAGMA foreign_keys = ON")
            self.mark, self.lock = "?", ""

    def _tx(self, body: Callable[[Any], Any]) -> Any:
        cur = self.con.cursor()
        cur.execute("BEGIN" if self.pg else "BEGIN IMMEDIATE")
        try:
            out = body(cur)
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")
        return out

    def charge(self, n: int) -> None:
        m, lock = self.mark, self.lock
        now = records.now()

        def reserve(cur: Any) -> int:
            cur.execute(
                f"SELECT id, spent_epsilon FROM veil_budgets WHERE analyst = {m} AND "
                f"dataset = {m}{lock}",
                (ANALYST, DATASET),
            )
            bid, spent = cur.fetchone()
            cur.execute(f"SELECT * FROM veil_dataset_caps WHERE dataset = {m}{lock}", (DATASET,))
            cur.fetchall()
            cur.execute(
                f"UPDATE veil_budgets SET spent_epsilon = {m}, updated_at = {m} WHERE id = {m}",
                (str(spent), now, bid),
            )
            cur.execute(
                "INSERT INTO veil_events (budget_id, at, event, status, fingerprint, "
                "data_version, updated_at, loss_kind, epsilon, delta) VALUES "
                f"({m}, {m}, 'charge', 'reserved', {m}, '', {m}, 'pure', {m}, '0') RETURNING id",
                (bid, now, f"raw{os.getpid()}-{n}", now, "1/1000000"),
            )
            (eid,) = cur.fetchone()
            return int(eid)

        eid = self._tx(reserve)

        def commit(cur: Any) -> None:
            cur.execute(
                f"SELECT id FROM veil_budgets WHERE analyst = {m} AND dataset = {m}{lock}",
                (ANALYST, DATASET),
            )
            (bid,) = cur.fetchone()
            cur.execute(f"SELECT status FROM veil_events WHERE id = {m}", (eid,))
            cur.fetchone()
            cur.execute(
                "INSERT INTO veil_answers (budget_id, fingerprint, data_version, loss_key, "
                f"answer, charge_id, created_at) VALUES ({m}, {m}, '', 'k', {m}, {m}, {m}) "
                "RETURNING id",
                (bid, f"raw{n}", '{"rows": [[1, 2.5]]}', eid, now),
            )
            (aid,) = cur.fetchone()
            cur.execute(
                f"UPDATE veil_events SET status = 'committed', answer_id = {m} WHERE id = {m}",
                (aid, eid),
            )

        self._tx(commit)


def raw_charges(url: str, seconds: float) -> int:
    raw = _Raw(url)
    done, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        raw.charge(done)
        done += 1
    raw.con.close()
    return done


def _worker(args: tuple[str, str, float, Any]) -> int:
    kind, url, seconds, barrier = args
    barrier.wait()
    return (veil_charges if kind == "veil" else raw_charges)(url, seconds)


def parallel(kind: str, url: str, seconds: float, processes: int) -> float:
    """Charges per second of ``processes`` processes charging one budget at once."""
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(processes)
        with ctx.Pool(processes) as pool:
            counts = pool.map(_worker, [(kind, url, seconds, barrier)] * processes)
    return sum(counts) / seconds


def cache_hits(url: str, seconds: float) -> tuple[float, float, float]:
    """Cache hits per second: veil recording each hit at once, veil deferring the records
    (``defer_cache_hits=True``, the service's choice), and raw — the answer's SELECT and the
    hit's INSERT in one durable transaction. The in-process memo is cleared before each
    lookup: every one reads the database."""
    with veil.Ledger(url) as ledger:
        fp = "cached-fp"
        ledger.reserve(ANALYST, DATASET, LOSS, fingerprint=fp).commit(ANSWER)
    rates = []
    for defer in (False, True):
        ledger = veil.Ledger(url, defer_cache_hits=defer)
        done, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            ledger._answers.clear()
            hit = ledger.cached_answer(ANALYST, DATASET, fingerprint=fp, data_version="", loss=LOSS)
            assert hit is not None
            done += 1
        ledger.close()
        rates.append(done / seconds)
    raw = _Raw(url)
    m = raw.mark
    now = records.now()

    def hit(cur: Any) -> None:
        cur.execute(
            f"SELECT a.budget_id, a.answer FROM veil_answers a JOIN veil_budgets b ON "
            f"a.budget_id = b.id WHERE b.analyst = {m} AND b.dataset = {m} AND "
            f"a.fingerprint = {m}",
            (ANALYST, DATASET, fp),
        )
        bid, _ = cur.fetchone()
        cur.execute(
            "INSERT INTO veil_events (budget_id, at, event, fingerprint, data_version) "
            f"VALUES ({m}, {m}, 'cache_hit', {m}, '')",
            (bid, now, fp),
        )

    done, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        raw._tx(hit)
        done += 1
    raw.con.close()
    return rates[0], rates[1], done / seconds


def _ratio(ours: list[float], raw: list[float]) -> float:
    """The median of the rounds' ratios: each round runs both sides back to back, so a disk
    that is slower for a while (a shared machine) slows both sides of a ratio alike."""
    return statistics.median(o / r for o, r in zip(ours, raw, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        _grant(url)
        v, r = [], []
        for _ in range(args.rounds):
            v.append(veil_charges(url, args.seconds) / args.seconds)
            r.append(raw_charges(url, args.seconds) / args.seconds)
        vm, rm = statistics.median(v), statistics.median(r)
        print(f"SQLite file, 1 process: veil {vm:,.0f} charges/s, raw {rm:,.0f}/s, "
              f"{_ratio(v, r):.2f}× (target ≥ 0.7×)")  # fmt: skip
        g, r = [], []
        for _ in range(args.rounds):
            g.append(grouped_charges(url, args.seconds, args.threads))
            r.append(raw_charges(url, args.seconds) / args.seconds)
        gm, rm = statistics.median(g), statistics.median(r)
        print(f"SQLite file, group commit, {args.threads} threads: veil {gm:,.0f} charges/s "
              f"(target ≥ 2,000/s), raw {rm:,.0f}/s, {_ratio(g, r):.2f}×")  # fmt: skip
        now, later, hr = cache_hits(url, args.seconds)
        print(f"SQLite cache hits: veil {now:,.0f}/s ({now / hr:.2f}×), with deferred hit "
              f"records {later:,.0f}/s ({later / hr:.2f}×), raw (SELECT + INSERT, durable) "
              f"{hr:,.0f}/s")  # fmt: skip
    pg = os.environ.get("VEIL_BENCH_POSTGRES_URL") or os.environ.get("VEIL_TEST_POSTGRES_URL")
    if not pg:
        print("PostgreSQL: skipped (set VEIL_BENCH_POSTGRES_URL=postgresql://… to run it)")
        return
    pg = _bench_database(pg)
    for procs in (1, args.processes):
        v, r = [], []
        for _ in range(args.rounds):
            _fresh(pg)
            _grant(pg)
            v.append(parallel("veil", pg, args.seconds, procs))
            r.append(parallel("raw", pg, args.seconds, procs))
        vm, rm = statistics.median(v), statistics.median(r)
        print(f"PostgreSQL, {procs} process(es): veil {vm:,.0f} charges/s, raw {rm:,.0f}/s, "
              f"{_ratio(v, r):.2f}× (target ≥ 0.7×, scaling with processes)")  # fmt: skip
    g, r = [], []
    for _ in range(args.rounds):
        _fresh(pg)
        _grant(pg)
        g.append(grouped_charges(pg, args.seconds, args.threads))
        r.append(parallel("raw", pg, args.seconds, 1))
    gm, rm = statistics.median(g), statistics.median(r)
    print(f"PostgreSQL, group_commit=True (a transaction per write, concurrently), "
          f"{args.threads} threads in 1 process: veil {gm:,.0f} "
          f"charges/s, raw (1 process) {rm:,.0f}/s, {_ratio(g, r):.2f}×")  # fmt: skip
    _fresh(pg)


if __name__ == "__main__":
    main()
