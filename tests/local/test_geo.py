"""Location data (veil.local.geo through veil.perturb): the plane never lengthens a distance, points
are released on the grid for every input (no float porosity), inside the box, with an error
radius that covers its level; regions are chosen with the exponential weights; the ledger is
charged the loss between any two records of the box, once; everything decidable without data
is refused before the charge. Thresholds: frequencies within 5 binomial standard deviations,
χ² at p > 1e-4, fixed seeds."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

import veil
from support import SeededSource
from veil.errors import InvalidArgumentError, SchemaError
from veil.local import geo
from veil.local.perturb import perturb

PARIS = (48.80, 2.25, 48.92, 2.45)


def _haversine_km(
    lat1: np.ndarray, lon1: np.ndarray, lat2: np.ndarray, lon2: np.ndarray
) -> np.ndarray:
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dp, dl = p2 - p1, np.radians(lon2 - lon1)
    h = np.sin(dp / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * geo.EARTH_RADIUS_KM * np.arcsin(np.sqrt(h))


def _points(
    box: tuple[float, float, float, float], n: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)  # test data only; no noise is drawn from it
    return rng.uniform(box[0], box[2], n), rng.uniform(box[1], box[3], n)


@pytest.mark.parametrize(
    "box",
    [PARIS, (69.0, 18.0, 71.0, 28.0), (-5.0, 30.0, 5.0, 40.0), (-60.0, -70.0, -50.0, -60.0)],
)
def test_the_plane_never_lengthens_a_distance_in_the_box(
    box: tuple[float, float, float, float],
) -> None:
    b = geo.Box.parse(box)
    lat1, lon1 = _points(box, 20_000, 1)
    lat2, lon2 = _points(box, 20_000, 2)
    x1, y1 = b.plane(lat1, lon1, "km")
    x2, y2 = b.plane(lat2, lon2, "km")
    plane = np.hypot(x1 - x2, y1 - y2)
    sphere = _haversine_km(lat1, lon1, lat2, lon2)
    assert np.all(plane <= sphere * (1 + 1e-12))
    # and it is tight to within the stated distortion (plus the curvature of long pairs)
    assert np.max(1 - plane / np.maximum(sphere, 1e-9)) <= b.distortion + 0.01
    # the inverse projection is the inverse
    lat_back, lon_back = b.degrees(x1, y1, "km")
    assert np.allclose(lat_back, lat1, atol=1e-9)
    assert np.allclose(lon_back, lon1, atol=1e-9)


@pytest.mark.parametrize(
    ("box", "message"),
    [
        ((48.9, 2.2, 48.8, 2.4), "south < north"),
        ((10.0, 175.0, 12.0, -175.0), "antimeridian"),
        ((40.0, 0.0, 55.0, 5.0), "at most 10° × 10°"),
        ((81.0, 0.0, 82.0, 5.0), "-80 ≤ south < north ≤ 80"),
        ("paris", "four numbers"),
    ],
)
def test_boxes_veil_cannot_project_honestly_are_refused_with_the_fix(
    box: object, message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        geo.Box.parse(box)


def _table(n: int, seed: int = 5) -> pa.Table:
    lat, lon = _points(PARIS, n, seed)
    return pa.table({"lat": lat, "lon": lon, "name": [f"p{i}" for i in range(n)]})


def test_points_are_released_on_the_grid_inside_the_box_for_every_input() -> None:
    """No float porosity: whatever the input, an output is a grid node mapped by one fixed
    function, so two inputs reaching the same node release bit-identical coordinates."""
    table = _table(5_000)
    out = perturb(
        table, locations={"home": ("lat", "lon")}, epsilon=Fraction(2), box=PARIS,
        step=Fraction(1, 10), source=SeededSource("grid"),
    )  # fmt: skip
    assert out.data.column_names == ["lat", "lon"]
    lat, lon = out.data["lat"].to_numpy(), out.data["lon"].to_numpy()
    b = geo.Box.parse(PARIS)
    assert np.all((b.south <= lat) & (lat <= b.north) & (b.west <= lon) & (lon <= b.east))
    x, y = b.plane(lat, lon, "km")
    i, j = x / 0.1, y / 0.1
    assert np.allclose(i, np.rint(i), atol=1e-6)
    assert np.allclose(j, np.rint(j), atol=1e-6)
    nodes = np.rint(i).astype(np.int64), np.rint(j).astype(np.int64)
    again_lat, again_lon = b.degrees(nodes[0] * 0.1, nodes[1] * 0.1, "km")
    assert np.array_equal(again_lat, lat)
    assert np.array_equal(again_lon, lon)


def test_missing_or_outside_coordinates_are_moved_into_the_box_not_refused() -> None:
    table = pa.table(
        {"lat": pa.array([None, 0.0, 90.0, 48.85]), "lon": pa.array([2.3, None, 179.0, 2.35])}
    )
    out = perturb(table, locations={"home": ("lat", "lon")}, epsilon=1, box=PARIS,
                  source=SeededSource("outside"))  # fmt: skip
    lat = out.data["lat"].to_numpy()
    assert out.data.num_rows == 4
    assert np.all((lat >= 48.80) & (lat <= 48.92))


@pytest.mark.parametrize(
    ("epsilon", "step"), [(Fraction(1), Fraction(1, 1000)), (Fraction(2), Fraction(1, 10))]
)
def test_the_error_radius_covers_its_level(epsilon: Fraction, step: Fraction) -> None:
    """The distance from each released point to its (clamped, in-box) true point is within
    ``radius(level)`` in at least ``level`` of the records (minus 5 sd)."""
    table = _table(20_000, seed=7)
    out = perturb(table, locations={"home": ("lat", "lon")}, epsilon=epsilon, box=PARIS,
                  step=step, source=SeededSource(f"radius-{step}"))  # fmt: skip
    b = geo.Box.parse(PARIS)
    x0, y0 = b.plane(table["lat"].to_numpy(), table["lon"].to_numpy(), "km")
    x1, y1 = b.plane(out.data["lat"].to_numpy(), out.data["lon"].to_numpy(), "km")
    distance = np.hypot(x1 - x0, y1 - y0)
    for level in (0.5, 0.9, 0.95):
        covered = float(np.mean(distance <= out.radius("home", level=level)))
        assert covered >= level - 5 * math.sqrt(level * (1 - level) / len(distance)), level


def test_the_continuum_radius_is_the_planar_laplace_quantile() -> None:
    """1 − (1 + t)e^{−t} = 0.95 at t = 4.7439: at ε = 1/km on a 1 m grid, 4.744 km plus
    two steps at most."""
    loc = geo.location("home", ("lat", "lon"), epsilon=Fraction(1), box=PARIS, unit="km",
                       step=None)  # fmt: skip
    r = geo.error_radius(loc, 0.95)
    assert 4.7439 <= r <= 4.7439 + 0.003


def test_the_ledger_is_charged_the_loss_between_any_two_records_once() -> None:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "homes", veil.Budget(epsilon=50))
    out = perturb(_table(1_000), locations={"home": ("lat", "lon")}, epsilon=1, box=PARIS,
                  ledger=ledger, analyst="alice", dataset="homes")  # fmt: skip
    loc = out.columns[0].location
    assert loc is not None
    diameter = geo.Box.parse(PARIS).diameter("km")
    assert loc.loss == math.ceil(diameter) + Fraction(2, 1000)  # ε·(D rounded up + 2 steps)
    assert out.loss == veil.Budget(epsilon=loc.loss)
    assert ledger.remaining("alice", "homes") == veil.Budget(epsilon=50 - loc.loss)
    charges = [r.status for r in ledger.history("alice", "homes") if r.status is not None]
    assert charges == ["committed"]  # one charge for the whole table
    assert "planar Laplace, ε = 1 per km" in str(out)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"locations": {"home": ("lat", "lon")}}, InvalidArgumentError, "need a bounding box"),
        (
            {"locations": {"home": ("lat", "lon")}, "box": PARIS, "bounds": {"x": (0, 1)}},
            InvalidArgumentError,
            "in a call of their own",
        ),
        (
            {"locations": {"home": ("lat", "lonx")}, "box": PARIS},
            SchemaError,
            "unknown column 'lonx'",
        ),
        (
            {"locations": {"home": ("lat", "name")}, "box": PARIS},
            SchemaError,
            "not a number of degrees",
        ),
        (
            {"locations": {"home": ("lat", "lon")}, "box": PARIS, "step": 1e-13},
            InvalidArgumentError,
            "choose step= between",
        ),
        (
            {"locations": {"home": ("lat", "lon")}, "box": PARIS, "unit": "furlong"},
            InvalidArgumentError,
            "unit='furlong'",
        ),
        (
            {"locations": {"home": ("lat", "lon")}, "box": PARIS, "regions": {"work": {}}},
            InvalidArgumentError,
            "not one of locations=",
        ),
    ],
)
def test_what_is_decidable_without_data_is_refused_before_the_charge(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "homes", veil.Budget(epsilon=50))
    with pytest.raises(error, match=message):
        perturb(_table(10), epsilon=1, ledger=ledger, analyst="alice", dataset="homes", **kwargs)  # type: ignore[arg-type]
    assert ledger.remaining("alice", "homes") == veil.Budget(epsilon=50)
    assert [r for r in ledger.history("alice", "homes") if r.status is not None] == []


@pytest.mark.parametrize("path", ["float pre-check", "exact brackets only"])
def test_a_region_is_chosen_with_the_exponential_weights(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One point, four centroids: the region shares follow exp(−(ε·q/2)·⌊d/q⌋) (χ²), on both
    decision paths (a margin of 1 leaves every acceptance to the integer brackets)."""
    if path == "exact brackets only":
        monkeypatch.setattr(geo, "_MARGIN", 1.0)
    regions = {"N": (48.89, 2.35), "S": (48.83, 2.35), "E": (48.86, 2.40), "W": (48.86, 2.29)}
    n = 20_000 if path == "float pre-check" else 4_000
    table = pa.table({"lat": np.full(n, 48.87), "lon": np.full(n, 2.36)})
    out = perturb(table, locations={"home": ("lat", "lon")}, regions={"home": regions},
                  epsilon=1, box=PARIS, source=SeededSource(f"regions-{path}"))  # fmt: skip
    assert out.data.column_names == ["home"]
    chosen = out.data["home"].to_pylist()
    loc = out.columns[0].location
    assert loc is not None
    b = loc.box
    px, py = b.plane(np.array([48.87]), np.array([2.36]), "km")
    q = float(loc.step)
    weights = []
    for rid in regions:
        cx, cy = b.plane(np.array([regions[rid][0]]), np.array([regions[rid][1]]), "km")
        k = math.floor(float(np.hypot(cx - px, cy - py)[0]) / q)
        weights.append(math.exp(-(1.0 * q / 2) * k))
    expected = np.array(weights) / sum(weights) * n
    observed = [chosen.count(rid) for rid in regions]
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    assert out.loss == veil.Budget(epsilon=math.ceil(b.diameter("km")) + Fraction(1, 1000))


