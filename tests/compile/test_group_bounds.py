"""Explicit per-group bounds (``bounds={"income": {"north": (0, 20000), …}}``) for the groups
of a public key: refusals before anything is reserved, the per-group clamp in the engine's SQL,
neighbouring datasets on every engine (outputs and outcomes), error bars per group."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import veil
from harness import HARNESSES, Harness
from support import SeededSource
from veil.plan.nodes import Aggregate, ColumnBounds, Measurement
from veil.plan.tree import aggregate_of

REGIONS = ("north", "south", "east")
BY_REGION = (
    "SELECT region, COUNT(*) AS n, SUM(income) AS s, AVG(income) AS a FROM t "
    "WHERE region IN ('north', 'south', 'east') GROUP BY region"
)
BY_BAND = "SELECT BIN(age, 0, 30, 60, 1000) AS band, SUM(income) AS s FROM t GROUP BY band"
REGION_BOUNDS = {"income": {"north": (0, 20000), "south": (0, 50000), "east": (0, 400000)}}
BAND_BOUNDS = {"income": {"[0, 30)": (0, 20000), "[30, 60)": (0, 50000), "[60, 1000]": (0, 400000)}}


def base_table() -> pa.Table:
    uid, age, region, income = [], [], [], []
    tops = {"north": 20000, "south": 50000, "east": 400000}
    for u in range(90):
        r = REGIONS[u // 30]
        for j in range(2):
            uid.append(u)
            age.append(u)
            region.append(r)
            income.append(tops[r] * ((7 * u + 3 * j) % 10) / 10)
    return pa.table(
        {
            "uid": pa.array(uid, pa.int64()),
            "age": pa.array(age, pa.int64()),
            "region": pa.array(region),
            "income": pa.array(income, pa.float64()),
        }
    )


def session(**options: Any) -> veil.Session:
    return veil.Session.local(
        tables={"t": base_table()}, privacy_unit="uid", budget=veil.Budget(epsilon=10), **options
    )


def the_sum(agg: Aggregate) -> Measurement:
    return next(m for m in agg.measurements if m.name == "sum(income)")


def test_each_group_is_clamped_to_and_calibrated_by_its_own_bounds() -> None:
    e = session().explain(BY_REGION, epsilon=1, bounds=REGION_BOUNDS)
    m = the_sum(aggregate_of(e.plan))
    assert [(s.lower, s.upper) for s in m.strata] == [(0, 20000), (0, 50000), (0, 400000)]
    assert m.strata[2].scale > 19 * m.strata[0].scale
    # (DuckDB's clamp is written as comparisons: ``Dialect.case_clamps``)
    north = 'WHEN "__k0" = \'north\' THEN CASE WHEN "__x0" < 0 THEN 0 WHEN "__x0" > 20000 THEN'
    assert north in e.sql
    assert "north: in [0, 20000]" in str(e)


@pytest.mark.parametrize(
    ("bounds", "match"),
    [
        ({"income": {"north": (0, 20000)}}, r"name the groups 'north', which are not exactly"),
        (
            {"income": {"north": (0, 1), "south": (0, 1), "west": (0, 1)}},
            r"'region': 'north', 'south', 'east'",
        ),
        ({"income": {"north": (5, 1), "south": (0, 1), "east": (0, 1)}}, r"empty"),
        ({"income": {"north": (0, 1), "south": 3, "east": (0, 1)}}, r"in group 'south' must be"),
    ],
    ids=["missing-group", "unknown-group", "empty", "not-a-pair"],
)
def test_bad_per_group_bounds_are_refused_free(bounds: Any, match: str) -> None:
    s = session()
    before = s.remaining()
    with pytest.raises(veil.UserError, match=match):
        s.sql(BY_REGION, epsilon=1, bounds=bounds)
    assert s.remaining() == before


def test_per_group_bounds_for_a_key_without_public_groups_are_refused_free() -> None:
    s = veil.Session.local(
        tables={"t": base_table()}, privacy_unit="uid", budget=veil.Budget(epsilon=10, delta="1e-5")
    )
    before = s.remaining()
    sql = "SELECT region, SUM(income) AS s FROM t GROUP BY region"
    with pytest.raises(veil.BoundsError, match=r"'region' has no public list of groups"):
        s.sql(sql, epsilon=1, delta="1e-6", bounds=REGION_BOUNDS)
    assert s.remaining() == before


def test_a_group_named_twice_is_refused() -> None:
    with pytest.raises(veil.BoundsError, match="twice"):
        ColumnBounds("income", 0, 10, ((1, 0, 5), (1, 0, 6)))


def test_per_group_bounds_outside_the_columns_are_refused() -> None:
    with pytest.raises(veil.BoundsError, match="inside the column's bounds"):
        ColumnBounds("income", 0, 10, (("a", 0, 11),))


def test_the_order_of_the_groups_does_not_change_the_plan() -> None:
    swapped = {"income": dict(reversed(list(REGION_BOUNDS["income"].items())))}
    s = session()
    a = s.explain(BY_REGION, epsilon=1, bounds=REGION_BOUNDS).canonical
    b = s.explain(BY_REGION, epsilon=1, bounds=swapped).canonical
    assert a == b


# ── neighbouring datasets on every engine ──────────────────────────────────────────────────


def neighbour(table: pa.Table, key: str) -> pa.Table:
    """One more unit: in each group rows at one far end — beyond the group's bounds (clamped
    to them) or at its lower end, the same end for all, so whichever rows bounding keeps move
    the sum by the whole bound —, more rows in 'north' than R = 2, and rows of no group
    (another region, NULL)."""
    if key == "region":
        regions = ["north", "north", "north", "south", "south", "east", "east", "west", None]
        income = [1e6, 1e6, 1e6, 1e6, 1e6, 0.0, 0.0, 1e6, 1e6]
    else:  # the unit is in one band only (its age): its rows are all in that group
        regions = ["north"] * 3
        income = [1e6, 1e6, 1e6]
    extra = pa.table(
        {
            "uid": pa.array([999] * len(regions), pa.int64()),
            "age": pa.array([5] * len(regions), pa.int64()),
            "region": pa.array(regions, pa.string()),
            "income": pa.array(income, pa.float64()),
        }
    )
    return pa.concat_tables([table, extra])


CASES = {"region": (BY_REGION, REGION_BOUNDS), "band": (BY_BAND, BAND_BOUNDS)}


def released(
    harness: Harness, table: pa.Table, tmp: Path, key: str
) -> tuple[veil.Result, Aggregate]:
    sql, bounds = CASES[key]
    options: dict[str, Any] = {"bounds": bounds, "max_groups": 3, "max_rows_per_group": 2}
    s = harness.session(table, {}, tmp, privacy_unit="uid", budget=veil.Budget(epsilon=10))
    try:
        r = s.sql(sql, epsilon=1, source=SeededSource("group-bounds"), **options)
        agg = aggregate_of(s.explain(sql, epsilon=1, **options).plan)
    finally:
        s.close()
    return r, agg


@pytest.mark.parametrize("key", ["region", "band"])
@pytest.mark.parametrize("harness", HARNESSES)
def test_neighbours_move_each_group_within_its_own_bound(
    harness: Harness, key: str, tmp_path: Path
) -> None:
    """The same seeded noise on both neighbours: each group's released sum moves by what the
    unit changed, at most R·b_g with the group's own bound b_g (the engine clamped its rows to
    the group's bounds, not the column's), and the Laplace loss Σ_g |Δ_g|/s_g ≤ the sum's ε."""
    if not harness.supports(base_table(), {}):
        pytest.skip(f"{harness.name} cannot hold the table")
    r0, agg = released(harness, base_table(), tmp_path, key)
    r1, agg1 = released(harness, neighbour(base_table(), key), tmp_path, key)
    assert agg == agg1
    m = the_sum(agg)
    loss = Fraction(0)
    deltas = []
    for st, s0, s1 in zip(m.strata, r0.stats, r1.stats, strict=True):
        d = abs(s1["sum(income)"] - s0["sum(income)"])
        assert d <= 2 * st.limit
        loss += Fraction(d) / st.scale
        deltas.append(d)
    assert loss <= m.budget.eps
    if key == "region":  # two rows at a far end of each group: the whole bound is used
        assert all(d > 0 for d in deltas)
        assert loss > m.budget.eps * Fraction(99, 100)
    else:
        assert deltas[1:] == [0, 0]  # age 5 is in band [0, 30) only
        assert deltas[0] > 0


