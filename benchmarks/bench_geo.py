"""Location data: veil's exact geo-indistinguishable points and region choice against the
first seed's float planar noise, in the same process.

Run: ``python benchmarks/bench_geo.py [--n 1000000] [--regions 100] [--repeat 3]``. Prints
points/second for ``veil.perturb(locations=...)`` on an Arrow table (projection, snapping,
exact planar Laplace, clamping, back to degrees) and for the region choice, with the ratio to
numpy's insecure baseline timed alternately with each: the seed's independent float Laplace
on latitude and longitude (``rng.laplace``), and numpy's ``rng.choice`` over the exponential
weights (floats, not private). Also the mean distance between true and released points at
ε = 1 per km: veil's planar Laplace against the seed's per-axis Laplace calibrated to the same
guarantee (an L1 guarantee: scale √2/ε per axis gives e^{ε·d} in Euclidean distance).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from fractions import Fraction

import numpy as np
import pyarrow as pa

import veil
from veil.noise.planar import planar_laplace

BOX = (48.80, 2.25, 48.92, 2.45)
KM_PER_DEGREE = 6371.0088 * math.pi / 180


def paired(
    job: Callable[[], object], base: Callable[[], object], repeat: int
) -> tuple[float, float]:
    best_job = best_base = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        base()
        best_base = min(best_base, time.perf_counter() - start)
        start = time.perf_counter()
        job()
        best_job = min(best_job, time.perf_counter() - start)
    return best_job, best_base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--regions", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n = args.n
    data = np.random.default_rng(1)  # synthetic points; numpy is also the insecure baseline
    lat, lon = data.uniform(48.83, 48.89, n), data.uniform(2.29, 2.41, n)
    table = pa.table({"lat": lat, "lon": lon})
    cos = math.cos(math.radians(48.86))

    def veil_points() -> object:
        return veil.perturb(table, locations={"home": ("lat", "lon")}, epsilon=1, box=BOX)

    def numpy_points() -> object:  # the seed: float Laplace per axis, in degrees
        scale = 1.0 / KM_PER_DEGREE
        return lat + data.laplace(0, scale, n), lon + data.laplace(0, scale / cos, n)

    t_veil, t_np = paired(veil_points, numpy_points, args.repeat)
    print(f"points:  veil {n / t_veil:,.0f}/s   numpy float Laplace {n / t_np:,.0f}/s   "
          f"ratio {t_np / t_veil:.3f}")  # fmt: skip

    # accuracy of the noise alone (no clamping to the box): 1 m grid, ε = 1 per km
    dx, dy = planar_laplace(Fraction(1, 1000), n)
    d_veil = float(np.hypot(dx, dy).mean()) / 1000
    same = math.sqrt(2)  # per-axis Laplace of scale √2/ε: the same e^{ε·d} guarantee
    d_axis = float(np.hypot(data.laplace(0, same, n), data.laplace(0, same, n)).mean())
    print(f"mean error at ε = 1/km: veil planar {d_veil:.3f} km, per-axis Laplace with the "
          f"same guarantee {d_axis:.3f} km, ratio {d_veil / d_axis:.3f}")  # fmt: skip

    m = min(n, 100_000)
    k = args.regions
    side = math.isqrt(k) or 1
    regions = {f"r{i}": (48.80 + 0.12 * (i // side) / side, 2.25 + 0.2 * (i % side) / side)
               for i in range(k)}  # fmt: skip
    small = table.slice(0, m)

    def veil_regions() -> object:
        return veil.perturb(small, locations={"home": ("lat", "lon")},
                            regions={"home": regions}, epsilon=1, box=BOX)  # fmt: skip

    centres = np.array(list(regions.values()))

    def numpy_regions() -> object:
        d = np.hypot((centres[None, :, 0] - lat[:m, None]) * KM_PER_DEGREE,
                     (centres[None, :, 1] - lon[:m, None]) * KM_PER_DEGREE * cos)  # fmt: skip
        w = np.exp(-(d - d.min(axis=1, keepdims=True)) / 2)
        c = np.cumsum(w, axis=1)
        return (data.random(m)[:, None] * c[:, -1:] < c).argmax(axis=1)

    t_veil, t_np = paired(veil_regions, numpy_regions, args.repeat)
    print(f"regions ({k}):  veil {m / t_veil:,.0f}/s   numpy float weights {m / t_np:,.0f}/s   "
          f"ratio {t_np / t_veil:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
