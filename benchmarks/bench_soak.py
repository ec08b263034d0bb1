"""A soak of the HTTP service: steady mixed load for a long time, to show that latency, memory
and open files per worker stay flat (issue 34: p50 went 220 ms → 4.0 s over a 10-minute soak,
as each cache hit added an event that every history and dashboard read read again).

Starts a real server (``veil serve --workers W`` on 127.0.0.1, a generated table, a SQLite
ledger in a temporary directory, or ``--ledger`` a PostgreSQL URL; ``tests/service/server.py``)
and drives it from this process with ``--clients`` clients (asyncio, one kept-alive connection
each), together paced at ``--rate`` requests per second, each request drawn from a fixed mix:

- ``healthz``   ``GET /healthz``: the baseline, measured in the same run;
- ``cached``    the same query again: answered from the ledger's cache (each hit is an event);
- ``uncached``  a query with a new SQL text: a charge, a scan, noise, a commit;
- ``history``   ``GET /v1/history``: the newest page of the analyst's history;
- ``budget``    ``GET /v1/budget``;
- ``dashboard`` ``GET /dashboard`` as the analyst (logged in once per client).

Every ``--report-s`` seconds it prints, for that interval, p50 and p99 per kind, each kind's p50
over ``/healthz``'s, errors, and each worker's resident memory (RSS) and open file descriptors
(from ``/proc``). At the end: the first interval against the last (flat = good).

    python benchmarks/bench_soak.py [--minutes 30] [--workers 2] [--clients 8] [--rate 40]
        [--report-s 60] [--ledger URL]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from service.server import Deployment, Server, serve

ANALYST = "soak"
CACHED_SQL = "SELECT state, COUNT(*) AS n FROM people GROUP BY state"
MIX = {"healthz": 10, "cached": 40, "uncached": 10, "history": 15, "budget": 15, "dashboard": 10}


@dataclass
class Interval:
    """What one report interval saw: latencies (s) per kind, errors per kind."""

    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def _body(payload: dict[str, object]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


_fresh = itertools.count()


def _request(kind: str) -> tuple[str, str, bytes | None]:
    if kind == "healthz":
        return "GET", "/healthz", None
    if kind == "cached":
        return "POST", "/v1/query", _body({"dataset": "people", "sql": CACHED_SQL, "epsilon": 1})
    if kind == "uncached":
        sql = f"SELECT COUNT(*) AS n FROM people WHERE income >= {next(_fresh)}"
        return "POST", "/v1/query", _body({"dataset": "people", "sql": sql, "epsilon": "1/1000"})
    if kind == "history":
        return "GET", "/v1/history?dataset=people&limit=100", None
    if kind == "budget":
        return "GET", "/v1/budget", None
    return "GET", "/dashboard", None


def _proc(pid: int) -> tuple[float, int]:
    """(resident memory in MiB, open file descriptors) of process ``pid``."""
    rss = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] * 1000


async def _client(
    server: Server, key: str, rate: float, stop: float, now: list[Interval], seed: int
) -> None:
    pick = random.Random(seed)  # the mix's order, not noise
    kinds, weights = list(MIX), list(MIX.values())
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    timeout = aiohttp.ClientTimeout(total=120)
    connector = aiohttp.TCPConnector(limit=1)
    jar = aiohttp.CookieJar(unsafe=True)  # the session cookie of a numeric host: 127.0.0.1
    async with aiohttp.ClientSession(
        server.base_url, connector=connector, headers=headers, timeout=timeout, cookie_jar=jar
    ) as http:
        async with http.post("/dashboard/login", data={"key": key}, allow_redirects=False) as r:
            await r.read()
        async with http.get("/dashboard") as r:
            if "Signed in as" not in await r.text():
                raise RuntimeError("the soak's client could not log in to the dashboard")
        next_at = time.monotonic() + pick.random() / rate
        while time.monotonic() < stop:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            next_at += 1 / rate  # paced: a steady rate, not as fast as the server allows
            kind = pick.choices(kinds, weights)[0]
            method, path, data = _request(kind)
            t0 = time.perf_counter()
            try:
                async with http.request(method, path, data=data) as r:
                    await r.read()
                    ok = r.status == 200
            except (aiohttp.ClientError, TimeoutError):
                ok = False
            elapsed = time.perf_counter() - t0
            if ok:
                now[0].latencies[kind].append(elapsed)
            else:
                now[0].errors[kind] += 1


def _report(t: float, interval: Interval, workers: list[int], first: bool) -> dict[str, float]:
    base = statistics.median(interval.latencies["healthz"]) if interval.latencies["healthz"] else 0
    if first:
        head = f"{'t (s)':>6} {'req':>6} {'err':>4}"
        for kind in MIX:
            head += f" {kind + ' p50/p99 ms (×hz)':>34}"
        print(head + "   workers: RSS MiB / open fds")
    n = sum(len(v) for v in interval.latencies.values())
    errors = sum(interval.errors.values())
    line = f"{t:>6.0f} {n:>6} {errors:>4}"
    summary: dict[str, float] = {}
    for kind in MIX:
        lat = interval.latencies[kind]
        p50, p99 = _pct(lat, 0.5), _pct(lat, 0.99)
        ratio = p50 / (base * 1000) if base else float("nan")
        line += f" {p50:>11.1f} / {p99:>8.1f} (×{ratio:>5.1f})"
        summary[kind] = p50
    procs = [_proc(pid) for pid in workers]
    line += "   " + "  ".join(f"{rss:.0f}/{fds}" for rss, fds in procs)
    summary["rss"] = max(rss for rss, _ in procs)
    summary["fds"] = max(fds for _, fds in procs)
    print(line, flush=True)
    return summary


async def _soak(server: Server, key: str, args: argparse.Namespace) -> None:
    start = time.monotonic()
    stop = start + args.minutes * 60
    now = [Interval()]
    per_client = args.rate / args.clients
    clients = [
        asyncio.create_task(_client(server, key, per_client, stop, now, seed))
        for seed in range(args.clients)
    ]
    workers = server.worker_pids()
    summaries: list[dict[str, float]] = []
    next_report = start + args.report_s
    while time.monotonic() < stop:
        await asyncio.sleep(max(0.0, min(next_report, stop) - time.monotonic()))
        done, now[0] = now[0], Interval()
        summaries.append(_report(time.monotonic() - start, done, workers, not summaries))
        next_report += args.report_s
    await asyncio.gather(*clients)
    if len(summaries) >= 2:
        first, last = summaries[0], summaries[-1]
        print("\nlast interval / first interval (flat = 1.0):")
        for kind in (*MIX, "rss", "fds"):
            print(f"  {kind:<10} {first[kind]:>9.1f} → {last[kind]:>9.1f}  "
                  f"×{last[kind] / first[kind] if first[kind] else float('nan'):.2f}")  # fmt: skip


def _deployment(root: Path, ledger: str | None) -> Deployment:
    d = Deployment(root, ledger=ledger)
    d.service = {"rate_limit": 10_000_000, "query_timeout_s": 120}
    d.add_table("people", 2000, seed=7)
    d.write()
    d.add_key(ANALYST)
    d.grant(ANALYST, "people", 1_000_000)
    return d


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rate", type=float, default=40.0, help="requests/s, all clients")
    parser.add_argument("--report-s", type=float, default=60.0)
    parser.add_argument("--ledger", default=None, help="a PostgreSQL URL (default: SQLite)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="veil-bench-soak-") as tmp:
        d = _deployment(Path(tmp), args.ledger)
        key = d.keys[ANALYST]
        with serve(d.config, workers=args.workers, lifetime_s=args.minutes * 60 + 600) as server:
            print(f"veil soak: {args.minutes:g} min, {args.workers} workers, {args.clients} "
                  f"clients at {args.rate:g} req/s together, mix {MIX}, {os.cpu_count()} CPUs "
                  f"(client and server share them), ledger "
                  f"{'PostgreSQL' if args.ledger else 'SQLite'}")  # fmt: skip
            asyncio.run(_soak(server, key, args))


if __name__ == "__main__":
    main()
