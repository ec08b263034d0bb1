"""Time of the error bars of 500 groups against the time of the query itself, in one process.

The query, on a table of ``--rows`` rows (1 M by default; ``user_id`` one row per user, ``g``
one of 500 groups, ``x`` uniform in [0, 1000]) written by DuckDB to the temp directory:

    SELECT g, COUNT(*), SUM(x), AVG(x), VARIANCE(x), STDDEV(x) FROM t GROUP BY g

with x in [0, 1000], the 500 keys public (``--keys public``, pure ε) or unknown (``--keys
unknown``: partition selection, δ = 1e-6), discrete Laplace (ε = 1) or Gaussian (``--rho``).
Each round runs, in a rotating order: the query (a fresh session and in-memory ledger, so no
cached answer), then on that result ``Result.error_bars()`` as wired today (``bars``) and the
batch functions of ``veil.noise.errorbars`` and ``veil.noise.aggregate_bars`` called once per
column as the per-aggregate code will call them (``batch``). The caches of the error-bar code
are emptied before each timed call, so every timing is cold. Printed: the medians over
``--rounds`` rounds with their minimum and maximum, and the ratios to the query's median with
the range of the per-round ratios.

    python benchmarks/bench_errorbars.py [--rows 1_000_000] [--rounds 7] [--keys public]
        [--rho 0]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

GROUPS = 500
QUERY = (
    "SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a, VARIANCE(x) AS v, STDDEV(x) AS sd "
    "FROM t GROUP BY g"
)


def ensure_table(rows: int) -> Path:
    path = Path(tempfile.gettempdir()) / "veil-bench" / f"groups-{rows}.parquet"
    if path.exists():
        return path
    import duckdb

    path.parent.mkdir(parents=True, exist_ok=True)
    duckdb.sql(
        f"COPY (SELECT i AS user_id, 'g' || (hash(i) % {GROUPS})::VARCHAR AS g, "
        f"(hash(i * 7 + 1) % 100000)::DOUBLE / 100.0 AS x FROM range({rows}) t(i)) "
        f"TO '{path}' (FORMAT parquet)"
    )
    return path


def clear_caches() -> None:
    from veil.noise import aggregate_bars, errorbars

    aggregate_bars._AVG_TABLES.clear()
    errorbars._BATCHES.clear()
    errorbars._cached_halfwidth.cache_clear()
    errorbars._combination.cache_clear()


def batch_bars(result: Any, level: float = 0.95) -> dict[str, np.ndarray]:
    """Every column's bars by the batch functions, one call per column (the wiring the
    per-aggregate code is to adopt; the VARIANCE coefficients as ``aggregates/variance.py``)."""
    from veil.noise import aggregate_bars as ab
    from veil.noise import errorbars as eb

    stats = result.stats
    out: dict[str, np.ndarray] = {}
    for alias, col in result.models.items():
        f = col.function
        if f == "count":
            out[alias] = np.full(len(stats), result.noise[col.count].halfwidth(level))
            continue
        sm, cm = result.noise[col.sum], result.noise[col.count]
        step = float(sm.step)
        raw = np.array([s[col.count] for s in stats], dtype=np.float64)
        sums = np.array([s[col.sum] for s in stats], dtype=np.float64)
        if f == "sum":
            terms = [sm.term(step), cm.term(float(sm.centre))]
            out[alias] = np.full(len(stats), eb.combination_halfwidth(terms, level))
        elif f == "avg":
            out[alias] = ab.avg_halfwidths(
                sm,
                cm,
                step=step,
                centre=float(sm.centre),
                lower=float(col.lower),
                upper=float(col.upper),
                counts=raw,
                sums=sums,
                level=level,
            )
        else:
            qm = result.noise[col.squares]
            n = np.maximum(raw, 2.0)
            d = n - 1
            s = step * sums
            width = float(qm.step) * qm.limit
            unit = width * width / (2 * qm.limit)
            q = unit * (
                np.array([st[col.squares] for st in stats], dtype=np.float64) + qm.limit * raw
            )
            top = (float(col.upper) - float(col.lower)) ** 2 / 4 * n / d
            v = np.clip((q - s * s / n) / d, 0.0, top)
            hv = ab.variance_halfwidths(
                qm,
                sm,
                cm,
                a_q=unit / d,
                a_s=-2 * s / (n * d) * step,
                a_n=(width * width / 2 + s * s / (n * n) - v) / d,
                second=step * step / (n * d),
                level=level,
            )
            out[alias] = hv if f == "variance" else ab.stddev_halfwidths(v, hv)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=lambda s: int(s.replace("_", "")), default=1_000_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--keys", choices=["public", "unknown"], default="public")
    parser.add_argument("--rho", type=float, default=0.0, help="zCDP ρ (Gaussian noise)")
    args = parser.parse_args()
    import duckdb

    import veil

    logging.getLogger("veil").setLevel(logging.ERROR)
    path = ensure_table(args.rows)
    con = duckdb.connect()
    options: dict[str, Any] = {"bounds": {"x": (0, 1000)}}
    options["epsilon"] = veil.Budget(rho=args.rho) if args.rho else 1.0
    if args.keys == "public":
        options["domains"] = {"g": [f"g{i}" for i in range(GROUPS)]}
    else:
        options["delta"] = 1e-6
    grant = veil.Budget(rho=10 * args.rho) if args.rho else veil.Budget(epsilon=10, delta=1e-5)

    def query() -> Any:
        session = veil.Session.local(
            tables={"t": str(path)},
            connection=con,
            privacy_unit="user_id",
            budget=grant,
            analyst="bench",
            ledger="sqlite://",
        )
        return session.sql(QUERY, **options)

    result = query()  # warm: imports, first scan
    result.error_bars()
    batch_bars(result)
    times: dict[str, list[float]] = {"query": [], "bars": [], "batch": []}

    def timed(name: str, run: Callable[[], Any]) -> Any:
        clear_caches()
        start = time.perf_counter()
        out = run()
        times[name].append(time.perf_counter() - start)
        return out

    for r in range(args.rounds):
        result = timed("query", query)
        order: list[tuple[str, Callable[[], Any]]] = [
            ("bars", result.error_bars),
            ("batch", lambda res=result: batch_bars(res)),
        ]
        for name, run in order[r % 2 :] + order[: r % 2]:
            timed(name, run)
    groups = len(result)
    med = {k: statistics.median(v) for k, v in times.items()}
    noise = "Gaussian" if args.rho else "Laplace"
    print(f"{args.rows:,} rows, {groups} groups ({args.keys} keys), {noise}; {args.rounds} rounds")
    for name in ("query", "bars", "batch"):
        spread = f"(min {min(times[name]) * 1000:7.1f}, max {max(times[name]) * 1000:7.1f})"
        ratio = ""
        if name != "query":  # the ratio of the medians, and its spread over the rounds
            per = [x / q for x, q in zip(times[name], times["query"], strict=True)]
            ratio = (
                f"  {med[name] / med['query']:6.1%} of the query ({min(per):.1%}–{max(per):.1%})"
            )
        print(f"  {name:6s} median {med[name] * 1000:8.1f} ms {spread}{ratio}")


if __name__ == "__main__":
    main()
