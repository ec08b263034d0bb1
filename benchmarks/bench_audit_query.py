"""Releases per second of ``veil audit query``: veil's release stage on the exact statistics of
one engine run (what the audit does) against the whole Session path per release (the
baseline: parse, compile, checks, reserve, lower, DuckDB, noise, post-processing, commit), in
one process, on the same grouped query; then the time of a whole audit.

The table: ``--rows`` rows (10 000 by default), ``g`` one of 20 groups, ``x`` uniform in
[0, 1000] (numpy's generator: benchmark data, not noise). The query:

    SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS m FROM t GROUP BY g   (ε = 1, δ = 1e-6)

    python benchmarks/bench_audit_query.py [--rows 10_000] [--releases 2000] [--baseline 200]
"""

from __future__ import annotations

import argparse
import time
from fractions import Fraction

import numpy as np
import pyarrow as pa

from veil.accounting.budget import Budget
from veil.accounting.scratch import ScratchLedger
from veil.audit.query import query
from veil.audit.query_runs import releases, run
from veil.session import Session

SQL = "SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS m FROM t GROUP BY g"
BOUNDS = {"x": (0, 1000)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--releases", type=int, default=2000)
    parser.add_argument("--baseline", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    table = pa.table({"g": rng.integers(0, 20, args.rows), "x": rng.uniform(0, 1000, args.rows)})

    found = run(
        {"t": table},
        SQL,
        salt=1,
        epsilon=Fraction(1),
        delta=Fraction(1, 10**6),
        options={"bounds": BOUNDS},
    )
    start = time.perf_counter()
    for _ in releases(found, args.releases):
        pass
    stage = args.releases / (time.perf_counter() - start)

    budget = Budget(epsilon=args.baseline + 1, delta=Fraction(args.baseline + 1, 10**6))
    with Session.local({"t": table}, ledger=ScratchLedger(), budget=budget) as session:
        start = time.perf_counter()
        for _ in range(args.baseline):
            session.sql(SQL, epsilon=1, delta=1e-6, bounds=BOUNDS)
        whole = args.baseline / (time.perf_counter() - start)

    start = time.perf_counter()
    audit = query(
        SQL, {"t": table}, epsilon=1, delta=1e-6, bounds=BOUNDS, releases_per_side=args.releases
    )
    seconds = time.perf_counter() - start
    print(f"release stage on exact statistics: {stage:,.0f} releases/s")
    print(f"whole Session path per release:    {whole:,.0f} releases/s (baseline)")
    print(f"ratio:                             {stage / whole:.1f}x")
    print(
        f"whole audit: {seconds:.1f} s for {len(audit.neighbours)} neighbours x "
        f"{args.releases} releases per side, {audit.tests} tests, verdict {audit.verdict}"
    )


if __name__ == "__main__":
    main()
