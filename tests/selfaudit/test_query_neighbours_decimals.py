"""``veil audit query``'s crafted neighbours for a summed DECIMAL column (issue 33): the type's
ends and a stored integer beyond its precision (−2^127 in a DECIMAL(38, s), which a file
written without validation can hold and which made DuckDB abort the whole database). Each
neighbour is built as such and answered."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pytest

from veil.audit.neighbours import neighbours
from veil.audit.query_runs import run

SQL = "SELECT COUNT(*) AS n, SUM(x) AS s FROM t"


@pytest.mark.parametrize("scale", [0, 10])
def test_decimal_sums_get_their_ends_and_a_value_beyond_their_precision(scale: int) -> None:
    table = pa.table(
        {
            "uid": pa.array(range(20), pa.int64()),
            "x": pa.array([Decimal(i % 7) for i in range(20)], pa.decimal128(38, scale)),
        }
    )
    options = {"bounds": {"x": (0, 10)}, "privacy_unit": "uid"}

    def ask(data: pa.Table) -> Any:
        return run({"t": data}, SQL, salt=1, epsilon=Fraction(1), delta=None, options=options)

    base = ask(table)
    assert base.agg is not None, base.outcome
    built, _ = neighbours(table, base.agg)
    crafted = {n.name: n for n in built if n.crafted}
    assert set(crafted) == {
        "crafted-decimal-max",
        "crafted-decimal-min",
        "crafted-beyond-precision",
    }
    stored = crafted["crafted-beyond-precision"].data.column("x").chunks[-1]
    assert int.from_bytes(stored.buffers()[1].to_pybytes()[-16:], "little", signed=True) == -(
        2**127
    )
    for name, neighbour in crafted.items():
        answered = ask(neighbour.data)
        assert answered.agg is not None, (name, answered.outcome)
