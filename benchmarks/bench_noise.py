"""Throughput of veil's exact CSPRNG-backed samplers against numpy's insecure Laplace.

Run: ``python benchmarks/bench_noise.py [--n 10000000] [--repeat 3]``. Prints samples/second
for each sampler (best of ``--repeat`` runs) and the ratio to ``numpy.random.Generator.laplace``
measured in the same process. OpenDP / diffprivlib are timed on a smaller batch when
importable (they are not dependencies of veil).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

import veil.mechanisms as mech
from veil import noise

Job = Callable[[int], object]


def best_rate(job: Job, n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        job(n)
        best = min(best, time.perf_counter() - start)
    return n / best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n, repeat = args.n, args.repeat

    rng = np.random.default_rng()  # the insecure baseline, for comparison only
    base = best_rate(lambda k: rng.laplace(0.0, 10.0, k), n, repeat)
    zeros = np.zeros(n)
    jobs: dict[str, Job] = {
        "discrete_laplace scale=10": lambda k: noise.discrete_laplace(10, k),
        "discrete_laplace scale=1000": lambda k: noise.discrete_laplace(1000, k),
        "discrete_laplace scale=1e12": lambda k: noise.discrete_laplace(10**12, k),
        "grid laplace (mechanism, eps=0.1)": lambda k: mech.laplace(
            zeros[:k], sensitivity=1, epsilon=Fraction(1, 10 * k)
        ),
        "discrete_gaussian sigma2=100": lambda k: noise.discrete_gaussian(100, k),
        "discrete_gaussian sigma2=1e6": lambda k: noise.discrete_gaussian(10**6, k),
        "geometric scale=10": lambda k: noise.geometric(10, k),
        "bernoulli p=1/3": lambda k: noise.bernoulli(Fraction(1, 3), k),
        "bernoulli_exp gamma=1/2": lambda k: noise.bernoulli_exp(Fraction(1, 2), k),
        "uniform_int bound=1000": lambda k: noise.uniform_int(1000, k),
    }
    print(f"numpy Generator.laplace (insecure, float): {base / 1e6:8.2f} M/s  (n={n:,})")
    for name, job in jobs.items():
        rate = best_rate(job, n, repeat)
        print(f"{name:38s} {rate / 1e6:8.2f} M/s   ratio to numpy {rate / base:6.3f}")

    try:
        import opendp.prelude as dp

        dp.enable_features("contrib")
        small = 100_000
        meas = dp.m.make_laplace(
            dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=10.0
        )
        rate = best_rate(lambda k: meas([0] * k), small, 1)
        print(f"{'opendp discrete laplace':38s} {rate / 1e6:8.2f} M/s   ratio {rate / base:6.3f}")
    except ImportError:
        print("opendp: not installed (skipped)")
    try:
        from diffprivlib.mechanisms import Laplace

        small = 100_000
        m = Laplace(epsilon=0.1, sensitivity=1.0)
        rate = best_rate(lambda k: [m.randomise(0.0) for _ in range(k)], small, 1)
        print(f"{'diffprivlib Laplace':38s} {rate / 1e6:8.2f} M/s   ratio {rate / base:6.3f}")
    except ImportError:
        print("diffprivlib: not installed (skipped)")


if __name__ == "__main__":
    main()
