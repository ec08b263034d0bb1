"""Requests/s and latency of the HTTP service under N concurrent clients on loopback.

Starts a real server (``veil serve --workers W`` on 127.0.0.1, a generated table, a SQLite
ledger in a temporary directory; see ``tests/service/server.py``), then drives it from this
process — a separate one — with ``--clients`` concurrent httpx clients (asyncio, one connection
each, kept alive) for ``--seconds`` per phase:

- ``healthz``  ``GET /healthz``: the baseline (routing, auth-free, no ledger);
- ``cached``   ``POST /v1/query`` with the same SQL each time: answered from the ledger's cache
               at no cost (the authenticated path, a session, the cache lookup);
- ``uncached`` ``POST /v1/query`` with a new SQL each time (a filter constant no request
               shared): a charge, a DuckDB scan of a 1000-row Parquet file, noise, a commit.

The phases run in turn for ``--rounds`` rounds, so the load of a shared machine hits them
alike; each phase's numbers are the medians over the rounds. Printed: req/s, p50, p99 per phase,
the ratios to ``/healthz`` and the targets (on 2 cores: cached ≥ 500 req/s with p99 < 50 ms, and
≥ 0.5× the ``/healthz`` rate), Little's law's floor on the mean latency (clients / rate: with
N closed-loop clients no p99 can be under N / rate), and the load average. ``--profile`` also
profiles the cached path in this process (the app over ASGI: the hot route, as a worker runs
it) and prints where its time goes.

    python benchmarks/bench_service.py [--clients 16,32] [--workers 2] [--seconds 5]
        [--rounds 3] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from service.server import Deployment, Server, serve

CACHED_SQL = "SELECT state, COUNT(*) AS n, AVG(income) AS a FROM people GROUP BY state"
ANALYST = "bench"

# a request: the method, the path and the JSON body (None for a GET), made per call
Request = Callable[[], tuple[str, str, bytes | None]]


def _body(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


_CACHED_BODY = _body({"dataset": "people", "sql": CACHED_SQL, "epsilon": "1"})


def _healthz() -> tuple[str, str, bytes | None]:
    return "GET", "/healthz", None


def _cached() -> tuple[str, str, bytes | None]:
    return "POST", "/v1/query", _CACHED_BODY


_fresh = itertools.count()


def _uncached() -> tuple[str, str, bytes | None]:
    sql = f"SELECT COUNT(*) AS n FROM people WHERE income >= {next(_fresh)}"
    return "POST", "/v1/query", _body({"dataset": "people", "sql": sql, "epsilon": "0.001"})


PHASES: dict[str, Request] = {"healthz": _healthz, "cached": _cached, "uncached": _uncached}


async def _drive(
    server: Server, key: str, request: Request, clients: int, seconds: float
) -> dict[str, float]:
    """``clients`` loops, each on its own kept-alive connection, sending ``request`` for
    ``seconds``; latencies of 200s only."""
    latencies: list[float] = []
    errors = 0
    stop = time.perf_counter() + seconds
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    async def loop() -> None:
        nonlocal errors
        connector = aiohttp.TCPConnector(limit=1)
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(
            server.base_url, connector=connector, headers=headers, timeout=timeout
        ) as client:
            while time.perf_counter() < stop:
                method, path, data = request()
                t0 = time.perf_counter()
                async with client.request(method, path, data=data) as r:
                    await r.read()
                    if r.status == 200:
                        latencies.append(time.perf_counter() - t0)
                    else:
                        errors += 1

    workers = server.worker_pids()
    cpu0, own0 = _cpu_seconds(workers), time.process_time()
    start = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(clients)))
    elapsed = time.perf_counter() - start
    cpu1, own1 = _cpu_seconds(workers), time.process_time()
    latencies.sort()
    n = len(latencies)
    done = max(1, n + errors)
    return {
        "server_ms": (cpu1 - cpu0) / done * 1000,
        "client_ms": (own1 - own0) / done * 1000,
        "rps": n / elapsed,
        "p50": latencies[n // 2] * 1000 if n else float("nan"),
        "p99": latencies[min(n - 1, int(n * 0.99))] * 1000 if n else float("nan"),
        "n": n,
        "errors": errors,
    }


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds the processes ``pids`` have used (Linux ``/proc``)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def _deployment(root: Path) -> Deployment:
    d = Deployment(root)
    d.service = {"rate_limit": 10_000_000, "query_timeout_s": 120}
    d.add_table("people", 1000, seed=5)
    d.write()
    d.add_key(ANALYST)
    d.grant(ANALYST, "people", 1_000_000)
    return d


def _profile(d: Deployment, key: str, seconds: float) -> None:
    """Where one cached query's time goes, in this process: the app driven over ASGI (httpx's
    in-process transport: no sockets, no second process), so the request takes the route a
    worker takes for it — the hot route, the full path only for the first — timed against
    ``/healthz`` on the same transport, then profiled."""
    import cProfile
    import pstats

    from veil.service.app import create_app
    from veil.service.config import ServiceConfig

    app = create_app(ServiceConfig.load(d.config))
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    async def run() -> None:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport, base_url="http://veil", headers=headers
            ) as client:

                async def one(request: Request) -> None:
                    method, path, data = request()
                    r = await client.request(method, path, content=data)
                    assert r.status_code == 200, r.text

                for _ in range(3):  # the first answer, then the kept one
                    await one(_cached)
                print("\nin process, over ASGI (median of 5 runs of 200 requests, ms/request):")
                for name, request in (("healthz", _healthz), ("cached query", _cached)):
                    times = []
                    for _ in range(5):
                        t0 = time.perf_counter()
                        for _ in range(200):
                            await one(request)
                        times.append((time.perf_counter() - t0) / 200)
                    print(f"  {name:<14} {statistics.median(times) * 1000:7.3f}")
                profiler = cProfile.Profile()
                n = 0
                stop = time.perf_counter() + seconds
                profiler.enable()
                while time.perf_counter() < stop:
                    await one(_cached)
                    n += 1
                profiler.disable()
                print(f"\nprofile of {n} cached queries (client and app, in process):")
                pstats.Stats(profiler).strip_dirs().sort_stats("cumulative").print_stats(35)

    asyncio.run(run())


def _counts(text: str) -> list[int]:
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"--clients {text!r}: give counts ≥ 1, e.g. 16,32")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=_counts, default=[16, 32])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="veil-bench-service-") as tmp:
        d = _deployment(Path(tmp))
        key = d.keys[ANALYST]
        load0 = os.getloadavg()
        results = {(n, p): [] for n in args.clients for p in PHASES}
        with serve(d.config, workers=args.workers) as server:
            # prime the cache and each worker's imports
            asyncio.run(_drive(server, key, _cached, 4, 1.0))
            asyncio.run(_drive(server, key, _uncached, 4, 1.0))
            for _ in range(args.rounds):
                for n in args.clients:
                    for name, request in PHASES.items():
                        r = asyncio.run(_drive(server, key, request, n, args.seconds))
                        results[(n, name)].append(r)
        load1 = os.getloadavg()
        print(f"veil service: {args.workers} workers, {args.rounds} rounds × {args.seconds:g} s "
              f"per phase, {os.cpu_count()} CPUs (client and server share them)")  # fmt: skip
        for n in args.clients:
            _report(n, {p: results[(n, p)] for p in PHASES})
        print(f"\nload average (1 min) before {load0[0]:.2f}, after {load1[0]:.2f}")
        if args.profile:
            _profile(d, key, args.seconds)


def _report(clients: int, results: dict[str, list[dict[str, float]]]) -> None:
    """The table of one client count: medians over the rounds, ratios, ceilings, targets."""
    print(f"\n{clients} concurrent clients")
    print(f"{'phase':<10} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'floor':>7} {'ok':>8} "
          f"{'errors':>7} {'server':>7} {'client':>7}   (medians over rounds; floor: Little's "
          "law's mean latency, clients / rate; CPU ms per request of the server's workers and of "
          "this client; req/s per round)")  # fmt: skip
    med: dict[str, dict[str, float]] = {}
    for name, rounds in results.items():
        med[name] = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
        m = med[name]
        per = ", ".join(f"{r['rps']:.0f}" for r in rounds)
        floor = clients / m["rps"] * 1000 if m["rps"] else float("nan")
        print(f"{name:<10} {m['rps']:>8.0f} {m['p50']:>8.1f} {m['p99']:>8.1f} {floor:>7.1f} "
              f"{sum(r['n'] for r in rounds):>8.0f} {sum(r['errors'] for r in rounds):>7.0f}"
              f" {m['server_ms']:>7.2f} {m['client_ms']:>7.2f}   [{per}]")  # fmt: skip
    base = med["healthz"]["rps"]
    cached, uncached = med["cached"], med["uncached"]
    print(f"ratios: cached / healthz = {cached['rps'] / base:.2f}, "
          f"uncached / healthz = {uncached['rps'] / base:.2f}")  # fmt: skip
    # what the two cores could serve if nothing else ran: requests per CPU-second of
    # server and client together (a load-independent reading of the same run)
    for name in ("healthz", "cached"):
        m = med[name]
        cap = os.cpu_count() or 1
        print(f"CPU-bound ceiling {name}: {cap * 1000 / (m['server_ms'] + m['client_ms']):.0f} "
              f"req/s ({m['server_ms']:.2f} ms server + {m['client_ms']:.2f} ms client "
              f"per request on {cap} CPUs)")  # fmt: skip
    ok = [
        (f"cached ≥ 500 req/s ({cached['rps']:.0f})", cached["rps"] >= 500),
        (f"cached p99 < 50 ms ({cached['p99']:.1f})", cached["p99"] < 50),
        (f"cached ≥ 0.5 × healthz ({cached['rps'] / base:.2f})", cached["rps"] >= 0.5 * base),
    ]
    print("targets: " + "; ".join(f"{what}: {'met' if hit else 'MISSED'}" for what, hit in ok))


if __name__ == "__main__":
    main()
