"""Audit: neighbouring datasets for the shapes the system tests do not cover — several GROUP BY
columns under L0 bounding, histograms (values outside the edges, at the edges, NULL/NaN/inf),
WHERE-declared public domains, integer quantiles and unit counts with max_groups > 1.

Each test removes every unit in turn and checks that every pre-noise statistic moves by at
most the sensitivity the compiled plan claims (see ``system.test_neighbours``).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

import veil
from support import SeededSource
from system.test_neighbours import ADVERSARIAL, check_every_neighbour
from veil import Budget
from veil.plan.nodes import Contribution


def adversarial_units(units: int = 8) -> pd.DataFrame:
    """Unit 0 has many rows spread over every (g, h) pair; the others a few rows each.
    Values cycle through the adversarial floats, the BIN edges and their neighbours."""
    edges = [0.0, 10.0, 20.0, 30.0]
    values = [
        *ADVERSARIAL,
        *edges,
        *(math.nextafter(e, -math.inf) for e in edges),
        *(math.nextafter(e, math.inf) for e in edges),
    ]
    rows: list[dict[str, Any]] = []
    i = 0
    for g in "abcd":
        for h in ("x", "y", None):
            for _ in range(3):
                rows.append({"uid": 0, "g": g, "h": h, "k": i % 7, "x": values[i % len(values)]})
                i += 1
    for uid in range(1, units):
        for r in range(1 + uid % 4):
            rows.append(
                {
                    "uid": uid,
                    "g": "abcd"[(uid + r) % 4],
                    "h": ("x", "y", None)[(uid * r) % 3],
                    "k": (uid * 3 + r) % 7,
                    "x": values[i % len(values)],
                }
            )
            i += 1
    return pd.DataFrame(rows).astype(
        {"uid": "int64", "g": "string", "h": "string", "k": "int64", "x": "float64"}
    )


APPROX = Budget(epsilon=1, delta="1e-6")


@pytest.mark.parametrize("limits", [(1, 1), (2, 3), (5, 2)], ids=lambda c: f"G{c[0]}R{c[1]}")
def test_two_unknown_group_keys_keep_each_unit_within_max_groups_pairs(
    limits: tuple[int, int],
) -> None:
    agg, worst = check_every_neighbour(
        adversarial_units(),
        "SELECT g, h, COUNT(*) AS n, SUM(x) AS s, COUNT(DISTINCT uid) AS u FROM t GROUP BY g, h",
        budget=APPROX,
        bounds={"x": (-5.0, 25.0)},
        privacy_unit="uid",
        contribution=Contribution(*limits),
    )
    assert agg.contribution == Contribution(*limits)
    assert worst["count"] > 0.5  # unit 0 comes close to the bound: the check could fail


@pytest.mark.parametrize("limits", [(1, 1), (2, 3)], ids=lambda c: f"G{c[0]}R{c[1]}")
def test_a_histogram_drops_values_outside_its_edges_and_bounds_each_unit(
    limits: tuple[int, int],
) -> None:
    agg, worst = check_every_neighbour(
        adversarial_units(),
        "SELECT BIN(x, 0, 10, 20, 30) AS b, COUNT(*) AS n FROM t GROUP BY BIN(x, 0, 10, 20, 30)",
        budget=Budget(epsilon=1),
        bounds={},
        privacy_unit="uid",
        contribution=Contribution(*limits),
    )
    assert agg.public_keys
    assert worst["count"] == 1


def test_a_where_declared_domain_and_an_unknown_key_under_l0_bounding() -> None:
    agg, worst = check_every_neighbour(
        adversarial_units(),
        "SELECT g, h, COUNT(*) AS n, AVG(x) AS m FROM t WHERE g IN ('a', 'b') GROUP BY g, h",
        budget=APPROX,
        bounds={"x": (0.0, 30.0)},
        privacy_unit="uid",
        contribution=Contribution(2, 2),
    )
    assert agg.keys[0].domain == ("a", "b")
    assert agg.keys[1].domain is None
    assert worst["count"] > 0


def test_integer_quantiles_and_unit_counts_with_several_groups_per_unit() -> None:
    check_every_neighbour(
        adversarial_units(),
        "SELECT g, MEDIAN(k) AS med, MAX(k) AS hi, COUNT(DISTINCT uid) AS u FROM t GROUP BY g",
        budget=Budget(epsilon=1),
        bounds={"k": (0, 6)},
        privacy_unit="uid",
        contribution=Contribution(3, 2),
        domains={"g": ["a", "b", "c", "d"]},
    )


def test_only_keys_of_a_where_declared_domain_are_released_empty_ones_included() -> None:
    table = pa.table(
        {"uid": [1, 2, 3, 4, 5], "g": ["a", "c", "c", None, "zz"], "x": [1.0, 2, 3, 4, 5]}
    )
    s = veil.Session.local(
        {"t": table}, privacy_unit="uid", budget=Budget(epsilon=1), source=SeededSource(3)
    )
    r = s.sql("SELECT g, COUNT(*) AS n FROM t WHERE g IN ('a', 'b') GROUP BY g", epsilon=1)
    assert sorted(row[0] for row in r.rows) == ["a", "b"]
    assert r.cost == Budget(epsilon=1)  # public keys: no δ for selection