@pytest.mark.parametrize("harness", HARNESSES)
def test_neighbours_have_the_same_outcome(harness: Harness, tmp_path: Path) -> None:
    if not harness.supports(base_table(), {}):
        pytest.skip(f"{harness.name} cannot hold the table")
    outcomes = []
    for table in (base_table(), neighbour(base_table(), "region")):
        s = harness.session(table, {}, tmp_path, privacy_unit="uid", budget=veil.Budget(epsilon=2))
        try:
            for eps in (1, 1, 5):
                try:
                    r = s.sql(BY_REGION, epsilon=eps, bounds=REGION_BOUNDS, max_groups=3)
                    outcomes.append(f"released {len(r.values)} groups")
                except veil.UserError as err:
                    outcomes.append(f"{type(err).__name__}: {err}")
        finally:
            s.close()
    assert outcomes[:3] == outcomes[3:]
    assert outcomes[0] == "released 3 groups"


def test_error_bars_cover_each_group() -> None:
    """400 seeded releases (the audit's seam: the exact statistics once, fresh noise each
    time): each region's SUM and AVG within their 95 % bars in ≥ 91 % (0.95 − 3 binomial sd)
    against the values computed from the data (every value inside its group's bounds)."""
    from veil.audit.query_runs import releases, run

    found = run(
        {"t": base_table()},
        BY_REGION,
        salt=1,
        epsilon=Fraction(1),
        delta=None,
        options={"privacy_unit": "uid", "bounds": REGION_BOUNDS, "max_rows_per_group": 2},
    )
    t = base_table()
    truth = {}
    for r in REGIONS:
        xs = [
            x
            for g, x in zip(t["region"].to_pylist(), t["income"].to_pylist(), strict=True)
            if g == r
        ]
        truth[r] = (sum(xs), sum(xs) / len(xs))
    n = 400
    hits = {r: [0, 0] for r in REGIONS}
    for res in releases(found, n, source=SeededSource("group-bounds-coverage")):
        bars = res.error_bars()
        for i, row in enumerate(res.values):
            for j, col in ((0, 2), (1, 3)):
                bar = bars[i][col]
                assert bar is not None
                hits[row[0]][j] += abs(row[col] - truth[row[0]][j]) <= bar
    assert all(min(h) >= 0.91 * n for h in hits.values()), hits
