"""``limits="auto"`` (veil.autolimits): the public grid, the per-unit histogram's exact counts
and sensitivity, the choice, and the whole flow through a session — cost, cache, refusals
before any charge, neighbouring datasets (pre-noise counts and outcomes), PostgreSQL.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import veil
from support import SeededSource
from system.prenoise import exact
from veil.autolimits import (
    MAX_CAP,
    _prepare,
    candidates,
    choose_limit,
    histogram_edges,
)
from veil.catalog import Catalog, Source
from veil.errors import InvalidArgumentError
from veil.plan.canonical import canonical
from veil.plan.nodes import GroupKey
from veil.plan.tree import aggregate_of

SQL = "SELECT COUNT(*) AS n FROM t"


def _table(rows_per_unit: list[int]) -> pa.Table:
    uid = np.repeat(np.arange(len(rows_per_unit)), rows_per_unit)
    return pa.table({"uid": uid, "x": np.linspace(0, 1, len(uid))})


def _session(table: pa.Table, epsilon: float = 10, **options: object) -> veil.Session:
    return veil.Session.local(
        {"t": table},
        privacy_unit="uid",
        budget=veil.Budget(epsilon=epsilon),
        **options,  # type: ignore[arg-type]
    )


def _prepared(s: veil.Session, text: str = SQL, **options: object):  # type: ignore[no-untyped-def]
    base: dict[str, object] = dict(
        epsilon=1, delta=None, bounds=None, limits="auto", share=None, domains=None,
        given=(None, None, None), quantile_buckets=None,
    )  # fmt: skip
    return _prepare(s, text, **{**base, **options})  # type: ignore[arg-type]


MANY = [1 + (i % 20) for i in range(2000)]  # 1–20 rows per unit, 100 units each


# -- the grid --------------------------------------------------------------------------------
def test_the_candidates_are_powers_of_two_and_their_halves_up_to_the_cap() -> None:
    assert candidates(16) == (1, 2, 3, 4, 6, 8, 12, 16)
    assert candidates(10) == (1, 2, 3, 4, 6, 8, 10)
    assert candidates(1) == (1,)
    assert candidates(MAX_CAP)[-1] == MAX_CAP
    edges = histogram_edges(candidates(4))
    assert edges == (1, 2, 3, 4, Fraction(2) ** 62)


def test_a_per_unit_key_changes_the_plan_fingerprint() -> None:
    s = _session(_table([1, 2]))
    p = _prepared(s)
    plain = GroupKey("x", edges=p.hist.keys[0].edges, alias="rows")
    assert canonical(p.hist) != canonical(
        type(p.hist)(child=p.hist.child, keys=(plain,), aggregates=p.hist.aggregates,
                     privacy_unit="uid")
    )  # fmt: skip


def test_a_per_unit_key_must_name_the_privacy_unit() -> None:
    s = _session(_table([1, 2]))
    p = _prepared(s)
    wrong = GroupKey("x", edges=p.hist.keys[0].edges, alias="rows", per_unit=True)
    with pytest.raises(veil.VeilError, match="per-unit key bins the rows of the privacy unit"):
        type(p.hist)(child=p.hist.child, keys=(wrong,), aggregates=p.hist.aggregates,
                     privacy_unit="uid")  # fmt: skip


# -- the histogram step's exact counts and sensitivity -----------------------------------------
def _exact_histogram(s: veil.Session, text: str = SQL) -> list[int]:
    p = _prepared(s, text)
    compiled = aggregate_of(s._compile(p.hist, p.step_epsilon, None, None, 1, 1, None))
    got = exact(s.engine, compiled)
    labels = compiled.keys[0].labels()
    return [got.stats.get((label,), {}).get("count", 0) for label in labels]


def test_the_histogram_counts_each_unit_once_in_the_bin_of_its_rows() -> None:
    s = _session(_table([1, 1, 2, 3, 5, 7, 40, 2000]))
    counts = _exact_histogram(s)
    grid = _prepared(s).grid
    expected = [0] * len(grid)
    for r in (1, 1, 2, 3, 5, 7, 40, 2000):
        expected[max(i for i, c in enumerate(grid) if c <= r)] += 1
    assert counts == expected
    assert _prepared(s).step_loss == veil.Budget(epsilon=Fraction(1, 10))


def test_the_histogram_counts_rows_after_the_where_clause() -> None:
    s = _session(_table([4, 4]))  # x runs 0 … 1 over the 8 rows: the first unit's are < 0.5
    assert _exact_histogram(s, f"{SQL} WHERE x < 0.5") == [0, 0, 0, 1] + [0] * 32


@pytest.mark.parametrize("unit", [0, 3, 7])
def test_removing_a_unit_moves_one_bin_by_one(unit: int) -> None:
    rows = [1, 2, 2, 3, 6, 9, 17, 30]
    full = _exact_histogram(_session(_table(rows)))
    table = _table(rows)
    kept = table.filter(pc.not_equal(table["uid"], unit))
    fewer = _exact_histogram(_session(kept))
    assert sum(abs(a - b) for a, b in zip(full, fewer, strict=True)) == 1


# -- the choice ------------------------------------------------------------------------------
def test_the_choice_trades_rows_dropped_against_noise() -> None:
    grid = candidates(32)  # 1 2 3 4 6 8 12 16 24 32
    counts = [0, 0, 0, 0, 0, 0, 0, 1000, 0, 0]  # every unit has 16–23 rows
    cheap = choose_limit(grid, counts, [float(t) for t in grid], Fraction(1))
    assert cheap.limit == 24  # no bias at 24, and its noise (24) is below 1000 × 3.5 dropped
    costly = choose_limit(grid, counts, [1e6 * t for t in grid], Fraction(1))
    assert costly.limit == 1  # noise dominates: keep one row each
    assert costly.dropped == pytest.approx(18.5 / 19.5)


def test_noise_below_the_threshold_in_far_bins_does_not_fake_a_tail() -> None:
    grid = candidates(1024)
    counts = [500, 500, 500] + [0] * (len(grid) - 3)
    counts[-2] = 30  # a far bin's noise, below τ = ⌈10·ln(400)⌉ = 60
    chosen = choose_limit(grid, counts, [t / 0.9 for t in grid], Fraction(10))
    assert chosen.limit == 3
    assert chosen.dropped == 0


def test_any_counts_give_a_candidate() -> None:
    grid = candidates(64)
    for counts in ([0] * len(grid), [-(2**40)] * len(grid), [2**40] * len(grid)):
        assert choose_limit(grid, counts, [1.0] * len(grid), Fraction(3)).limit in grid


# -- the flow --------------------------------------------------------------------------------
def test_auto_limits_charge_the_whole_epsilon_and_say_the_choice() -> None:
    s = _session(_table(MANY))
    result = s.sql(SQL, epsilon=1, limits="auto", source=SeededSource("flow"))
    chosen = result.auto_limits
    # 20 rows at most: 20 and 24 drop nothing (the bin [20, 24) taken at its midpoint, 21.5)
    assert chosen.max_rows in (20, 24)
    assert result.cost == veil.Budget(epsilon=1)
    assert s.remaining() == veil.Budget(epsilon=9)
    assert result.notes[0].startswith(f"auto limits: max_rows={chosen.max_rows} ")
    assert "expected dropped" in result.notes[0]
    assert 0 <= chosen.dropped <= 1
    assert 0 <= chosen.dropped_bar <= 1
    assert abs(result.values[0][0] - sum(MANY)) < 0.1 * sum(MANY)


def test_the_histogram_is_cached_for_another_query_on_the_same_rows() -> None:
    s = _session(_table(MANY))
    s.sql(SQL, epsilon=1, limits="auto")
    again = s.sql("SELECT SUM(x) AS s FROM t", epsilon=1, limits="auto", bounds={"x": (0, 1)})
    assert again.auto_limits.cached
    assert again.cost == veil.Budget(epsilon=Fraction(9, 10))


def test_explain_shows_the_steps_cost_and_reads_nothing() -> None:
    s = _session(_table(MANY), epsilon=1)
    explained = s.explain(SQL, epsilon=Fraction(6, 5), limits="auto", limits_share=0.25)
    assert explained.cost == veil.Budget(epsilon=Fraction(6, 5))
    assert explained.covered is False
    assert any("histogram of rows per unit" in n and "ε=0.3" in n for n in explained.notes)
    assert s.remaining() == veil.Budget(epsilon=1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"limits": "yes"}, "limits='yes' is not understood"),
        ({"limits": "auto", "limits_share": 1}, "limits_share must lie strictly between"),
        ({"limits": "auto", "limits_share": 0}, "limits_share must lie strictly between"),
        ({"limits": "auto", "max_rows": 5}, "max_rows=5 is given too"),
        ({"limits": "auto", "max_groups": 2}, "max_groups=2 is given too"),
        ({"limits": "auto", "target": {"n": "±5"}}, "pass target= or epsilon=1, not both"),
        ({"limits": "auto", "bounds_share": 0.2}, "no bounds are 'auto'"),
        ({"limits_share": 0.2}, "limits is not 'auto'"),
    ],
)
def test_bad_requests_are_refused_free(options: dict[str, object], message: str) -> None:
    s = _session(_table(MANY))
    with pytest.raises(InvalidArgumentError, match=message):
        s.sql(SQL, epsilon=1, **options)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=message):
        s.explain(SQL, epsilon=1, **options)  # type: ignore[arg-type]
    assert s.remaining() == veil.Budget(epsilon=10)


def test_no_privacy_unit_is_refused_free() -> None:
    s = veil.Session.local({"t": _table(MANY)}, budget=veil.Budget(epsilon=10))
    with pytest.raises(InvalidArgumentError, match="no privacy unit"):
        s.sql(SQL, epsilon=1, limits="auto")
    assert s.remaining() == veil.Budget(epsilon=10)


def test_a_query_with_no_count_or_sum_is_refused_free() -> None:
    s = _session(_table(MANY))
    with pytest.raises(InvalidArgumentError, match="counts and sums"):
        s.sql("SELECT MEDIAN(x) AS m FROM t", epsilon=1, limits="auto", bounds={"x": (0, 1)})
    assert s.remaining() == veil.Budget(epsilon=10)


def test_a_catalog_that_fixes_the_limits_is_refused_and_one_that_caps_them_caps(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(_table(MANY), path)
    for limit in (1, 10):  # the owner's (1, 1, 1), and (3, 4, 10): T ≤ 10, G ≤ 3, R ≤ 4
        catalog = Catalog(f"sqlite:///{tmp_path / f'ledger{limit}.db'}")
        g, r = (1, 1) if limit == 1 else (3, 4)
        catalog.add_dataset(
            "t", source=Source("file", path=str(path)), privacy_unit="uid", max_rows=limit,
            max_groups=g, max_rows_per_group=r,
        )  # fmt: skip
        catalog.ledger.grant("ana", "t", veil.Budget(epsilon=10))
        with veil.Session.from_catalog(catalog, "t", analyst="ana") as s:
            if limit == 1:
                with pytest.raises(InvalidArgumentError, match="nothing to choose"):
                    s.sql(SQL, epsilon=1, limits="auto")
                assert s.remaining() == veil.Budget(epsilon=10)
            else:
                result = s.sql(SQL, epsilon=1, limits="auto")
                chosen = result.auto_limits
                assert chosen.cap == 10
                assert chosen.max_rows <= 10
                assert chosen.max_groups <= 3
                assert chosen.max_rows_per_group <= 4


def test_neighbours_have_the_same_outcome_and_the_same_shape_of_answer() -> None:
    outcomes = set()
    base = [1, 3, 3, 8, 20, 2000, 5, 5, 5, 5] * 5
    for unit in (None, 0, 5, 49):
        table = _table(base)
        if unit is not None:
            table = table.filter(pc.not_equal(table["uid"], unit))
        s = _session(table)
        result = s.sql(SQL, epsilon=1, limits="auto", source=SeededSource(f"n{unit}"))
        line = result.notes[0]
        shape = (line.split(" (")[0].split("=")[0], len(result.notes), str(result.cost))
        outcomes.add((shape, str(s.remaining())))
    assert len(outcomes) == 1, outcomes


@pytest.mark.slow
def test_auto_limits_run_on_postgresql_as_on_duckdb() -> None:
    pytest.importorskip("psycopg")
    import postgres_support

    rows = [1, 1, 2, 3, 5, 7, 40, 300]
    qualified = postgres_support.load(_table(rows))
    with veil.Session.postgres(
        postgres_support.PG_URL,
        {"t": qualified},
        privacy_unit="uid",
        budget=veil.Budget(epsilon=10),
    ) as s:
        pg = _exact_histogram(s)
        result = s.sql(SQL, epsilon=1, limits="auto", source=SeededSource("pg"))
    local = _session(_table(rows))
    assert pg == _exact_histogram(local)
    duck = local.sql(SQL, epsilon=1, limits="auto", source=SeededSource("pg"))
    assert result.auto_limits.max_rows == duck.auto_limits.max_rows
    assert result.cost == veil.Budget(epsilon=1)


def test_the_builder_and_run_take_limits_auto_too() -> None:
    s = _session(_table(MANY))
    query = s.query("t").count(alias="n")
    explained = query.explain(epsilon=1, limits="auto")
    assert explained.cost == veil.Budget(epsilon=1)
    result = query.run(epsilon=1, limits="auto", source=SeededSource("builder"))
    assert result.auto_limits.max_rows in (20, 24)
    assert result.cost == veil.Budget(epsilon=1)
    direct = s.run(s.plan(SQL), epsilon=1, limits="auto")
    # the same histogram, hence the same limit, hence the same query: all from the cache
    assert direct.auto_limits.cached
    assert direct.cached
    assert direct.auto_limits.max_rows == result.auto_limits.max_rows
    assert s.remaining() == veil.Budget(epsilon=9)
    with pytest.raises(InvalidArgumentError, match="limits is not 'auto'"):
        s.run(s.plan(SQL), epsilon=1, limits_share=0.5)


def test_rows_without_a_unit_are_one_unit_as_in_the_bounding() -> None:
    table = pa.table({"uid": pa.array([1, 1, None, None, None], pa.int64()), "x": [0.0] * 5})
    counts = _exact_histogram(_session(table))
    assert counts[:4] == [0, 1, 1, 0]  # unit 1 has 2 rows, the NULL unit 3
    assert sum(counts) == 2
