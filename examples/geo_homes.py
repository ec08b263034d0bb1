"""The first seed's scenario, done right: protect home locations before analysis.

Thirty synthetic homes in Paris (no real person's data) are released geo-indistinguishably at
ε = 1 per km with veil.perturb; the picture shows each true home, its released point and the
95 % error radius. Run: python examples/geo_homes.py [OUT.png] (needs veil[plot]).
"""

from __future__ import annotations

import sys

import numpy as np
import pyarrow as pa

import veil
from veil.local import geo

BOX = (48.80, 2.25, 48.92, 2.45)  # south, west, north, east


def main(out: str = "geo-homes.png") -> None:
    grid = np.random.default_rng(2013)  # synthetic homes only: no noise is drawn from it
    homes = pa.table({"lat": grid.uniform(48.83, 48.89, 30), "lon": grid.uniform(2.29, 2.41, 30)})
    print(geo.explain(("lat", "lon"), epsilon=1, box=BOX, label="home"))
    released = veil.perturb(homes, locations={"home": ("lat", "lon")}, epsilon=1, box=BOX)
    print(released)
    loc = released.columns[0].location
    if loc is None:
        raise SystemExit("the release has no location")
    path = geo.plot_locations(
        (homes["lat"].to_numpy(), homes["lon"].to_numpy()),
        (released.data["lat"].to_numpy(), released.data["lon"].to_numpy()),
        loc,
        out,
        title="30 homes in Paris, released at ε = 1 per km",
    )
    print(f"picture: {path}")


if __name__ == "__main__":
    main(*sys.argv[1:2])
