"""``veil.audit.query`` on a weighted query: the neighbours include crafted weights (1e308,
−1e308, subnormal, just above the bound…), every neighbour is released like D, and the
sampled loss stays within the claimed ε (verdict PASS: 700 releases per side detect a loss
above 1.75 at 95 % confidence, within twice the claim, which PASS needs; measured at seed)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from support import SeededSource
from veil.audit.query import query

SQL = "SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS m FROM t WHERE g IN ('a', 'b') GROUP BY g"


@pytest.mark.slow
def test_a_weighted_query_passes_its_audit_with_crafted_weights() -> None:
    rng = np.random.default_rng(3)  # the test table's values (not veil's randomness)
    n = 60
    df = pd.DataFrame(
        {
            "uid": np.arange(n) % 20,
            "g": rng.choice(["a", "b"], n),
            "x": rng.uniform(0, 10, n),
            "w": rng.uniform(0, 3, n),
        }
    )
    audit = query(
        SQL, {"t": df}, epsilon=1, privacy_unit="uid", bounds={"x": (0, 10), "w": (0, 3)},
        max_groups=2, max_rows_per_group=3, weights="w", releases_per_side=700,
        source=SeededSource("weights-audit"),
    )  # fmt: skip
    names = {nb.name for nb in audit.neighbours}
    assert {"crafted-1e308 (w)", "crafted-subnormal (w)", "crafted-above-upper (w)"} <= names
    assert all(nb.neighbour_outcome == "released" for nb in audit.neighbours)
    assert all(set(nb.changes) == {"sum(w)", "sum(x * w)"} for nb in audit.neighbours if nb.changes)
    assert audit.verdict == "PASS", audit
