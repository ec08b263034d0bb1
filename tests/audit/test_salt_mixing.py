"""Audit: the keyed-hash bounding order behaves like a fresh random order for each salt.

A unit with 5 rows and max_rows_per_group = 1 keeps one of them. For two independent salts the
same row is kept with probability 1/5 when the order is a uniformly random permutation. With
4 000 units and 4 salt pairs the observed rate has a standard deviation of about 0.3 %; the
test allows 20 % ± 2 % (over 6 standard deviations), so it fails for a weak mixing such as
DuckDB's plain multi-argument HASH(salt, …) (25.5 % on these rows).
"""

from __future__ import annotations

import pandas as pd
import pytest

from system.prenoise import compile_query, exact
from veil import Budget
from veil.engines.duckdb import DuckDBEngine
from veil.plan.nodes import Contribution

UNITS = 4000
SALT_PAIRS = [(1, 2), (123456789, 987654321), (2**62 + 5, 2**40 + 7), (31337, 4242424242)]


def test_two_salts_keep_the_same_row_of_a_unit_about_one_time_in_five() -> None:
    df = pd.DataFrame(
        {
            "uid": [u for u in range(UNITS) for _ in range(5)],
            "g": [u for u in range(UNITS) for _ in range(5)],  # one group per unit
            "x": [r * 1.5 + u % 3 for u in range(UNITS) for r in range(5)],
        }
    )
    engine = DuckDBEngine({"t": df})
    agg = compile_query(
        engine,
        "SELECT g, SUM(x) AS s FROM t GROUP BY g",
        budget=Budget(epsilon=1, delta="1e-6"),
        privacy_unit="uid",
        bounds={"x": (0.0, 10.0)},
        contribution=Contribution(1, 1),
    )
    name = next(m.name for m in agg.measurements if m.statistic == "sum")
    same = 0
    for a, b in SALT_PAIRS:
        kept_a = exact(engine, agg, salt=a).stats
        kept_b = exact(engine, agg, salt=b).stats
        assert len(kept_a) == UNITS
        same += sum(kept_a[k][name] == kept_b[k][name] for k in kept_a)
    rate = same / (UNITS * len(SALT_PAIRS))
    assert rate == pytest.approx(0.2, abs=0.02)
