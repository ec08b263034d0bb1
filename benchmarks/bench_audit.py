"""Releases per second of ``veil audit mechanism``: a whole audit of 10⁶ releases per side of a
scalar veil mechanism (exact discrete noise from the OS CSPRNG, the split-sample bounds, the
grid check), against the time numpy's float Laplace sampler (PCG64, not private: the baseline)
takes just to draw the same number of values, in one process.

    python benchmarks/bench_audit.py [--samples 1_000_000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from veil.audit.mechanisms import builtin


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    args = parser.parse_args()
    n = args.samples
    rng = np.random.default_rng()
    start = time.perf_counter()
    rng.laplace(0.0, 1.0, 2 * n)
    numpy_rate = 2 * n / (time.perf_counter() - start)
    print(f"numpy float laplace, draws only: {numpy_rate:,.0f} values/s")
    for name, delta in (("discrete_laplace", 0.0), ("laplace", 0.0), ("gaussian", 1e-6)):
        start = time.perf_counter()
        audit = builtin(name, epsilon=1.0, delta=delta, samples=n)
        took = time.perf_counter() - start
        rate = 2 * n / took
        print(
            f"veil audit mechanism {name}: {2 * n:,} releases in {took:.2f} s = {rate:,.0f}/s "
            f"(ratio to numpy's draws {rate / numpy_rate:.3f}); verdict {audit.verdict}"
        )


if __name__ == "__main__":
    main()
