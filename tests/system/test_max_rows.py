"""The total-rows bound end to end: what the engines keep per unit under ``max_rows``, that
removing a unit (or a person's rows, with ``contributions=k``) moves every pre-noise statistic
by at most its claimed sensitivity, and that the bound is reached (so the checks can fail)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest

from harness import HARNESSES, Harness
from system.prenoise import Exact, compile_query, exact, session_aggregate
from system.test_neighbours import BOUNDS, QUERY, QUERY_UNITS, _change, check_every_neighbour
from system.test_neighbours import dataset as adversarial
from veil import Budget
from veil.compile.statistics import reach
from veil.engines.duckdb import DuckDBEngine
from veil.plan.nodes import Contribution

LIMITS = [
    pytest.param(Contribution(3, 5, 8), id="G3-R5-T8"),
    pytest.param(Contribution(2, 3, 4), id="G2-R3-T4"),
    pytest.param(Contribution(3, 3, 2), id="T-below-R"),
    pytest.param(Contribution.of(max_rows=3), id="T3-alone"),
]


def many_rows(users: int = 40) -> pd.DataFrame:
    """1–20 rows per user over 1–4 of the states a–d (some users many rows in one)."""
    rows = []
    for uid in range(users):
        states = 1 + (uid * 3) % 4
        for r in range(1 + (uid * 7) % 20):
            rows.append((uid, "abcd"[(uid + r % states) % 4], float((uid * 13 + r * 7) % 50)))
    return pd.DataFrame(rows, columns=["uid", "g", "x"]).astype({"g": "string"})


@pytest.mark.parametrize("contribution", LIMITS)
@pytest.mark.parametrize("bounds", BOUNDS[1:])
def test_removing_a_user_under_max_rows_moves_each_statistic_by_at_most_its_sensitivity(
    bounds: tuple[float, float], contribution: Contribution
) -> None:
    for sql in (QUERY, QUERY_UNITS):
        _, worst = check_every_neighbour(
            adversarial(bounds),
            sql,
            budget=Budget(epsilon=1.0, delta=1e-6),
            bounds={"x": bounds},
            privacy_unit="uid",
            contribution=contribution,
        )
        assert worst["count" if sql == QUERY else "count_units"] > 0


@pytest.mark.parametrize("contribution", LIMITS)
def test_removing_a_user_under_max_rows_respects_the_squared_l2_bound(
    contribution: Contribution,
) -> None:
    agg, worst = check_every_neighbour(
        many_rows(),
        QUERY,
        budget=Budget(rho=0.5),
        bounds={"x": (0.0, 50.0)},
        privacy_unit="uid",
        contribution=contribution,
        domains={"g": ["a", "b", "c", "d"]},
    )
    assert {m.mechanism for m in agg.measurements} == {"discrete_gaussian", "exponential"}
    assert worst["count"] > Fraction(1, 3)


def test_the_total_bound_is_reached_so_a_claim_too_small_would_fail() -> None:
    # user 0 has 5 rows in each of a, b, c, d: at most 3 groups of 5 rows, then 8 in all —
    # removing them moves the row counts by exactly L1 = min(T, G·R) = 8
    df = pd.DataFrame(
        {"uid": [0] * 20 + [1], "g": [*list("abcd" * 5), "a"], "x": [1.0] * 21}
    ).astype({"g": "string"})
    _, worst = check_every_neighbour(
        df,
        "SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY g",
        budget=Budget(epsilon=1.0),
        bounds={"x": (0.0, 1.0)},
        privacy_unit="uid",
        contribution=Contribution(3, 5, 8),
        domains={"g": ["a", "b", "c", "d"]},
    )
    assert worst["count"] == 1
    assert worst["sum(x)"] > Fraction(99, 100)


def kept_rows(df: pd.DataFrame, c: Contribution) -> int:
    """Rows kept when every user has at most G groups: Σ_u min(T, Σ_g min(R, rows_ug))."""
    per = df.groupby(["uid", "g"]).size().clip(upper=c.max_rows_per_group).groupby("uid").sum()
    return int(per.clip(upper=c.max_rows or len(df)).sum())


@pytest.mark.parametrize("harness", HARNESSES)
def test_every_engine_keeps_at_most_t_of_each_users_own_rows(
    harness: Harness, tmp_path: Path
) -> None:
    df = many_rows(30)
    c = Contribution(4, 5, 7)  # every user has ≤ 4 groups: the group bound never binds
    session = harness.session(
        pa.Table.from_pandas(df, preserve_index=False),
        {},
        tmp_path,
        privacy_unit="uid",
        budget=Budget(epsilon=1, delta=1e-6),
        max_groups=c.max_groups,
        max_rows_per_group=c.max_rows_per_group,
        max_rows=c.max_rows,
    )
    sql = "SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY g"
    agg = session_aggregate(session, sql, epsilon=1, delta=1e-6, bounds={"x": (0.0, 50.0)})
    sums = set()
    for salt in (1, 2):
        stats = exact(session.engine, agg, salt=salt).stats
        assert sum(s["count"] for s in stats.values()) == kept_rows(df, c)
        sums.add(sum(s["sum(x)"] for s in stats.values()))
    assert len(sums) == 2  # the salt chooses which rows: not the same rows every query
    session.close()


def test_contributions_without_an_id_column_bound_each_persons_rows() -> None:
    # no privacy unit: each person (pid, invisible to veil) has at most k = 3 rows; removing
    # all of one person's rows stays within the sensitivity of contributions=3
    base = adversarial((0.0, 1.0), units=8)
    pid = [i // 3 for i in range(len(base))]
    df = base.assign(pid=pid)
    engine = DuckDBEngine({"t": df})
    agg = compile_query(
        engine,
        QUERY,
        budget=Budget(epsilon=1.0, delta=1e-6),
        bounds={"x": (0.0, 1.0)},
        contribution=Contribution(max_rows=3),
    )
    assert reach(agg).total == 3
    assert agg.privacy_unit is None
    full = exact(engine, agg)
    worst = Fraction(0)
    for p in sorted(set(pid)):
        rest = df[df["pid"] != p].reset_index(drop=True)
        less = exact(DuckDBEngine({"t": rest}), agg)
        for name, change in _change(agg, full, less).items():
            sens = next(x.sensitivity for x in agg.measurements if x.name == name)
            assert change <= sens, (p, name, change, sens)
            if name == "count":
                worst = max(worst, change / sens)
    assert worst == 1  # a person with 3 rows moves the count by the whole L1 of 3


@pytest.mark.parametrize("harness", HARNESSES)
def test_a_unit_kept_in_a_group_is_counted_there_even_with_duplicate_rows(
    harness: Harness, tmp_path: Path
) -> None:
    # identical rows tie in the hash order; the total window breaks ties by __rn, so the row
    # count_units reads (__rn = 1) is kept whenever any of the unit's rows in the group is,
    # whatever order an engine gives tied rows in two windows
    t = pa.table({"uid": [7] * 9, "g": list("aaabbbccc"), "x": [1.0] * 9})
    sql = "SELECT g, COUNT(*) AS n, COUNT(DISTINCT uid) AS u FROM t GROUP BY g"
    with harness.session(
        t, {}, tmp_path, privacy_unit="uid", budget=Budget(epsilon=1), max_rows=2
    ) as session:
        agg = session_aggregate(session, sql, epsilon=1, domains={"g": ["a", "b", "c"]})
        for salt in range(1, 13):
            stats = exact(session.engine, agg, salt=salt).stats
            assert sum(s["count"] for s in stats.values()) == 2
            for s in stats.values():
                assert (s["count"] > 0) == (s["count_units"] == 1), (salt, stats)


@pytest.mark.parametrize(
    ("contribution", "windows"),
    [
        pytest.param(Contribution(1, 5), {"__rn", "__gr"}, id="no-total"),
        pytest.param(Contribution(3, 5, 15), {"__rn", "__gr"}, id="total-above-G-R"),
        pytest.param(Contribution.of(max_rows=5), {"__rn", "__tn"}, id="total-alone"),
        pytest.param(Contribution(3, 5, 8), {"__rn", "__gr", "__tn"}, id="all-three"),
    ],
)
def test_the_bounding_emits_only_the_windows_that_can_bind(
    contribution: Contribution, windows: set[str]
) -> None:
    from veil.compile import dialect, lower, to_sql

    engine = DuckDBEngine({"t": many_rows(3)})
    agg = compile_query(
        engine,
        "SELECT g, COUNT(*) AS n FROM t GROUP BY g",
        budget=Budget(epsilon=1.0, delta=1e-6),
        bounds={},
        privacy_unit="uid",
        contribution=contribution,
    )
    sql = to_sql(lower(agg, dialect("duckdb"), salt=None).main, "duckdb")
    assert {w for w in ("__rn", "__gr", "__tn") if f'AS "{w}"' in sql} == windows
    assert ('"__rn" <= 5' in sql) == (contribution.max_rows != 5)


@pytest.mark.parametrize("contribution", LIMITS)
def test_a_users_quantile_scores_move_within_the_composed_per_group_budget(
    contribution: Contribution,
) -> None:
    # group g's scores move by at most c_g·max(q, 1 − q); calibrated to R'·max(q, 1 − q) per
    # group, the unit costs Σ_g c_g/R' ≤ spread groups' worth of ε: the sum over groups of the
    # largest score change is at most spread × the per-group sensitivity
    df = many_rows()
    engine = DuckDBEngine({"t": df})
    agg = compile_query(
        engine,
        "SELECT g, MEDIAN(x) AS med FROM t GROUP BY g",
        budget=Budget(epsilon=1.0),
        bounds={"x": (0.0, 50.0)},
        privacy_unit="uid",
        contribution=contribution,
        domains={"g": ["a", "b", "c", "d"]},
    )
    (m,) = [m for m in agg.measurements if m.statistic == "quantile"]
    spread = reach(agg).spread
    full = exact(engine, agg)
    worst = Fraction(0)
    for u in df["uid"].unique()[:15]:
        less = exact(DuckDBEngine({"t": df[df["uid"] != u].reset_index(drop=True)}), agg)
        moved = Fraction(0)
        for g in set(full.buckets[m.name]) | set(less.buckets[m.name]):
            # the largest score change in group g alone (test_neighbours' own comparison)
            one = [
                Exact(agg, {}, {m.name: {g: e.buckets[m.name].get(g, {})}}) for e in (full, less)
            ]
            moved += _change(agg, *one)[m.name]
        assert moved <= spread * m.sensitivity, (u, moved, spread, m.sensitivity)
        worst = max(worst, moved / (spread * m.sensitivity))
    assert worst > Fraction(1, 2)  # near the bound: a spread claimed too small would fail


def test_a_huge_limit_is_written_as_a_64_bit_bound() -> None:
    from veil.compile import dialect, lower, to_sql

    engine = DuckDBEngine({"t": many_rows(3)})
    agg = compile_query(
        engine,
        "SELECT g, MEDIAN(x) AS m FROM t GROUP BY g",
        budget=Budget(epsilon=1.0),
        bounds={"x": (0.0, 50.0)},
        privacy_unit="uid",
        contribution=Contribution(10**40, 10**40, 10**39),
        domains={"g": ["a", "b", "c", "d"]},
    )
    sql = to_sql(lower(agg, dialect("spark"), salt=1).main, "spark")
    assert str(10**39) not in sql
    assert f"<= {2**62}" in sql
    assert exact(engine, agg).buckets  # and it runs
