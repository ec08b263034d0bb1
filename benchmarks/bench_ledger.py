"""The ledger's charge rate against the same durable transactions done raw (issue 15).

One charge is what every released answer costs the ledger: ``reserve`` (check that the loss
fits and record the charge) then ``commit`` (store the answer for the cache), two durable
transactions. The baseline issues the same statements — veil's own SQL texts
(``veil.accounting.grouping.Statements``) with the same parameters — on the same tables
through the bare database driver (stdlib ``sqlite3``, ``psycopg``), in the same process, with
the same durability (SQLite: WAL, ``synchronous = FULL``, ``BEGIN IMMEDIATE``; PostgreSQL:
default ``synchronous_commit``), and none of veil's Python around them:

    reserve: BEGIN; SELECT the budget row and the dataset's cap (PostgreSQL: the budget row
             locked FOR NO KEY UPDATE); UPDATE the budget's running sums and INSERT the charge
             event (one statement in PostgreSQL); COMMIT
    commit:  BEGIN; UPDATE the charge event's status (locking that row only); INSERT the
             answer and link it from the event (one statement in PostgreSQL); COMMIT

On SQLite the statements each side ran for one charge are traced and compared before timing
(printed: the same or not).

Also a cache hit (``cached_answer`` with the in-process memo cleared, so every lookup reads the
database), recorded at once or deferred, against the raw lookup and durable INSERT of a hit.

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
import itertools
import multiprocessing as mp
import os
import re
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _results
import veil
from veil.accounting import records
from veil.accounting.grouping import Statements

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
        tables = con.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename LIKE 'veil\\_%'"
        ).fetchall()
        for (table,) in tables:  # every table of veil's, whatever this version's schema
            con.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


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
    """The same two transactions through the bare driver: veil's own statement texts
    (:class:`veil.accounting.grouping.Statements`, the hot path's SQL) with the same
    parameters, and none of veil's Python around them (the loss arithmetic, the checks)."""

    def __init__(self, url: str) -> None:
        self.pg = url.startswith("postgresql")
        self.sql = Statements(self.pg)
        if self.pg:
            import psycopg

            self.con: Any = psycopg.connect(url, autocommit=True)
        else:
            path = url.removeprefix("sqlite:///")
            self.con = sqlite3.connect(path, isolation_level=None)
            self.con.execute("PRAGMA journal_mode = WAL")
            self.con.execute("PRAGMA synchronous = FULL")
            self.con.execute("PRAGMA foreign_keys = ON")

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
        sql = self.sql
        now = records.now()
        columns = records.loss_columns(LOSS)
        fingerprint = f"raw{os.getpid()}-{n}"

        def reserve(cur: Any) -> tuple[int, int]:
            cur.execute(sql.budget_and_cap, (ANALYST, DATASET))
            found = cur.fetchone()
            bid, spent = found[0], found[5]  # no dataset cap here: no cap row to lock
            after = (str(spent), "0", "0")  # the running sums, as veil writes them
            charge = (
                bid, now, fingerprint, "", now, None,
                columns["loss_kind"], columns["epsilon"], columns["delta"], columns["rho"],
            )  # fmt: skip
            if sql.spend_and_charge is not None:
                cur.execute(sql.spend_and_charge, (*after, now, bid, *charge))
            else:
                cur.execute(sql.spend, (*after, now, bid))
                cur.execute(sql.insert_charge, charge)
            (eid,) = cur.fetchone()
            return int(bid), int(eid)

        bid, eid = self._tx(reserve)

        def commit(cur: Any) -> None:
            cur.execute(sql.mark_committed, (now, eid))
            cur.fetchone()
            answer = (bid, fingerprint, "", "k", '{"rows": [[1, 2.5]]}', eid, now)
            if sql.answer_and_link is not None:
                cur.execute(sql.answer_and_link, (*answer, eid))
            else:
                cur.execute(sql.insert_answer, answer)
                (aid,) = cur.fetchone()
                cur.execute(sql.set_answer, (aid, eid))

        self._tx(commit)


def _shape(statement: str) -> str:
    """A traced statement without its values (SQLite's trace expands the parameters)."""
    return re.sub(r"'(?:[^']|'')*'|\b\d+\b", "?", " ".join(statement.split()))


def traced_statements(url: str) -> tuple[list[str], list[str]]:
    """The statements (values replaced by ``?``) that one veil charge and one raw charge
    send to a SQLite file, as SQLite's trace sees them."""
    with veil.Ledger(url) as ledger:
        ledger.reserve(ANALYST, DATASET, LOSS, fingerprint="trace-0").commit(ANSWER)
        seen: list[str] = []
        driver = ledger._writer.dbapi_connection  # the kept writer connection (see _write)
        driver.set_trace_callback(seen.append)
        ledger.reserve(ANALYST, DATASET, LOSS, fingerprint="trace-1").commit(ANSWER)
        driver.set_trace_callback(None)
    raw = _Raw(url)
    raw_seen: list[str] = []
    raw.con.set_trace_callback(raw_seen.append)
    raw.charge(-1)
    raw.con.close()
    return [_shape(x) for x in seen], [_shape(x) for x in raw_seen]


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
    now = records.now()
    key = records.loss_key(LOSS)
    columns = records.loss_columns(LOSS)

    def hit() -> None:
        # veil's statements: the lookup alone (its own snapshot, no lock), then the hit's
        # record in a durable write transaction
        cur = raw.con.cursor()
        cur.execute(raw.sql.budget_and_answer, (fp, "", key, ANALYST, DATASET))
        bid, aid, _ = cur.fetchone()
        event = (
            bid, now, fp, "", aid, None,
            columns["loss_kind"], columns["epsilon"], columns["delta"], columns["rho"],
        )  # fmt: skip
        raw._tx(lambda cur: cur.execute(raw.sql.insert_hit, event))

    done, end = 0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        hit()
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
    parser.add_argument("--results", type=Path, default=None, help="JSON file of the figures")
    args = parser.parse_args()
    run = _results.Run("ledger")
    run.add("seconds_per_round", args.seconds)
    run.add("rounds", args.rounds)

    def record(case: str, ours: list[float], raw: list[float]) -> None:
        run.add(case, {"veil_per_s": round(statistics.median(ours)),
                       "raw_per_s": round(statistics.median(raw)),
                       "ratio": round(_ratio(ours, raw), 3)})  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        _grant(url)
        ours, theirs = traced_statements(url)
        print(f"SQLite statements of one charge: veil {len(ours)}, raw {len(theirs)}, "
              f"{'the same' if ours == theirs else 'DIFFERENT'}")  # fmt: skip
        if ours != theirs:
            for a, b in itertools.zip_longest(ours, theirs, fillvalue=""):
                print(f"  veil: {a}\n  raw:  {b}")
        run.add("sqlite_same_statements", ours == theirs)
        v, r = [], []
        for _ in range(args.rounds):
            v.append(veil_charges(url, args.seconds) / args.seconds)
            r.append(raw_charges(url, args.seconds) / args.seconds)
        vm, rm = statistics.median(v), statistics.median(r)
        print(f"SQLite file, 1 process: veil {vm:,.0f} charges/s, raw {rm:,.0f}/s, "
              f"{_ratio(v, r):.2f}× (target ≥ 0.7×)")  # fmt: skip
        record("sqlite_1_process", v, r)
        g, r = [], []
        for _ in range(args.rounds):
            g.append(grouped_charges(url, args.seconds, args.threads))
            r.append(raw_charges(url, args.seconds) / args.seconds)
        gm, rm = statistics.median(g), statistics.median(r)
        print(f"SQLite file, group commit, {args.threads} threads: veil {gm:,.0f} charges/s "
              f"(target ≥ 2,000/s), raw {rm:,.0f}/s, {_ratio(g, r):.2f}×")  # fmt: skip
        record(f"sqlite_group_commit_{args.threads}_threads", g, r)
        now, later, hr = cache_hits(url, args.seconds)
        print(f"SQLite cache hits: veil {now:,.0f}/s ({now / hr:.2f}×), with deferred hit "
              f"records {later:,.0f}/s ({later / hr:.2f}×), raw (lookup + durable INSERT) "
              f"{hr:,.0f}/s")  # fmt: skip
        run.add("sqlite_cache_hits", {"veil_per_s": round(now), "veil_deferred_per_s": round(later),
                                      "raw_per_s": round(hr), "ratio": round(now / hr, 3),
                                      "ratio_deferred": round(later / hr, 3)})  # fmt: skip
    pg = os.environ.get("VEIL_BENCH_POSTGRES_URL") or os.environ.get("VEIL_TEST_POSTGRES_URL")
    if not pg:
        print("PostgreSQL: skipped (set VEIL_BENCH_POSTGRES_URL=postgresql://… to run it)")
        run.write(args.results)
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
        record(f"postgres_{procs}_processes", v, r)
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
    record(f"postgres_group_commit_{args.threads}_threads", g, r)
    _fresh(pg)
    run.write(args.results)


if __name__ == "__main__":
    main()
