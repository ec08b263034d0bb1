"""The automatic neighbours of ``veil audit query`` are neighbours: each D′ is D minus every row
of one privacy unit, or D plus rows of one new unit within the contribution limits; the new
group's keys occur nowhere in D; added rows pass the query's WHERE; the crafted values of
Casacuberta et al. are there for float and integer sums."""

from __future__ import annotations

import datetime
from collections import Counter
from fractions import Fraction
from typing import Any

import pyarrow as pa
import pytest

from veil.audit.neighbours import Neighbour, fresh_value, neighbours, passing_rows
from veil.audit.query_runs import run

SQL = "SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t WHERE keep GROUP BY g"


def _table() -> pa.Table:
    rows: list[dict[str, Any]] = []
    for uid in range(12):
        for r in range(1 + uid % 4):
            rows.append(
                {
                    "uid": uid,
                    "g": "abc"[(uid + r) % 3],
                    "x": float(uid * 10 + r),
                    "keep": uid != 3 or r == 0,
                    "k": uid % 2,
                }
            )
    rows.append({"uid": 99, "g": "z", "x": 1.0, "keep": True, "k": 0})  # the smallest group
    return pa.Table.from_pylist(rows)


def _built(table: pa.Table, **options: Any) -> tuple[list[Neighbour], list[str], Any]:
    found = run(
        {"t": table},
        SQL,
        salt=1,
        epsilon=Fraction(1),
        delta=Fraction(1, 10**6),
        options={"bounds": {"x": (0, 100)}, **options},
    )
    assert found.agg is not None, found.outcome
    built, notes = neighbours(table, found.agg)
    return built, notes, found.agg


def _rows(table: pa.Table) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(r.values()) for r in table.to_pylist())


@pytest.mark.parametrize(
    "options",
    [{"privacy_unit": "uid", "max_groups": 2, "max_rows_per_group": 3}, {}],
    ids=["unit-uid", "rows"],
)
def test_every_neighbour_differs_by_one_unit(options: dict[str, Any]) -> None:
    table = _table()
    built, _, agg = _built(table, **options)
    names = [n.name for n in built]
    assert names[:5] == [
        "remove-largest",
        "remove-smallest-group",
        "add-new-group",
        "add-upper",
        "add-lower",
    ]
    assert any(n.crafted for n in built)
    before = _rows(table)
    for n in built:
        after = _rows(n.data)
        removed, added = before - after, after - before
        assert not (removed and added), n.name
        changed = removed or added
        assert changed, n.name
        if options:
            units = {row[0] for row in changed}
            assert len(units) == 1, n.name
            (uid,) = units
            if removed:  # all rows of that unit, none left
                assert not [r for r in after if r[0] == uid], n.name
            else:  # a unit D does not hold, within the contribution limits
                assert uid not in {r[0] for r in before}
                per_group = Counter(row[1] for row in added.elements())
                assert len(per_group) <= agg.contribution.max_groups
                assert max(per_group.values()) <= agg.contribution.max_rows_per_group
        else:
            assert sum(changed.values()) == 1, n.name  # one row is one unit


def test_the_new_group_is_new_and_its_rows_pass_the_filter() -> None:
    table = _table()
    built, _, agg = _built(table, privacy_unit="uid", max_groups=2, max_rows_per_group=3)
    new = next(n for n in built if n.name == "add-new-group")
    extra = new.data.slice(table.num_rows).to_pylist()
    assert {r["g"] for r in extra}.isdisjoint(set(table.column("g").to_pylist()))
    assert len({r["g"] for r in extra}) == 2  # max_groups new groups
    assert all(r["x"] == 100.0 for r in extra)  # at the upper bound
    assert passing_rows(new.data, agg)[table.num_rows :].all()


def test_removals_pick_the_largest_unit_and_one_of_the_smallest_group() -> None:
    table = _table()
    built, _, _ = _built(table, privacy_unit="uid", max_groups=2, max_rows_per_group=3)
    by_name = {n.name: n for n in built}
    gone = _rows(table) - _rows(by_name["remove-largest"].data)
    assert {r[0] for r in gone} == {11}  # 3 rows kept by WHERE, the largest values
    small = _rows(table) - _rows(by_name["remove-smallest-group"].data)
    assert {r[0] for r in small} == {99}  # the only unit of group "z"


def test_crafted_values_stress_float_and_integer_sums() -> None:
    floats = _table()
    built, _, _ = _built(floats)
    values = {n.name: n.data.column("x").to_pylist()[-1] for n in built if n.crafted}
    assert values["crafted-1e308"] == 1e308
    assert values["crafted-minus-1e308"] == -1e308
    assert values["crafted-2^53+2"] == 2.0**53 + 2
    assert values["crafted-above-upper"] > 100.0
    assert values["crafted-0.1"] == 0.1
    ints = floats.set_column(2, "x", pa.array([int(v) for v in floats.column("x").to_pylist()]))
    built, _, _ = _built(ints)
    values = {n.name: n.data.column("x").to_pylist()[-1] for n in built if n.crafted}
    assert values == {
        "crafted-int-max": 2**63 - 1,
        "crafted-int-min": -(2**63),
        "crafted-2^53+1": 2**53 + 1,
    }


def test_fresh_values_are_absent_from_their_column() -> None:
    cases = [
        pa.chunked_array([pa.array([1, 5, None], type=pa.int32())]),
        pa.chunked_array([pa.array([2**63 - 1, -3], type=pa.int64())]),
        pa.chunked_array([pa.array([0.5, float("inf")])]),
        pa.chunked_array([pa.array(["veil-audit-new-0", "b"])]),
        pa.chunked_array([pa.array([True])]),
        pa.chunked_array([pa.array([datetime.date(2024, 1, 31)])]),
    ]
    for column in cases:
        value = fresh_value(column)
        assert value is not None
        assert value not in column.to_pylist()
        pa.array([value], type=column.type)  # fits the type
    assert fresh_value(pa.chunked_array([pa.array([True, False])])) is None


def test_a_filter_that_keeps_nothing_leaves_only_additions() -> None:
    table = _table().set_column(3, "keep", pa.array([False] * _table().num_rows))
    built, notes, _ = _built(table)
    assert not [n for n in built if n.name.startswith("remove")]
    assert any("no row passes" in note for note in notes)
