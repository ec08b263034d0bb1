"""Location data: geo-indistinguishable points and a private choice of region, per record.

Used by :func:`veil.perturb` (``locations=``, ``regions=``); the privacy model is local, record
by record, as for every perturbed column (see :mod:`veil.local.perturb`).

**The plane.** Points are projected to a local metric plane: an equirectangular projection about
the centre ``(φ0, λ0)`` of the declared bounding box, ``x = R·k·(λ − λ0)``, ``y = R·(φ − φ0)``
(radians; ``R`` = 6371.0088 km, the IUGG mean radius, in the chosen unit), with the east–west
factor ``k = cos φm``, where ``φm = atan(tan φfar / cos(Δλ/2))`` bounds the latitude any
great-circle arc between two points of the box reaches (``φfar`` the box's largest absolute
latitude, ``Δλ`` its width). On the sphere ``ds² = R²(dφ² + cos²φ dλ²) ≥ R²(dφ² + k² dλ²)``
along such an arc, so **the plane never lengthens a distance**: ``d_plane(p, p') ≤ d(p, p')``,
the great-circle distance, for any two points of the box. A guarantee stated in plane distance
therefore holds in true distance on the sphere (the ellipsoid's ground distances differ from
the sphere's by at most 0.56 %). The price is the distortion: east–west, the plane shrinks
distances by up to ``1 − k / cos φnear`` (``φnear`` the box's smallest absolute latitude), so the
noise is up to that much larger east–west than the guarantee needs. Boxes are limited to 10° of
latitude and of longitude, within ±80° of latitude, not across the antimeridian.

**Noisy points** (:func:`perturb_points`). A point is moved into the box (latitude and
longitude clamped), projected, and snapped to the nearest node of a square grid of side
``step`` (a deterministic map that moves it by at most ``step/√2``); exact planar Laplace noise
:func:`veil.noise.planar.planar_laplace` with ``c = ε·step`` is added, the result clamped to the
box's nodes (post-processing) and mapped back to degrees. For two true points ``p, p'`` of the
box, every output ``o``: ``P(o | p) ≤ exp(ε·(d(p, p') + 2·step))·P(o | p')``
(geo-indistinguishability, Andrés et al. 2013, with the snapping slack ``√2·step ≤ 2·step``).
Between any two records the loss is at most ``ε·(D + 2·step)``, ``D`` the box's diameter in the
plane: that is the ε charged to the ledger, per location column.

**A private region** (:func:`choose_regions`). Given candidate regions by their centroids, each
record gets the region drawn by the exponential mechanism with utility ``−⌊d_plane(p, r)/q⌋``
(``q = step``) and weights ``exp(−(ε·q/2)·⌊d/q⌋)``: moving ``p`` to ``p'`` changes each utility
by at most ``d(p, p')/q + 1``, so the choice is ``e^{ε·(d(p, p') + q)}``-indistinguishable, and
between any two records of the box loses at most ``ε·(D + q)`` (charged). Centroids may lie
outside the box; polygons are not supported (give their centroids).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from veil.errors import InvalidArgumentError
from veil.noise._exact import LazyUniform, draw_u32, exp_bounds, uniform_int
from veil.noise.planar import MAX_STEP_EPSILON, MIN_STEP_EPSILON, planar_laplace
from veil.random import RandomSource

__all__ = [
    "EARTH_RADIUS_KM",
    "UNITS",
    "Box",
    "GeoExplanation",
    "Location",
    "choose_regions",
    "error_radius",
    "explain",
    "perturb_points",
    "plot_locations",
]

EARTH_RADIUS_KM = 6371.0088
UNITS = {"km": 1.0, "m": 1000.0, "mi": 1 / 1.609344}
"""Units of distance: how many of them make a kilometre."""
MAX_SPAN_DEGREES = 10.0
MAX_LATITUDE = 80.0
_LATTICE_WINDOW = 4_000_000  # nodes enumerated for an exact error radius (else the continuum)


@dataclass(frozen=True)
class Box:
    """A bounding box ``(south, west, north, east)`` in degrees and its metric plane."""

    south: float
    west: float
    north: float
    east: float

    @staticmethod
    def parse(box: Any) -> Box:
        """A box from ``(south, west, north, east)``, refused with the fix when it is not one
        veil can project (module docstring)."""
        try:
            s, w, n, e = (float(v) for v in box)
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"box must be four numbers (south, west, north, east) in degrees, got {box!r}; "
                "e.g. box=(48.80, 2.25, 48.92, 2.42) for Paris"
            ) from None
        if not all(math.isfinite(v) for v in (s, w, n, e)):
            raise InvalidArgumentError(f"box {box!r} must be finite degrees")
        if not -MAX_LATITUDE <= s < n <= MAX_LATITUDE:
            raise InvalidArgumentError(
                f"box {box!r}: need -80 ≤ south < north ≤ 80 (degrees of latitude)"
            )
        if not -180 <= w < e <= 180:
            raise InvalidArgumentError(
                f"box {box!r}: need -180 ≤ west < east ≤ 180 (a box may not cross the "
                "antimeridian: split it in two)"
            )
        if n - s > MAX_SPAN_DEGREES or e - w > MAX_SPAN_DEGREES:
            raise InvalidArgumentError(
                f"box {box!r} spans {n - s:g}° × {e - w:g}°; at most 10° × 10° (one local "
                "plane keeps distances honest only over a region): split the data by region"
            )
        return Box(s, w, n, e)

    @property
    def far(self) -> float:
        """The largest latitude (absolute, radians) a great-circle arc inside the box reaches."""
        top = math.radians(max(abs(self.south), abs(self.north)))
        half = math.radians(self.east - self.west) / 2
        return math.atan(math.tan(top) / math.cos(half))

    @property
    def east_west_factor(self) -> float:
        """``k = cos φm``: the plane's east–west scale (module docstring)."""
        return math.cos(self.far)

    @property
    def distortion(self) -> float:
        """The largest share by which the plane shrinks an east–west distance in the box."""
        near = 0.0 if self.south <= 0 <= self.north else min(abs(self.south), abs(self.north))
        return 1 - self.east_west_factor / math.cos(math.radians(near))

    def plane(
        self, lat: NDArray[np.float64], lon: NDArray[np.float64], unit: str
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Plane coordinates (in ``unit``) of points, about the box's centre."""
        radius = EARTH_RADIUS_KM * UNITS[unit]
        lat0, lon0 = (self.south + self.north) / 2, (self.west + self.east) / 2
        x = radius * self.east_west_factor * np.radians(lon - lon0)
        y = radius * np.radians(lat - lat0)
        return x, y

    def degrees(
        self, x: NDArray[np.float64], y: NDArray[np.float64], unit: str
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The inverse of :meth:`plane`."""
        radius = EARTH_RADIUS_KM * UNITS[unit]
        lat0, lon0 = (self.south + self.north) / 2, (self.west + self.east) / 2
        lat = lat0 + np.degrees(y / radius)
        lon = lon0 + np.degrees(x / (radius * self.east_west_factor))
        return lat, lon

    def nodes(self, step: float, unit: str) -> tuple[int, int, int, int]:
        """The grid indices inside the box: ``(i_min, i_max, j_min, j_max)``."""
        x, y = self.plane(
            np.array([self.south, self.north]), np.array([self.west, self.east]), unit
        )
        return (
            math.ceil(x[0] / step), math.floor(x[1] / step),
            math.ceil(y[0] / step), math.floor(y[1] / step),
        )  # fmt: skip

    def diameter(self, unit: str) -> float:
        """The diagonal of the box's rectangle in the plane (the largest plane distance)."""
        x, y = self.plane(
            np.array([self.south, self.north]), np.array([self.west, self.east]), unit
        )
        return math.hypot(float(x[1] - x[0]), float(y[1] - y[0]))


@dataclass(frozen=True)
class Location:
    """One location to perturb: its label, its latitude and longitude columns, ε per unit of
    distance, the box, the unit, the grid step; with ``regions``, the released value is the id
    of a region (centroids as ``(id, lat, lon)``) instead of a point."""

    label: str
    lat: str
    lon: str
    epsilon: Fraction
    box: Box
    unit: str
    step: Fraction
    regions: tuple[tuple[Any, float, float], ...] = field(default=())

    @property
    def loss(self) -> Fraction:
        """The ε between any two records of the box (module docstring), charged per record."""
        slack = self.step if self.regions else 2 * self.step
        # the float diameter, rounded up to whole units (never below the true one)
        diameter = Fraction(math.ceil(self.box.diameter(self.unit) * (1 + 1e-9)))
        return self.epsilon * (diameter + slack)

    @property
    def step_epsilon(self) -> Fraction:
        return self.epsilon * self.step

    def describe(self) -> str:
        eps = f"ε = {float(self.epsilon):g} per {self.unit}"
        if self.regions:
            return (
                f"{self.label} ({self.lat}, {self.lon}): a region of {len(self.regions)} by "
                f"the exponential mechanism, {eps} (+{float(self.step):g} {self.unit})"
            )
        return (
            f"{self.label} ({self.lat}, {self.lon}): planar Laplace, {eps}, grid "
            f"{float(self.step):g} {self.unit}, 95 % of points within "
            f"{error_radius(self, 0.95):.3g} {self.unit} of the truth; box distortion "
            f"{self.box.distortion:.2%}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "columns": [self.lat, self.lon],
            "epsilon_per_unit": str(self.epsilon),
            "unit": self.unit,
            "step": str(self.step),
            "box": [self.box.south, self.box.west, self.box.north, self.box.east],
            "regions": [str(r[0]) for r in self.regions],
            "loss_between_any_two_records": str(self.loss),
        }


def location(
    label: str,
    columns: Any,
    *,
    epsilon: Fraction,
    box: Any,
    unit: str,
    step: Any,
    regions: Any = None,
) -> Location:
    """A checked :class:`Location` (refused with the fix, before anything is charged)."""
    if unit not in UNITS:
        raise InvalidArgumentError(f"unit={unit!r} is not one of {', '.join(UNITS)}")
    try:
        lat, lon = (str(c) for c in columns)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"locations[{label!r}] must name two columns (latitude, longitude), got {columns!r}"
        ) from None
    parsed = Box.parse(box)
    metre = Fraction(UNITS[unit]).limit_denominator(1 << 20) / 1000  # 1 m in this unit
    try:
        s = metre if step is None else Fraction(step)
    except (TypeError, ValueError, OverflowError):
        raise InvalidArgumentError(f"step={step!r} must be a positive distance in {unit}") from None
    if s <= 0:
        raise InvalidArgumentError(f"step={step!r} must be a positive distance in {unit}")
    if not MIN_STEP_EPSILON <= epsilon * s <= MAX_STEP_EPSILON:
        raise InvalidArgumentError(
            f"ε·step = {float(epsilon * s):.3g} is outside [2^-40, 2^10]: choose step= between "
            f"{float(MIN_STEP_EPSILON / epsilon):.3g} and {float(MAX_STEP_EPSILON / epsilon):.3g}"
            f" {unit}"
        )
    cands: tuple[tuple[Any, float, float], ...] = ()
    if regions is not None:
        items = regions.items() if isinstance(regions, Mapping) else None
        if items is None:
            raise InvalidArgumentError(
                f"regions[{label!r}] must map region id → (lat, lon) centroid, got {regions!r}"
            )
        out = []
        for rid, point in items:
            try:
                rlat, rlon = (float(v) for v in point)
            except (TypeError, ValueError):
                raise InvalidArgumentError(
                    f"region {rid!r}: its centroid must be (lat, lon) in degrees, got {point!r}"
                ) from None
            if not (-90 <= rlat <= 90 and -180 <= rlon <= 180):
                raise InvalidArgumentError(f"region {rid!r}: ({rlat}, {rlon}) is not on Earth")
            out.append((rid, rlat, rlon))
        if len(out) < 2:
            raise InvalidArgumentError(f"regions[{label!r}] needs at least two regions")
        cands = tuple(out)
    return Location(label, lat, lon, epsilon, parsed, unit, s, cands)


def _inside(loc: Location, lat: NDArray[np.float64], lon: NDArray[np.float64]) -> Any:
    """Points moved into the box (NaN, a missing value, becomes the box's centre)."""
    b = loc.box
    lat = np.where(np.isnan(lat), (b.south + b.north) / 2, lat)
    lon = np.where(np.isnan(lon), (b.west + b.east) / 2, lon)
    return np.clip(lat, b.south, b.north), np.clip(lon, b.west, b.east)


def perturb_points(
    loc: Location, lat: NDArray[np.float64], lon: NDArray[np.float64], source: RandomSource
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Each point's geo-indistinguishable release (module docstring): always on the grid,
    always inside the box, for every input (a missing coordinate is the box's centre)."""
    lat, lon = _inside(loc, lat, lon)
    step = float(loc.step)
    x, y = loc.box.plane(lat, lon, loc.unit)
    i_min, i_max, j_min, j_max = loc.box.nodes(step, loc.unit)
    i = np.clip(np.rint(x / step), i_min, i_max).astype(np.int64)
    j = np.clip(np.rint(y / step), j_min, j_max).astype(np.int64)
    dx, dy = planar_laplace(loc.step_epsilon, len(i), source=source)
    i = np.clip(i + dx, i_min, i_max)
    j = np.clip(j + dy, j_min, j_max)
    return loc.box.degrees(i.astype(np.float64) * step, j.astype(np.float64) * step, loc.unit)


_CELLS = 1 << 22  # distances held at once (records × regions) when choosing regions
_MARGIN = 2.0**-24  # a float acceptance is trusted only this far from the word (noise.planar)


def _exponential_rows(
    excess: NDArray[np.int64], g0: Fraction, source: RandomSource
) -> NDArray[np.int64]:
    """Per row, an index ``r`` with probability ∝ ``exp(-g0·excess[row, r])`` (``excess ≥ 0``,
    0 somewhere in each row), exactly: a uniformly proposed ``r`` is accepted with an exact
    Bernoulli(``exp(-g0·excess)``) — decided by a float estimate only when the 32-bit word is
    at least ``2^-24`` away from it (the estimate's error is below ``2^-30`` where ``g0·excess ≤
    2^20``, as in :mod:`veil.noise.planar`), else on integer brackets — so an accepted ``r`` has
    probability ∝ ``exp(-g0·excess_r)``. Rows that reject are proposed again."""
    rows, width = excess.shape
    out = np.full(rows, -1, dtype=np.int64)
    pending = np.arange(rows)
    gf = float(g0)
    while pending.size:
        pick = uniform_int(width, pending.size, source=source)
        m = excess[pending, pick]
        u = draw_u32(source, pending.size).astype(np.float64)
        gamma = gf * m.astype(np.float64)
        estimate = np.exp(-gamma)
        usable = gamma <= 2.0**20
        accept = usable & ((u + 1) * 2.0**-32 <= estimate - _MARGIN)
        reject = usable & (u * 2.0**-32 >= estimate + _MARGIN)
        for i in np.flatnonzero(~(accept | reject)).tolist():
            accept[i] = LazyUniform(int(u[i]), 32, source).below(exp_bounds(g0 * int(m[i])))
        out[pending[accept]] = pick[accept]
        pending = pending[~accept]
    return out


def choose_regions(
    loc: Location, lat: NDArray[np.float64], lon: NDArray[np.float64], source: RandomSource
) -> list[Any]:
    """Each point's region, by the exponential mechanism on ``−⌊d/q⌋`` (module docstring):
    weights ``exp(−(ε·q/2)·⌊d/q⌋)``, sampled exactly by :func:`_exponential_rows`."""
    lat, lon = _inside(loc, lat, lon)
    x, y = loc.box.plane(lat, lon, loc.unit)
    cx, cy = loc.box.plane(
        np.array([r[1] for r in loc.regions]), np.array([r[2] for r in loc.regions]), loc.unit
    )
    q = float(loc.step)
    g0 = loc.step_epsilon / 2
    chunk = max(1, _CELLS // len(loc.regions))
    picks = []
    for start in range(0, len(x), chunk):
        px, py = x[start : start + chunk, None], y[start : start + chunk, None]
        quanta = np.floor(np.hypot(cx[None, :] - px, cy[None, :] - py) / q).astype(np.int64)
        excess = quanta - quanta.min(axis=1, keepdims=True)
        picks.append(_exponential_rows(excess, g0, source))
    ids = [r[0] for r in loc.regions]
    chosen = np.concatenate(picks) if picks else np.zeros(0, dtype=np.int64)
    return [ids[int(i)] for i in chosen]


def _lattice_radius(c: float, level: float) -> float | None:
    """The smallest r with P(‖Z‖ ≤ r) ≥ level for the lattice law of ``c`` (in steps), by
    enumerating the nodes within the radius holding all but e^-40 of the mass; None when
    that is more than ``_LATTICE_WINDOW`` nodes (then the continuum is within a step)."""
    reach = math.ceil(45 / c)
    if (2 * reach + 1) ** 2 > _LATTICE_WINDOW:
        return None
    a = np.arange(-reach, reach + 1, dtype=np.float64)
    r = np.sqrt(a[:, None] ** 2 + a[None, :] ** 2).reshape(-1)
    w = np.exp(-c * r)
    order = np.argsort(r, kind="stable")
    mass = np.cumsum(w[order]) / w.sum()
    return float(r[order][int(np.searchsorted(mass, level))])


def error_radius(loc: Location, level: float) -> float:
    """The radius (in ``loc.unit``) within which the true point of the box lies from its
    released point with probability ≥ ``level``: the noise's radius quantile (exact on the
    lattice when it is small enough to enumerate, else the continuous planar Laplace's
    ``1 − (1 + εr)e^{−εr} = level`` plus one step for the lattice) plus the snapping
    distance (≤ step/√2). Clamping to the box only shortens the distance to a point of the box.
    """
    if not 0 < level < 1:
        raise InvalidArgumentError(f"level must be in (0, 1), got {level!r}")
    step = float(loc.step)
    lattice = _lattice_radius(float(loc.step_epsilon), level)
    if lattice is not None:
        return lattice * step + step / math.sqrt(2)
    # continuum: solve 1 − (1 + t)e^{−t} = level for t = εr by bisection
    lo, hi = 0.0, 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 1 - (1 + mid) * math.exp(-mid) < level:
            lo = mid
        else:
            hi = mid
    return hi / float(loc.epsilon) + step + step / math.sqrt(2)


@dataclass(frozen=True)
class GeoExplanation:
    """What a location release will cost and how far its points will be, before any data is
    read (public parameters only)."""

    location: Location
    level: float

    @property
    def loss(self) -> Fraction:
        return self.location.loss

    @property
    def mean_error(self) -> float | None:
        """The mean distance between a released point and its true point (the continuous
        planar Laplace's 2/ε plus the snapping, at most step/√2); None for regions."""
        if self.location.regions:
            return None
        return 2 / float(self.location.epsilon) + float(self.location.step) / math.sqrt(2)

    @property
    def radius(self) -> float | None:
        """:func:`error_radius` at ``level``; None for regions."""
        return None if self.location.regions else error_radius(self.location, self.level)

    def lines(self) -> list[str]:
        loc, u = self.location, self.location.unit
        out = [
            f"location {loc.label} ({loc.lat}, {loc.lon}), ε = {float(loc.epsilon):g} per {u}",
            f"charge per release: ε = {float(self.loss):.6g} (the loss between any two records "
            f"of the box: {loc.box.diameter(u):.4g} {u} across)",
        ]
        if loc.regions:
            ratio = math.exp(-float(loc.epsilon) / 2)
            out.append(
                f"a region d {u} farther than another is chosen about e^(-ε·d/2) times as "
                f"often: 1 {u} farther, {ratio:.3g}×"
            )
        else:
            out += [
                f"mean distance to the true point: {self.mean_error:.4g} {u}",
                f"{self.level:.0%} of true points within {self.radius:.4g} {u} of their release",
            ]
        out.append(
            f"plane: local equirectangular, east-west distortion up to {loc.box.distortion:.2%}"
            " (never lengthens a distance)"
        )
        return out

    def __str__(self) -> str:
        return "\n".join(self.lines())


def explain(
    columns: tuple[str, str] = ("lat", "lon"),
    *,
    epsilon: Any,
    box: Any,
    unit: str = "km",
    step: Any = None,
    regions: Any = None,
    level: float = 0.95,
    label: str = "location",
) -> GeoExplanation:
    """The cost and the expected error of ``veil.perturb(..., locations={label: columns},
    epsilon=epsilon, box=box, unit=unit, step=step, regions=...)`` before anything is spent."""
    from veil.accounting.budget import exact

    loc = location(
        label, columns, epsilon=exact(epsilon, "epsilon"), box=box, unit=unit, step=step,
        regions=regions,
    )  # fmt: skip
    if not 0 < level < 1:
        raise InvalidArgumentError(f"level must be in (0, 1), got {level!r}")
    return GeoExplanation(loc, level)


def plot_locations(
    true: tuple[Sequence[float], Sequence[float]],
    released: tuple[Sequence[float], Sequence[float]],
    loc: Location,
    path: str | Path,
    *,
    level: float = 0.95,
    title: str | None = None,
    circles: int = 6,
) -> Path:
    """True points, their released points and the ``level`` error radius around the first
    ``circles`` releases, on one map in degrees (the ``plot`` extra). For a picture of
    synthetic or public points: the true points are drawn as given."""
    from veil.plots import check_path, figure, save

    target = check_path(path)
    fig, axes = figure(7.0, 7.0)
    ax = axes[0][0]
    tlat, tlon = np.asarray(true[0], float), np.asarray(true[1], float)
    rlat, rlon = np.asarray(released[0], float), np.asarray(released[1], float)
    radius = error_radius(loc, level)
    km = radius / UNITS[loc.unit]
    lat_r = math.degrees(km / EARTH_RADIUS_KM)
    lon_r = lat_r / math.cos(math.radians((loc.box.south + loc.box.north) / 2))
    theta = np.linspace(0, 2 * math.pi, 73)
    for a, b in zip(rlat[:circles].tolist(), rlon[:circles].tolist(), strict=True):
        ax.plot(b + lon_r * np.cos(theta), a + lat_r * np.sin(theta), color="#d62728",
                alpha=0.25, linewidth=0.8)  # fmt: skip
    for a, b, c, d in zip(tlat.tolist(), tlon.tolist(), rlat.tolist(), rlon.tolist(), strict=True):
        ax.plot([b, d], [a, c], color="grey", linewidth=0.6, alpha=0.7)
    ax.scatter(tlon, tlat, s=18, color="#1f77b4", label="true point", zorder=3)
    ax.scatter(rlon, rlat, s=22, marker="x", color="#d62728", label="released point", zorder=3)
    ax.plot([], [], color="#d62728", alpha=0.5,
            label=f"{level:.0%} error radius ({radius:.3g} {loc.unit})")  # fmt: skip
    b = loc.box
    ax.plot([b.west, b.east, b.east, b.west, b.west], [b.south, b.south, b.north, b.north, b.south],
            color="black", linewidth=0.8, linestyle=":", label="box")  # fmt: skip
    ax.set_xlabel("longitude (°)")
    ax.set_ylabel("latitude (°)")
    ax.set_aspect(1 / math.cos(math.radians((b.south + b.north) / 2)))
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title(
        title or f"geo-indistinguishable points, ε = {float(loc.epsilon):g} per {loc.unit}"
    )
    return save(fig, target)
