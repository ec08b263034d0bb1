"""``limits="auto_groups"`` (veil.autolimits): max_groups, max_rows_per_group and max_rows
chosen from one noisy joint histogram per unit (distinct groups × rows) — its exact counts and
sensitivity, the candidates, the choice, the whole flow through a session (cost, explain,
refusals before any charge, neighbouring datasets), the builder, the CLI, PostgreSQL and
Spark (issue 17).
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
from veil.autolimits import _prepare, candidates, choose_joint, choose_limit
from veil.autolimits_choice import joint_candidates, powers
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
    return _prepare(s, text, **{**base, **options})  # type: ignore[arg-type]


def _exact(s: veil.Session, text: str = SQL) -> list[int]:
    """The joint histogram's exact counts, one per cell, groups outer."""
    p = _prepared(s, text)
    compiled = aggregate_of(s._compile(p.hist, p.step_epsilon, None, None, 1, 1, None))
    got = exact(s.engine, compiled)
    g_labels, t_labels = (k.labels() for k in compiled.keys)
    return [got.stats.get((g, t), {}).get("count", 0) for g in g_labels for t in t_labels]


def _grids(s: veil.Session) -> tuple[tuple[int, ...], tuple[int, ...]]:
    p = _prepared(s)
    g_key, t_key = p.hist.keys
    return (
        tuple(int(e) for e in g_key.edges[:-1]),
        tuple(int(e) for e in t_key.edges[:-1]),
    )


def _bin(grid: tuple[int, ...], value: int) -> int:
    return max(i for i, c in enumerate(grid) if c <= value)


def _cell(s: veil.Session, groups: int, rows: int) -> int:
    g_grid, t_grid = _grids(s)
    return _bin(g_grid, groups) * len(t_grid) + _bin(t_grid, rows)


# 1–5 groups per unit, 1–8 rows in each, 600 units (deterministic)
RNG = np.random.default_rng(17)
MANY = [[int(RNG.integers(1, 9))] * int(RNG.integers(1, 6)) for _ in range(600)]


# -- the joint histogram's exact counts and sensitivity ---------------------------------------
UNITS = [[1], [2, 2], [3, 1, 5], [7, 7, 7, 7], [1] * 12, [40, 1], [300]]


def test_the_joint_histogram_counts_each_unit_once_in_the_cell_of_its_groups_and_rows() -> None:
    s = _session(_table(UNITS))
    p = _prepared(s)
    g_grid, t_grid = _grids(s)
    assert g_grid == candidates(12)  # at most the 12 public states
    assert t_grid == candidates(1024)
    want = [0] * (len(g_grid) * len(t_grid))
    for per_group in UNITS:
        want[_cell(s, len(per_group), sum(per_group))] += 1
    assert _exact(s) == want
    assert p.step_loss == veil.Budget(epsilon=Fraction(1, 10))  # one step, charged once


def test_a_null_group_is_a_group_and_the_where_clause_applies() -> None:
    table = pa.table({
        "uid": pa.array([0, 0, 0, 0, 1, 1], pa.int64()),
        "state": pa.array(["s0", None, None, "s1", "s2", "s2"], pa.string()),
    })  # fmt: skip
    s = _session(table)
    counts = _exact(s)
    assert counts[_cell(s, 3, 4)] == 1  # s0, NULL, s1: three groups of four rows
    assert counts[_cell(s, 1, 2)] == 1
    assert sum(counts) == 2
    where = _exact(s, "SELECT state, COUNT(*) AS n FROM t WHERE state <> 's1' GROUP BY state")
    assert where[_cell(s, 1, 1)] == 1  # unit 0 keeps s0 alone (NULL <> 's1' is not true)
    assert where[_cell(s, 1, 2)] == 1


@pytest.mark.parametrize("unit", [0, 3, 4, 6])
def test_removing_a_unit_moves_the_joint_histogram_by_one(unit: int) -> None:
    table = _table(UNITS)
    fewer = table.filter(pc.not_equal(table["uid"], unit))
    a, b = _exact(_session(table)), _exact(_session(fewer))
    assert sum(abs(x - y) for x, y in zip(a, b, strict=True)) == 1


def test_within_and_distinct_only_qualify_a_per_unit_key() -> None:
    with pytest.raises(InvalidArgumentError, match="only qualify a per-unit key"):
        GroupKey("uid", edges=(1, 2), within=("state",))
    with pytest.raises(InvalidArgumentError, match="name them"):
        GroupKey("uid", edges=(1, 2), per_unit=True, distinct=True)