def test_the_picture_shows_true_and_released_points_with_their_radius(tmp_path: Path) -> None:
    table = _table(40, seed=11)
    out = perturb(table, locations={"home": ("lat", "lon")}, epsilon=2, box=PARIS,
                  source=SeededSource("picture"))  # fmt: skip
    loc = out.columns[0].location
    assert loc is not None
    path = geo.plot_locations(
        (table["lat"].to_numpy(), table["lon"].to_numpy()),
        (out.data["lat"].to_numpy(), out.data["lon"].to_numpy()),
        loc, tmp_path / "homes.png",
    )  # fmt: skip
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 20_000


def test_explain_states_the_cost_and_the_error_before_anything_is_read() -> None:
    plan = geo.explain(epsilon=1, box=PARIS, label="home")
    diameter = geo.Box.parse(PARIS).diameter("km")
    assert plan.loss == math.ceil(diameter) + Fraction(2, 1000)
    assert plan.mean_error is not None
    assert abs(plan.mean_error - 2.0) < 0.001  # 2/ε plus at most step/√2
    text = str(plan)
    assert "charge per release: ε = 20.002" in text
    assert "95% of true points within 4.746 km" in text
    with pytest.raises(InvalidArgumentError, match="level must be in"):
        geo.explain(epsilon=1, box=PARIS, level=1.5)


def test_region_counts_list_every_region_and_are_counts_of_released_choices() -> None:
    regions = {"N": (48.89, 2.35), "S": (48.83, 2.35), "far": (10.0, 10.0)}
    out = perturb(_table(500), locations={"home": ("lat", "lon")}, regions={"home": regions},
                  epsilon=1, box=PARIS, source=SeededSource("counts"))  # fmt: skip
    counts = out.region_counts("home")
    assert list(counts) == ["N", "S", "far"]
    assert sum(counts.values()) == 500
    assert counts["far"] == 0  # thousands of km away: weight e^(-ε·d/2) ≈ 0
