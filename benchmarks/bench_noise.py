"""Throughput of veil's exact CSPRNG-backed samplers against numpy's insecure Laplace.

Run: ``python benchmarks/bench_noise.py [--n 10000000] [--repeat 3]``. Prints samples/second
for each sampler (best of ``--repeat`` runs) and the ratio to
``numpy.random.Generator.laplace`` timed alternately with it in the same process (so both see
the same load on a shared box), by wall time and by CPU time, and writes them to
``benchmarks/results/noise.json`` with the load average. OpenDP / diffprivlib are timed on a
smaller batch when importable (they are not dependencies).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np

import _results
import veil.mechanisms as mech
from veil import noise
from veil.noise.grid import from_grid, grid_exponent, to_grid

Job = Callable[[int], object]


def best_rate(job: Job, n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        job(n)
        best = min(best, time.perf_counter() - start)
    return n / best


def paired_rates(job: Job, baseline: Job, n: int, repeat: int) -> tuple[float, float, float, float]:
    """Best-of-``repeat`` rates of ``job`` and ``baseline``, timed alternately so that both
    see the same load on a shared machine: by wall time, then by this process's CPU time (which
    another process's load moves less)."""
    walls = [float("inf"), float("inf")]
    cpus = [float("inf"), float("inf")]
    for _ in range(repeat):
        for i, run in ((1, baseline), (0, job)):
            wall, cpu = time.perf_counter(), time.process_time()
            run(n)
            walls[i] = min(walls[i], time.perf_counter() - wall)
            cpus[i] = min(cpus[i], time.process_time() - cpu)
    return n / walls[0], n / walls[1], n / cpus[0], n / cpus[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n, repeat = args.n, args.repeat
    run = _results.Run("noise")
    run.add("n", n)
    run.add("repeat", repeat)
    figures: dict[str, dict[str, float]] = {}
    run.add("samplers", figures)

    rng = np.random.default_rng()  # the insecure baseline, for comparison only

    def numpy_laplace(m: int) -> object:
        return rng.laplace(0.0, 10.0, m)

    base = best_rate(numpy_laplace, n, repeat)
    values = rng.normal(1000.0, 100.0, n)  # the data being perturbed (its values do not matter)
    # grid Laplace per value, as veil.perturb runs it: Δ = 1, ε = 0.5 → k and the scale in steps
    eps, sens = Fraction(1, 2), Fraction(1)
    k = grid_exponent(min(sens, sens / eps))
    steps = (sens / Fraction(2) ** k + 1) / eps

    def grid_laplace(m: int) -> object:
        return from_grid(to_grid(values[:m], k) + noise.discrete_laplace(steps, m), k)

    jobs: dict[str, Job] = {
        "discrete_laplace scale=10": lambda m: noise.discrete_laplace(10, m),
        "discrete_laplace scale=1000": lambda m: noise.discrete_laplace(1000, m),
        "discrete_laplace scale=1e12": lambda m: noise.discrete_laplace(10**12, m),
        f"grid laplace per value (2^{k}, {float(steps):.0f} steps)": grid_laplace,
        "laplace mechanism on a 10M vector (L1)": lambda m: mech.laplace(
            values[:m], sensitivity=1, epsilon=1
        ),
        "discrete_gaussian sigma2=100": lambda m: noise.discrete_gaussian(100, m),
        "discrete_gaussian sigma2=1e6": lambda m: noise.discrete_gaussian(10**6, m),
        "discrete_gaussian sigma2=1e20": lambda m: noise.discrete_gaussian(10**20, m),
        "geometric scale=10": lambda m: noise.geometric(10, m),
        "bernoulli p=1/3": lambda m: noise.bernoulli(Fraction(1, 3), m),
        "bernoulli_exp gamma=1/2": lambda m: noise.bernoulli_exp(Fraction(1, 2), m),
        "uniform_int bound=1000": lambda m: noise.uniform_int(1000, m),
    }
    print(f"numpy Generator.laplace (insecure, float): {base / 1e6:8.2f} M/s  (n={n:,})")
    for name, job in jobs.items():
        job(1000)  # build (and cache) the sampler's tables outside the timing
        job(n)
        rate, base_now, cpu_rate, cpu_base = paired_rates(job, numpy_laplace, n, repeat)
        print(
            f"{name:44s} {rate / 1e6:8.2f} M/s   numpy {base_now / 1e6:6.2f} M/s   "
            f"ratio {rate / base_now:6.3f}   by CPU {cpu_rate / cpu_base:6.3f}"
        )
        figures[name] = {"veil_M_per_s": round(rate / 1e6, 3),
                         "numpy_M_per_s": round(base_now / 1e6, 3),
                         "ratio": round(rate / base_now, 3),
                         "ratio_by_cpu": round(cpu_rate / cpu_base, 3)}  # fmt: skip

    try:
        import opendp.prelude as dp

        dp.enable_features("contrib")
        small = 100_000
        meas = dp.m.make_laplace(
            dp.vector_domain(dp.atom_domain(T=int)), dp.l1_distance(T=int), scale=10.0
        )
        rate = best_rate(lambda k: meas([0] * k), small, 1)
        print(f"{'opendp discrete laplace':44s} {rate / 1e6:8.2f} M/s   ratio {rate / base:6.3f}")
    except ImportError:
        print("opendp: not installed (skipped)")
    try:
        from diffprivlib.mechanisms import Laplace

        small = 100_000
        m = Laplace(epsilon=0.1, sensitivity=1.0)
        rate = best_rate(lambda k: [m.randomise(0.0) for _ in range(k)], small, 1)
        print(f"{'diffprivlib Laplace':44s} {rate / 1e6:8.2f} M/s   ratio {rate / base:6.3f}")
    except ImportError:
        print("diffprivlib: not installed (skipped)")
    run.write()


if __name__ == "__main__":
    main()