# -- the candidates and the choice (post-processing) ------------------------------------------
def test_the_candidates_are_normal_and_hold_autos() -> None:
    triples = joint_candidates(12, 1024, 1024)
    assert len(set(triples)) == len(triples)
    for t, g, r in triples:
        assert g <= min(t, 12)
        assert r <= t <= g * r
        assert g in (*powers(12), t)
        assert r in (*powers(1024), t)
    for t in candidates(1024):
        assert (t, min(t, 12), t) in triples  # limits='auto''s candidate, G at the 12 groups
    assert max(t for t, _g, _r in joint_candidates(3, 4, 12)) == 12
    assert all(g <= 3 and r <= 4 for _t, g, r in joint_candidates(3, 4, 12))


def test_where_g_and_r_do_not_bind_the_choice_is_autos() -> None:
    g_grid, t_grid = candidates(12), candidates(64)
    rng = np.random.default_rng(3)
    counts = [int(c) for c in rng.integers(0, 400, len(g_grid) * len(t_grid))]
    marginal = [sum(counts[i * len(t_grid) + j] for i in range(len(g_grid)))
                for j in range(len(t_grid))]  # fmt: skip
    triples = [(t, min(t, 12), t) for t in t_grid]
    noise = [t * 30.0 for t in t_grid]
    joint = choose_joint(g_grid, t_grid, counts, Fraction(1, 2), triples, noise)
    alone = choose_limit(t_grid, marginal, noise, Fraction(1, 2))
    assert joint.max_rows == alone.limit
    assert abs(joint.dropped - alone.dropped) < 1e-9
    assert abs(joint.rows - alone.rows) < 1e-6


def test_the_choice_trades_rows_dropped_against_noise() -> None:
    g_grid, t_grid = candidates(4), candidates(32)
    counts = [0] * (len(g_grid) * len(t_grid))
    counts[3 * len(t_grid) + t_grid.index(24)] = 1000  # every unit: 4 or more groups, 24–31 rows
    triples = list(joint_candidates(4, 32, 32))
    free = choose_joint(g_grid, t_grid, counts, Fraction(10), triples, [0.0] * len(triples))
    assert free.max_rows >= 27.5
    assert free.max_groups == 4
    assert free.max_rows_per_group >= 7
    assert free.dropped == 0  # no noise: keep every row
    assert abs(free.rows - 27.5 * 1000) < 1
    # noise growing with R alone (Gaussian-like: many groups of few rows are cheap)
    by_r = [10.0**6 * r for _t, _g, r in triples]
    tight = choose_joint(g_grid, t_grid, counts, Fraction(10), triples, by_r)
    assert tight.max_rows_per_group == 1
    assert tight.max_groups == 4
    assert abs(tight.dropped - (1 - 4 / 27.5)) < 1e-9
    assert 0 <= tight.bar <= 1


def test_any_counts_give_a_candidate() -> None:
    g_grid, t_grid = candidates(4), candidates(4)
    triples = list(joint_candidates(4, 4, 4))
    noise = [float(g * r) for _t, g, r in triples]
    for counts in ([0] * 16, [-5, 3, -100, 10**9] * 4, [7] * 16):
        c = choose_joint(g_grid, t_grid, counts, Fraction(2), triples, noise)
        assert (c.max_rows, c.max_groups, c.max_rows_per_group) in triples
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
        f"max_rows_per_group={chosen.max_rows_per_group}, max_rows={chosen.max_rows} "
        "(auto_groups;"
    )
    assert "expected dropped" in result.notes[0]
    assert 1 <= chosen.max_groups <= 12
    assert chosen.max_rows <= chosen.max_groups * chosen.max_rows_per_group
    assert chosen.max_groups <= chosen.max_rows
    assert chosen.max_rows_per_group <= chosen.max_rows
    truth = sum(sum(u) for u in MANY)
    assert abs(chosen.rows - truth) < 0.1 * truth  # the noisy total the bias is a share of
    assert 0 <= chosen.dropped <= 1
    assert 0 <= chosen.dropped_bar <= 1


