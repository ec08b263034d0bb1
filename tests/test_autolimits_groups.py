"""``limits="auto_groups"`` (veil.autolimits): max_groups and max_rows_per_group chosen
separately from two noisy per-unit histograms (distinct groups per unit, mean rows per group)
— their exact counts and sensitivity, the choice, the whole flow through a session (cost,
explain, refusals before any charge, neighbouring datasets), the builder, the CLI and
PostgreSQL (issue 17).
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
from cli_support import invoke
from support import SeededSource
from system.prenoise import exact
from veil.autolimits import _prepare_groups, candidates, choose_groups
from veil.errors import InvalidArgumentError
from veil.plan.nodes import GroupKey
from veil.plan.tree import aggregate_of

SQL = "SELECT state, COUNT(*) AS n FROM t GROUP BY state"
STATES = [f"s{i}" for i in range(12)]


def _table(units: list[list[int]]) -> pa.Table:
    """``units[u]`` lists unit u's rows per group: group k of a unit is state ``s{k}``."""
    uid: list[int] = []
    state: list[str | None] = []
    for u, per_group in enumerate(units):
        for k, n in enumerate(per_group):
            uid += [u] * n
            state += [STATES[k]] * n
    return pa.table({"uid": pa.array(uid, pa.int64()), "state": pa.array(state, pa.string())})


def _session(table: pa.Table, epsilon: float = 10) -> veil.Session:
    return veil.Session.local(
        {"t": table}, privacy_unit="uid", budget=veil.Budget(epsilon=epsilon),
        domains={"state": STATES},
    )  # fmt: skip


def _prepared(s: veil.Session, text: str = SQL, **options: object):  # type: ignore[no-untyped-def]
    base: dict[str, object] = dict(
        epsilon=1, delta=None, bounds=None, limits="auto_groups", share=None, domains=None,
        given=(None, None, None), quantile_buckets=None,
    )  # fmt: skip
    return _prepare_groups(s, text, **{**base, **options})  # type: ignore[arg-type]


def _exact(s: veil.Session, name: str, text: str = SQL) -> list[int]:
    p = _prepared(s, text)
    _name, hist, _grid, _scale, each = next(h for h in p.hists if h[0] == name)
    compiled = aggregate_of(s._compile(hist, each, None, None, 1, 1, None))
    got = exact(s.engine, compiled)
    labels = compiled.keys[0].labels()
    return [got.stats.get((label,), {}).get("count", 0) for label in labels]


def _bin(grid: tuple[int, ...], value: int) -> int:
    return max(i for i, c in enumerate(grid) if c <= value)


# 1–5 groups per unit, 1–8 rows in each, 600 units (deterministic)
RNG = np.random.default_rng(17)
MANY = [[int(RNG.integers(1, 9))] * int(RNG.integers(1, 6)) for _ in range(600)]


