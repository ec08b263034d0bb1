"""Auto bounds per group (``bounds={"x": {"auto": "r"}}``, veil.autobounds): one histogram of
(group, bin) cells over a public key, its charge, the per-group choice, the refusals (free) and
the neighbouring-dataset outcomes."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import veil
from support import SeededSource
from system.prenoise import exact
from veil.autobounds import GroupBounds, _Limits, _steps, find_bounds, group_key
from veil.catalog import Catalog, Source
from veil.errors import BudgetExhaustedError, InvalidArgumentError
from veil.plan.tree import aggregate_of

SQL = "SELECT r, AVG(x) AS m FROM t WHERE r IN ('a', 'b', 'c', 'd') GROUP BY r"
PER_GROUP = {"x": {"auto": "r"}}


def _people(n: int = 3000) -> pd.DataFrame:
    """Three groups on very different scales (d is declared but has no rows)."""
    rng = np.random.default_rng(14)
    x = np.concatenate([rng.uniform(0, 100, n), rng.uniform(1000, 50_000, n), rng.uniform(0, 3, n)])
    return pd.DataFrame({"x": x, "r": ["a"] * n + ["b"] * n + ["c"] * n})


PEOPLE = _people()


def _session(frame: pd.DataFrame, epsilon: float = 10, **options: object) -> veil.Session:
    return veil.Session.local({"t": frame}, budget=veil.Budget(epsilon=epsilon), **options)  # type: ignore[arg-type]


def test_per_group_bounds_cost_one_histogram_whatever_the_number_of_groups() -> None:
    s = _session(PEOPLE)
    explained = s.explain(SQL, epsilon=1, bounds=PER_GROUP, bounds_share=Fraction(1, 4))
    assert explained.cost == veil.Budget(epsilon=1)
    assert any("for each of the 4 groups of 'r'" in n for n in explained.notes)
    result = s.sql(SQL, epsilon=1, bounds=PER_GROUP, bounds_share=Fraction(1, 4))
    assert result.cost == veil.Budget(epsilon=1)
    assert s.remaining() == veil.Budget(epsilon=9)
    charges = [r for r in s.ledger.history(s.analyst, s.dataset) if r.event == "charge"]
    assert sorted(r.loss.eps for r in charges) == [Fraction(1, 4), Fraction(3, 4)]
    (chosen,) = result.auto_bounds
    assert chosen.loss == veil.Budget(epsilon=Fraction(1, 4))
    # the step's noise is the global step's: the groups compose in parallel
    agg = aggregate_of(s.plan(SQL, bounds={"x": (0, 1)}))
    limits = _Limits(None, None, None)
    (one,) = _steps(s, agg, ["x"], Fraction(1, 4), limits)
    (grouped,) = _steps(s, agg, ["x"], Fraction(1, 4), limits, by={"x": agg.keys[0]})
    assert grouped.scale == one.scale
    assert grouped.loss == one.loss
    assert [k.alias for k in grouped.plan.keys] == ["r", "bin"]


def test_each_group_gets_its_own_bounds_and_the_query_runs_with_them() -> None:
    s = _session(PEOPLE)
    result = s.sql(SQL, epsilon=1, bounds=PER_GROUP, source=SeededSource("groups"))
    (chosen,) = result.auto_bounds
    assert chosen.key == "r"
    assert [g.label for g in chosen.groups] == ["a", "b", "c", "d"]
    by = {g.label: g for g in chosen.groups}
    assert all(isinstance(g, GroupBounds) and g.lower < g.upper for g in chosen.groups)
    assert by["a"].upper <= 256  # far tighter than b's
    assert by["c"].upper <= 8
    assert by["b"].upper >= 32_768
    assert (chosen.lower, chosen.upper) == (
        min(g.lower for g in chosen.groups),
        max(g.upper for g in chosen.groups),
    )
    assert result.notes[0].startswith("auto bounds for 'x': per group of 'r' {a: [")
    # the main query is the one with these per-group bounds: asked again, from the cache
    again = s.sql(SQL, epsilon=Fraction(9, 10), bounds={"x": chosen.value})
    assert again.cached
    assert again.rows == result.rows


def test_per_group_bounds_beat_one_range_on_the_small_groups() -> None:
    truth = PEOPLE[PEOPLE.r == "c"].x.mean()
    errors: dict[str, list[float]] = {"per group": [], "one range": []}
    for i in range(5):
        for how, bounds in (("per group", PER_GROUP), ("one range", "auto")):
            s = _session(PEOPLE)
            rows = s.sql(SQL, epsilon=1, bounds=bounds, source=SeededSource(f"beat{i}")).rows
            errors[how].append(abs(rows[2][1] - truth))
    assert sum(errors["per group"]) < sum(errors["one range"]) / 10, errors


def test_an_unoccupied_group_takes_the_hull_of_the_occupied_ones() -> None:
    s = _session(PEOPLE)
    for i in range(3):
        (chosen,) = s.sql(
            SQL, epsilon=1 + i, bounds=PER_GROUP, source=SeededSource(f"hull{i}")
        ).auto_bounds
        occupied = [g for g in chosen.groups if g.label != "d"]
        assert chosen.groups[3].pair == (
            min(g.lower for g in occupied),
            max(g.upper for g in occupied),
        )


@pytest.mark.parametrize(
    "frame",
    [
        pd.DataFrame({"x": pd.array([], dtype="Float64"), "r": pd.array([], dtype="string")}),
        pd.DataFrame({"x": pd.array([None, None], dtype="Float64"), "r": ["a", "b"]}),
        pd.DataFrame({"x": [math.inf, -math.inf, math.nan, 1e308], "r": ["a", "a", "b", "c"]}),
    ],
    ids=["no-rows", "all-null", "extremes"],
)
def test_every_group_gets_a_valid_pair_even_when_empty(frame: pd.DataFrame) -> None:
    s = _session(frame)
    result = s.sql(SQL, epsilon=1, bounds=PER_GROUP, source=SeededSource("empty"))
    (chosen,) = result.auto_bounds
    assert len(chosen.groups) == 4
    assert all(g.lower < g.upper for g in chosen.groups)
    assert [row[0] for row in result.rows] == ["a", "b", "c", "d"]
    assert result.cost == veil.Budget(epsilon=1)


def test_a_bin_key_and_a_key_named_bin_are_public_groups() -> None:
    frame = pd.DataFrame({"x": [1.0, 50.0, 9000.0] * 50, "age": [10, 40, 70] * 50})
    s = _session(frame)
    sql = "SELECT BIN(age, 0, 30, 60, 120) AS bin, SUM(x) AS s FROM t GROUP BY bin"
    result = s.sql(sql, epsilon=2, bounds={"x": {"auto": "bin"}}, source=SeededSource("bin"))
    (chosen,) = result.auto_bounds
    assert [g.label for g in chosen.groups] == ["[0, 30)", "[30, 60)", "[60, 120]"]
    agg = aggregate_of(s.plan(sql, bounds={"x": (0, 1)}))
    (step,) = _steps(s, agg, ["x"], Fraction(1), _Limits(None, None, None), by={"x": agg.keys[0]})
    assert [k.alias for k in step.plan.keys] == ["bin", "bin_"]


def test_integer_domain_labels_name_the_groups() -> None:
    frame = pd.DataFrame({"x": [3.0, 300.0] * 100, "k": [1, 2] * 100})
    s = _session(frame, domains={"k": [1, 2, 3]})
    sql = "SELECT k, SUM(x) AS s FROM t GROUP BY k"
    result = s.sql(sql, epsilon=2, bounds={"x": {"auto": "k"}})
    (chosen,) = result.auto_bounds
    assert list(chosen.value) == [1, 2, 3]


@pytest.mark.parametrize(
    ("sql", "bounds", "match"),
    [
        (SQL, {"x": {"auto": "zz"}}, r"the query has no GROUP BY key 'zz' \(its keys: 'r'\)"),
        (SQL, {"x": {"auto": 3}}, r"per group must be \{'auto': KEY\}"),
        (SQL, {"x": {"auto": "r", "b": (0, 1)}}, r"per group must be \{'auto': KEY\}"),
        ("SELECT AVG(x) AS m FROM t", PER_GROUP, r"no GROUP BY key 'r' \(its keys: none\)"),
        (
            "SELECT r, AVG(x) AS m FROM t GROUP BY r",
            PER_GROUP,
            r"the groups of 'r' are not public .* WHERE r IN \('a', 'b'\)",
        ),
        (SQL, {"y": {"auto": "r"}}, r"no aggregate of this query clamps 'y'"),
    ],
)
def test_bad_per_group_requests_are_refused_before_anything_is_charged(
    sql: str, bounds: object, match: str
) -> None:
    s = _session(PEOPLE.assign(y=1.0))
    with pytest.raises(InvalidArgumentError, match=match):
        s.sql(sql, epsilon=1, bounds=bounds)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=match):
        s.explain(sql, epsilon=1, bounds=bounds)  # type: ignore[arg-type]
    assert s.remaining() == veil.Budget(epsilon=10)
    assert not [r for r in s.ledger.history(s.analyst, s.dataset) if r.event == "charge"]


def test_a_grant_too_small_is_refused_before_the_per_group_step() -> None:
    s = _session(PEOPLE, epsilon=0.5)
    with pytest.raises(BudgetExhaustedError):
        s.sql(SQL, epsilon=1, bounds=PER_GROUP)
    assert s.remaining() == veil.Budget(epsilon=0.5)


def test_a_group_of_a_group_key_resolves_by_alias_then_column() -> None:
    s = _session(PEOPLE)
    agg = aggregate_of(
        s.plan("SELECT r AS region, AVG(x) AS m FROM t WHERE r IN ('a') GROUP BY region")
    )
    assert group_key(agg, "x", "region").alias == "region"
    assert group_key(agg, "x", "r").alias == "region"


def test_veil_bounds_by_a_key_then_the_query_pays_for_the_bounds_once() -> None:
    s = _session(PEOPLE)
    (found,) = find_bounds(
        s, "t", ["x"], epsilon=Fraction(1, 10), where="r IN ('a', 'b', 'c', 'd')", by="r"
    )
    assert found.key == "r"
    result = s.sql(SQL, epsilon=1, bounds=PER_GROUP)
    (chosen,) = result.auto_bounds
    assert chosen.cached
    assert chosen.value == found.value
    assert s.remaining() == veil.Budget(epsilon=9)


def test_veil_bounds_by_refuses_a_key_it_cannot_group_by() -> None:
    s = _session(PEOPLE)
    with pytest.raises(InvalidArgumentError, match=r"by='x \+ 1' must be a column"):
        find_bounds(s, "t", ["x"], epsilon=1, by="x + 1")
    with pytest.raises(InvalidArgumentError, match=r"the groups of 'r' are not public"):
        find_bounds(s, "t", ["x"], epsilon=1, by="r")
    assert s.remaining() == veil.Budget(epsilon=10)


def test_veil_bounds_by_is_regenerated_from_its_key_never_spliced() -> None:
    # a trailing comment once swallowed the rest of the step's query; the key is now written
    # from its parse tree, so 'r --' asks exactly what 'r' asks (the same cached answer)
    s = _session(PEOPLE)
    where = "r IN ('a', 'b', 'c', 'd')"
    (found,) = find_bounds(s, "t", ["x"], epsilon=Fraction(1, 10), where=where, by="r")
    (again,) = find_bounds(s, "t", ["x"], epsilon=Fraction(1, 10), where=where, by="r -- x")
    assert again.cached
    assert again.value == found.value
    with pytest.raises(InvalidArgumentError, match="must be a column"):
        find_bounds(s, "t", ["x"], epsilon=1, where=where, by="r, COUNT(*) AS m FROM t --")
    assert s.remaining() == veil.Budget(epsilon=Fraction(99, 10))


def test_a_catalog_owners_bounds_are_the_outer_range_of_every_group(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    PEOPLE.to_parquet(path)
    # an in-memory catalog ledger, so that the draws can come from a seeded source: b's top
    # is a DP choice, below the owner's end (8192) in about 1 run in 20 at ε = 1
    catalog = Catalog("sqlite://")
    catalog.add_dataset(
        "t",
        source=Source("file", path=str(path)),
        bounds={"x": (0, 10_000)},
        domains={"r": ["a", "b", "c", "d"]},
    )
    catalog.ledger.grant("ana", "t", veil.Budget(epsilon=5))
    with veil.Session.from_catalog(catalog, "t", analyst="ana") as s:
        result = s.sql(
            "SELECT r, AVG(x) AS m FROM t GROUP BY r", epsilon=1, bounds=PER_GROUP,
            source=SeededSource("owner-range"),
        )  # fmt: skip
        (chosen,) = result.auto_bounds
        assert chosen.outer == (0, 10_000)
        assert all(0 <= g.lower < g.upper <= 10_000 for g in chosen.groups)
        assert max(g.upper for g in chosen.groups) == 10_000  # b is cut at the owner's end


# -- neighbouring datasets ----------------------------------------------------------------------
NEIGHBOUR_VALUES = [
    1e16, -1.0, 0.1, -0.0, 5e-324, 2.0**53, 1e308, -1e308, math.inf, -math.inf, math.nan, None,
    0.5, 3.0, 3.0, 70.0, 2.0**62, -(2.0**62), 2.0**63,
]  # fmt: skip


def _units(values: list[float | None]) -> pd.DataFrame:
    n = len(values)
    return pd.DataFrame(
        {
            "x": pd.array(values, dtype="Float64"),
            "uid": [i % 4 for i in range(n)],
            "r": [("a", "b", "c", "z")[(i // 3) % 4] for i in range(n)],
        }
    )


def test_removing_a_unit_moves_the_cells_counts_by_at_most_the_sensitivity_in_all() -> None:
    full = _units(NEIGHBOUR_VALUES * 2)
    for unit in range(4):
        less = full[full["uid"] != unit].reset_index(drop=True)
        changes = []
        for frame in (full, less):
            s = _session(frame, privacy_unit="uid", max_groups=2, max_rows_per_group=2)
            agg = aggregate_of(s.plan(SQL, bounds={"x": (0, 1)}))
            (step,) = _steps(s, agg, ["x"], Fraction(1), _Limits(2, 2, None), by={"x": agg.keys[0]})
            compiled = aggregate_of(s._compile(step.plan, Fraction(1), None, None, 2, 2))
            changes.append(exact(s.engine, compiled, salt=99))
        (m,) = changes[0].agg.measurements
        assert m.sensitivity == 4  # max_groups · max_rows_per_group, as without groups
        before, after = changes[0].stats, changes[1].stats
        moved = sum(
            abs(before.get(k, {}).get(m.name, 0) - after.get(k, {}).get(m.name, 0))
            for k in set(before) | set(after)
        )
        assert moved <= m.sensitivity, (unit, moved)


def test_neighbours_have_the_same_outcome_and_the_same_shape_of_answer() -> None:
    full = _units(NEIGHBOUR_VALUES * 2)
    outcomes = []
    for unit in (None, *range(4)):
        frame = full if unit is None else full[full["uid"] != unit].reset_index(drop=True)
        s = _session(frame, privacy_unit="uid")
        try:
            result = s.sql(SQL, epsilon=1, bounds=PER_GROUP, source=SeededSource(f"g{unit}"))
            (chosen,) = result.auto_bounds
            shape = [g.label for g in chosen.groups if g.lower < g.upper]
            outcomes.append(("released", len(result.rows), str(shape), str(result.cost)))
        except veil.VeilError as exc:  # pragma: no cover - would be the bug this test catches
            outcomes.append(("refused", type(exc).__name__, str(exc), ""))
    assert len(set(outcomes)) == 1, outcomes


def test_the_owners_cap_on_one_query_holds_the_whole_request(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    PEOPLE.to_parquet(path)
    catalog = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}")
    catalog.add_dataset(
        "t", source=Source("file", path=str(path)), bounds={"x": (0, 10_000)}, max_epsilon=2
    )
    catalog.ledger.grant("ana", "t", veil.Budget(epsilon=5))
    sql = "SELECT AVG(x) AS m FROM t"
    with veil.Session.from_catalog(catalog, "t", analyst="ana") as s:
        # 0.21 + 1.89: each part is under the cap of 2, the whole is not
        for ask in (s.sql, s.explain):
            with pytest.raises(InvalidArgumentError, match="above the largest cost of one query"):
                ask(sql, epsilon=Fraction(21, 10), bounds="auto")
        with pytest.raises(InvalidArgumentError, match="above the largest cost of one query"):
            find_bounds(s, "t", ["x"], epsilon=Fraction(21, 10))
        assert s.remaining() == veil.Budget(epsilon=5)
        assert s.sql(sql, epsilon=2, bounds="auto").cost == veil.Budget(epsilon=2)


@pytest.mark.slow
def test_per_group_auto_bounds_run_on_postgresql_as_on_duckdb() -> None:
    pytest.importorskip("psycopg")
    import pyarrow as pa

    import postgres_support

    table = pa.table({"x": [float(v) for v in range(1, 401)] * 2, "r": ["a"] * 400 + ["b"] * 400})
    qualified = postgres_support.load(table)
    sql = "SELECT r, AVG(x) AS m FROM t WHERE r IN ('a', 'b', 'z') GROUP BY r"
    with veil.Session.postgres(
        postgres_support.PG_URL, {"t": qualified}, budget=veil.Budget(epsilon=2)
    ) as s:
        pg = s.sql(sql, epsilon=1, bounds=PER_GROUP, source=SeededSource("pg"))
    local = _session(table.to_pandas(), epsilon=2)
    duck = local.sql(sql, epsilon=1, bounds=PER_GROUP, source=SeededSource("pg"))
    assert pg.auto_bounds[0].value == duck.auto_bounds[0].value
    assert pg.rows == duck.rows
    assert pg.cost == duck.cost == veil.Budget(epsilon=1)


def test_a_group_labelled_auto_with_a_pair_is_an_explicit_bound() -> None:
    frame = pd.DataFrame({"x": [1.0, 2.0] * 20, "k": ["auto", "b"] * 20})
    s = _session(frame)
    sql = "SELECT k, SUM(x) AS s FROM t WHERE k IN ('auto', 'b') GROUP BY k"
    explicit = {"x": {"auto": (0, 1), "b": (0, 2)}}
    assert s.sql(sql, epsilon=1, bounds=explicit).auto_bounds == ()
    with pytest.raises(veil.VeilError, match="not exactly the groups"):
        s.sql(sql, epsilon=1, bounds={"x": {"auto": (0, 1)}})