def test_explain_shows_the_joint_histogram_its_cost_and_reads_nothing() -> None:
    s = _session(_table(MANY), epsilon=1)
    explained = s.explain(SQL, epsilon=Fraction(6, 5), limits="auto_groups", limits_share=0.25)
    assert explained.cost == veil.Budget(epsilon=Fraction(6, 5))
    assert explained.covered is False
    note = next(n for n in explained.notes if n.startswith("auto limits (auto_groups)"))
    assert "distinct groups × rows per unit over 7 × 20 cells" in note
    assert "max_groups candidates 1, 2, 3, 4, 6, 8, 12;" in note
    assert "max_rows candidates 1, 2, 3, 4, 6, 8, 12, 16, 24, 32," in note
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
        (SQL, {"target": {"n": "±5"}}, "pass target= or epsilon=1, not both"),
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
    assert _grids(s) == ((1, 2, 3), candidates(12))
    assert {g for _t, g, _r in p.limits} == {1, 2, 3}
    assert {r for _t, _g, r in p.limits} == {1, 2, 3, 4}
    assert p.grid == candidates(12)
    result = s.sql(SQL, epsilon=1, limits="auto_groups", source=SeededSource("cap"))
    assert result.auto_limits.max_groups <= 3
    assert result.auto_limits.max_rows_per_group <= 4
    assert result.auto_limits.max_rows <= 12


@pytest.mark.parametrize("public", [True, False])
def test_neighbours_have_the_same_outcome_and_the_same_shape_of_answer(public: bool) -> None:
    outcomes = set()
    base = [[1], [3, 3], [8, 1, 1], [20] * 5, [2000], [5, 5]] * 8
    for unit in (None, 0, 4, 47):
        table = _table(base)
        if unit is not None:
            table = table.filter(pc.not_equal(table["uid"], unit))
        if public:
            s = _session(table)
            keys: dict[str, object] = {}
        else:  # unknown keys: partition selection, the Gaussian mechanism at some triples
            s = veil.Session.local(
                {"t": table}, privacy_unit="uid", budget=veil.Budget(epsilon=10, delta=1e-3)
            )
            keys = {"delta": 1e-6}
        result = s.sql(
            SQL, epsilon=1, limits="auto_groups", source=SeededSource(f"n{unit}"), **keys
        )  # type: ignore[arg-type]
        line = result.notes[0]
        shape = (line.split("=")[0], len(result.notes), str(result.cost))
        released = len(result.rows) if public else None  # partition selection's is DP output
        outcomes.add((shape, released, str(s.remaining())))
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
    assert "distinct groups" in out
    code, out, err = invoke(
        "query", "SELECT COUNT(*) AS n FROM t", "--table", f"t={path}", "--privacy-unit", "uid",
        "--epsilon", "1", "--limits", "auto_groups",
    )  # fmt: skip
    assert code != 0
    assert "--limits auto_groups needs a GROUP BY" in out + err


def _with_null() -> pa.Table:
    null = pa.table({"uid": pa.array([0, 0], pa.int64()), "state": pa.array([None, None])})
    return pa.concat_tables([_table(UNITS), null.cast(_table(UNITS).schema)])


@pytest.mark.slow
def test_the_joint_histogram_on_postgresql_as_on_duckdb() -> None:
    pytest.importorskip("psycopg")
    import postgres_support

    table = _with_null()
    qualified = postgres_support.load(table)
    with veil.Session.postgres(
        postgres_support.PG_URL, {"t": qualified}, privacy_unit="uid",
        budget=veil.Budget(epsilon=10), domains={"state": STATES},
    ) as s:  # fmt: skip
        pg = _exact(s)
    assert pg == _exact(_session(table))
    assert sum(pg) == len(UNITS)


@pytest.mark.spark
def test_the_joint_histogram_on_spark_as_on_duckdb(tmp_path: Path) -> None:
    from spark_support import spark_session

    table = _with_null()
    path = tmp_path / "t.parquet"
    pq.write_table(table, path)
    with veil.Session.spark(
        spark_session(), {"t": str(path)}, privacy_unit="uid", budget=veil.Budget(epsilon=10),
        domains={"state": STATES},
    ) as s:  # fmt: skip
        spark = _exact(s)
        where = _exact(s, "SELECT state, COUNT(*) AS n FROM t WHERE state <> 's1' GROUP BY state")
    local = _session(table)
    assert spark == _exact(local)
    assert where == _exact(
        local, "SELECT state, COUNT(*) AS n FROM t WHERE state <> 's1' GROUP BY state"
    )
    assert sum(spark) == len(UNITS)
