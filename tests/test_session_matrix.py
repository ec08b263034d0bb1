"""Every aggregate, key kind and contribution setting runs end to end on DuckDB."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

import veil
from support import SeededSource

AGGREGATES = [
    "COUNT(*) AS a",
    "COUNT(income) AS a",
    "SUM(income) AS a",
    "AVG(income) AS a",
    "VARIANCE(income) AS a",
    "STDDEV(income) AS a",
    "MEDIAN(age) AS a",
    "QUANTILE(income, 0.9) AS a",
    "MIN(age) AS a",
    "MAX(income) AS a",
]
SHAPES = [
    "SELECT {agg} FROM people",
    "SELECT state, {agg} FROM people GROUP BY state",
    "SELECT state, {agg} FROM people WHERE state IN ('CA', 'NY', 'ZZ') GROUP BY state",
    "SELECT BIN(age, 0, 30, 60, 100) AS band, {agg} FROM people WHERE age > 5 GROUP BY band",
    "SELECT state, sex, {agg} FROM people GROUP BY state, sex",
]
BOUNDS = {"income": (0, 5000), "age": (0, 100)}


def table() -> pa.Table:
    rng = np.random.default_rng(11)
    n = 4000
    return pa.table(
        {
            "user_id": rng.integers(0, 1500, n),
            "state": rng.choice(["CA", "NY", "TX"], n),
            "sex": rng.choice(["F", "M"], n),
            "age": rng.integers(0, 100, n),
            "income": rng.gamma(2, 800, n),
        }
    )


@pytest.mark.parametrize(
    ("unit", "limits"), [(None, (None, None)), ("user_id", (1, 1)), ("user_id", (2, 3))]
)
def test_every_shape_and_aggregate_answers(unit: str | None, limits: tuple[int, int]) -> None:
    s = veil.Session.local(
        tables={"people": table()},
        privacy_unit=unit,
        budget=veil.Budget(epsilon=1000, delta="1e-3"),
        source=SeededSource(f"matrix-{unit}-{limits}"),
    )
    aggregates = AGGREGATES + (["COUNT(DISTINCT user_id) AS a"] if unit else [])
    for shape, agg in itertools.product(SHAPES, aggregates):
        sql = shape.format(agg=agg)
        # bounds for the column the aggregate clamps only (others would warn: ignored)
        used = {c: b for c, b in BOUNDS.items() if c in agg and not agg.startswith("COUNT")}
        r = s.sql(
            sql,
            epsilon=2,
            delta="1e-6",
            bounds=used,
            max_groups=limits[0],
            max_rows_per_group=limits[1],
        )
        assert r.columns[-1] == "a", sql
        assert len(r.error_bars()) == len(r.rows), sql
        for row in r.rows:
            value = row[-1]
            assert value is not None, sql
            if "income" in agg and "COUNT" not in agg and "SUM" not in agg:
                lo = 0
                hi = 5000 if "VARIANCE" not in agg else 2500**2 * 2
                assert lo <= value <= hi, (sql, value)