# -- the histograms' exact counts and sensitivity --------------------------------------------
def test_the_histograms_count_each_unit_once_by_its_groups_and_its_rows_per_group() -> None:
    units = [[1], [2, 2], [3, 1, 5], [7, 7, 7, 7], [1] * 12, [40, 1], [300]]
    s = _session(_table(units))
    p = _prepared(s)
    assert [h[0] for h in p.hists] == ["groups", "rows"]
    g_grid, r_grid = p.g_grid, p.r_grid
    assert g_grid == candidates(12)  # at most the 12 public states
    want_g = [0] * len(g_grid)
    want_r = [0] * len(r_grid)
    for per_group in units:
        want_g[_bin(g_grid, len(per_group))] += 1
        want_r[_bin(r_grid, sum(per_group) // len(per_group))] += 1
    assert _exact(s, "groups") == want_g
    assert _exact(s, "rows") == want_r
    assert p.step_loss == veil.Budget(epsilon=Fraction(1, 10))


def test_a_null_group_is_a_group_and_the_where_clause_applies() -> None:
    table = pa.table({
        "uid": pa.array([0, 0, 0, 0, 1, 1], pa.int64()),
        "state": pa.array(["s0", None, None, "s1", "s2", "s2"], pa.string()),
    })  # fmt: skip
    s = _session(table)
    grid = _prepared(s).g_grid
    groups = _exact(s, "groups")
    assert groups[_bin(grid, 3)] == 1
    assert groups[_bin(grid, 1)] == 1
    where = _exact(s, "groups", "SELECT state, COUNT(*) AS n FROM t WHERE state <> 's1' "
                                "GROUP BY state")  # fmt: skip
    assert where[_bin(grid, 1)] == 2  # unit 0 keeps s0 alone (NULL <> 's1' is not true)


@pytest.mark.parametrize("unit", [0, 3, 6])
def test_removing_a_unit_moves_each_histogram_by_one(unit: int) -> None:
    units = [[1], [2, 2], [3, 1, 5], [7, 7, 7, 7], [1] * 12, [40, 1], [300]]
    table = _table(units)
    fewer = table.filter(pc.not_equal(table["uid"], unit))
    for name in ("groups", "rows"):
        a, b = _exact(_session(table), name), _exact(_session(fewer), name)
        assert sum(abs(x - y) for x, y in zip(a, b, strict=True)) == 1


def test_within_and_distinct_only_qualify_a_per_unit_key() -> None:
    with pytest.raises(InvalidArgumentError, match="only qualify a per-unit key"):
        GroupKey("uid", edges=(1, 2), within=("state",))
    with pytest.raises(InvalidArgumentError, match="name them"):
        GroupKey("uid", edges=(1, 2), per_unit=True, distinct=True)


# -- the choice (post-processing) -----------------------------------------------------------
def test_the_choice_trades_rows_dropped_against_noise() -> None:
    g_grid, r_grid = candidates(4), candidates(8)
    groups = [0, 0, 0, 1000]  # every unit has 4 groups (the last bin: 4 or more, taken as 4)
    rows = [0, 0, 0, 0, 1000, 0]  # of 6–7 rows in each
    flat = {(g, r): 0.0 for g in g_grid for r in r_grid}
    free = choose_groups(g_grid, groups, Fraction(10), r_grid, rows, Fraction(10), flat)
    assert (free.max_groups, free.max_rows_per_group) == (4, 8)  # no noise: keep every row
    assert free.dropped == 0
    assert abs(free.rows - 4 * 6.5 * 1000) < 1
    costly = {(g, r): 10.0**6 * g * r for g, r in flat}
    tight = choose_groups(g_grid, groups, Fraction(10), r_grid, rows, Fraction(10), costly)
    assert (tight.max_groups, tight.max_rows_per_group) == (1, 1)
    assert tight.dropped > 0.9
    assert 0 <= tight.bar <= 1


def test_any_counts_give_a_candidate() -> None:
    g_grid, r_grid = candidates(4), candidates(4)
    noise = {(g, r): float(g * r) for g in g_grid for r in r_grid}
    for counts in ([0, 0, 0, 0], [-5, 3, -100, 10**9], [7, 7, 7, 7]):
        c = choose_groups(g_grid, counts, Fraction(2), r_grid, counts[::-1], Fraction(2), noise)
        assert (c.max_groups, c.max_rows_per_group) in noise
        assert 0 <= c.dropped <= 1
        assert 0 <= c.bar <= 1


# -- the flow --------------------------------------------------------------------------------
def test_auto_groups_charge_the_whole_epsilon_and_say_the_choice() -> None:
    s = _session(_table(MANY))
    result = s.sql(SQL, epsilon=5, limits="auto_groups", source=SeededSource("groups"))
    chosen = result.auto_limits
    assert chosen.mode == "auto_groups"
    assert result.cost == veil.Budget(epsilon=5)
    assert s.remaining() == veil.Budget(epsilon=5)
    assert chosen.loss == veil.Budget(epsilon=Fraction(1, 2))
    assert result.notes[0].startswith(
        f"auto limits: max_groups={chosen.max_groups}, "
        f"max_rows_per_group={chosen.max_rows_per_group} (auto_groups;"
    )
    assert "expected dropped" in result.notes[0]
    assert 1 <= chosen.max_groups <= 12
    assert chosen.max_rows == chosen.max_groups * chosen.max_rows_per_group
    truth = sum(sum(u) for u in MANY)
    assert abs(chosen.rows - truth) < 0.1 * truth  # the noisy total the bias is a share of
    assert 0 <= chosen.dropped <= 1
    assert 0 <= chosen.dropped_bar <= 1


def test_explain_shows_both_histograms_their_cost_and_reads_nothing() -> None:
    s = _session(_table(MANY), epsilon=1)
    explained = s.explain(SQL, epsilon=Fraction(6, 5), limits="auto_groups", limits_share=0.25)
    assert explained.cost == veil.Budget(epsilon=Fraction(6, 5))
    assert explained.covered is False
    note = next(n for n in explained.notes if n.startswith("auto limits (auto_groups)"))
    assert "distinct groups per unit" in note
    assert "rows per (unit, group)" in note
    assert "max_groups candidates 1, 2, 3, 4, 6, 8, 12;" in note
    assert "ε=0.3" in note
    assert "rows dropped (the bias)" in note
    assert s.remaining() == veil.Budget(epsilon=1)


@pytest.mark.parametrize(
    ("text", "options", "message"),
    [
        (SQL, {"limits": "groups"}, "limits='groups' is not understood"),
        (SQL, {"limits_share": 1}, "limits_share must lie strictly between"),
        (SQL, {"max_groups": 2}, "limits='auto_groups' chooses the contribution limits, but "
                                 "max_groups=2 is given too"),
        (SQL, {"bounds": "auto"}, "cannot be combined yet"),
        ("SELECT COUNT(*) AS n FROM t", {}, "no GROUP BY"),
    ],
)  # fmt: skip
def test_bad_requests_are_refused_free(text: str, options: dict[str, object], message: str) -> None:
    s = _session(_table(MANY))
    options = {"limits": "auto_groups", **options}
    with pytest.raises(InvalidArgumentError, match=message):
        s.sql(text, epsilon=1, **options)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=message):
        s.explain(text, epsilon=1, **options)  # type: ignore[arg-type]
    assert s.remaining() == veil.Budget(epsilon=10)


def test_no_privacy_unit_is_refused_free() -> None:
    s = veil.Session.local({"t": _table(MANY)}, budget=veil.Budget(epsilon=10))
    with pytest.raises(InvalidArgumentError, match="no privacy unit"):
        s.sql(SQL, epsilon=1, limits="auto_groups")
    assert s.remaining() == veil.Budget(epsilon=10)


def test_one_public_group_and_one_row_leaves_nothing_to_choose(tmp_path: Path) -> None:
    s = veil.Session.local(
        {"t": _table(MANY)}, privacy_unit="uid", budget=veil.Budget(epsilon=10),
        max_rows_per_group=1,
    )  # fmt: skip
    with pytest.raises(InvalidArgumentError, match="nothing to choose"):
        s.sql(SQL, epsilon=1, limits="auto_groups", domains={"state": ["s0"]})
    assert s.remaining() == veil.Budget(epsilon=10)


def test_declared_limits_cap_the_candidates() -> None:
    s = veil.Session.local(
        {"t": _table(MANY)}, privacy_unit="uid", budget=veil.Budget(epsilon=10),
        domains={"state": STATES}, max_groups=3, max_rows_per_group=4,
    )  # fmt: skip
    p = _prepared(s)
    assert p.g_grid == (1, 2, 3)
    assert p.r_grid == (1, 2, 3, 4)
    result = s.sql(SQL, epsilon=1, limits="auto_groups", source=SeededSource("cap"))
    assert result.auto_limits.max_groups <= 3
    assert result.auto_limits.max_rows_per_group <= 4


def test_neighbours_have_the_same_outcome_and_the_same_shape_of_answer() -> None:
    outcomes = set()
    base = [[1], [3, 3], [8, 1, 1], [20] * 5, [2000], [5, 5]] * 8
    for unit in (None, 0, 4, 47):
        table = _table(base)
        if unit is not None:
            table = table.filter(pc.not_equal(table["uid"], unit))
        s = _session(table)
        result = s.sql(SQL, epsilon=1, limits="auto_groups", source=SeededSource(f"n{unit}"))
        line = result.notes[0]
        shape = (line.split("=")[0], len(result.notes), str(result.cost), len(result.rows))
        outcomes.add((shape, str(s.remaining())))
    assert len(outcomes) == 1, outcomes


def test_the_builder_and_run_take_auto_groups_too() -> None:
    s = _session(_table(MANY))
    query = s.query("t").group_by("state").count(alias="n")
    explained = query.explain(epsilon=1, limits="auto_groups")
    assert explained.cost == veil.Budget(epsilon=1)
    result = query.run(epsilon=1, limits="auto_groups", source=SeededSource("builder"))
    assert result.auto_limits.mode == "auto_groups"
    assert result.cost == veil.Budget(epsilon=1)
    direct = s.run(s.plan(SQL), epsilon=1, limits="auto_groups")
    assert direct.auto_limits.cached  # the same histograms: from the cache
    assert direct.auto_limits.max_groups == result.auto_limits.max_groups


def test_the_cli_takes_auto_groups(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(_table(MANY), path)
    code, out, err = invoke(
        "query", SQL, "--table", f"t={path}", "--privacy-unit", "uid", "--epsilon", "1",
        "--delta", "1e-6", "--limits", "auto_groups",
    )  # fmt: skip
    assert code == 0, err  # unknown keys: the groups are released by partition selection
    assert "auto limits: max_groups=" in out
    assert "(auto_groups;" in out
    code, out, err = invoke(
        "explain", SQL, "--table", f"t={path}", "--privacy-unit", "uid", "--epsilon", "1",
        "--delta", "1e-6", "--limits", "auto_groups",
    )  # fmt: skip
    assert code == 0, err
    assert "distinct groups per unit" in out
    code, out, err = invoke(
        "query", "SELECT COUNT(*) AS n FROM t", "--table", f"t={path}", "--privacy-unit", "uid",
        "--epsilon", "1", "--limits", "auto_groups",
    )  # fmt: skip
    assert code != 0
    assert "--limits auto_groups needs a GROUP BY" in out + err


@pytest.mark.slow
def test_auto_groups_histograms_on_postgresql_as_on_duckdb() -> None:
    pytest.importorskip("psycopg")
    import postgres_support

    units = [[1], [2, 2], [3, 1, 5], [7, 7, 7, 7], [1] * 12, [40, 1], [300]]
    table = _table(units)
    with_null = pa.concat_tables(
        [
            table,
            pa.table(
                {"uid": pa.array([0, 0], pa.int64()), "state": pa.array([None, None], pa.string())}
            ),
        ]
    )
    qualified = postgres_support.load(with_null)
    with veil.Session.postgres(
        postgres_support.PG_URL, {"t": qualified}, privacy_unit="uid",
        budget=veil.Budget(epsilon=10), domains={"state": STATES},
    ) as s:  # fmt: skip
        pg = {name: _exact(s, name) for name in ("groups", "rows")}
    local = _session(with_null)
    assert pg == {name: _exact(local, name) for name in ("groups", "rows")}
