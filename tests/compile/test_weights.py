"""``weights=``: the rewrite of COUNT(*), SUM and AVG into their weighted kinds, and every
refusal decided from the plan alone — before anything is reserved, at no cost."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

import veil
from veil.compile.weights import weigh
from veil.errors import BoundsError, InvalidArgumentError, SchemaError, UnsupportedQueryError
from veil.plan.canonical import fingerprint
from veil.plan.tree import aggregate_of

SQL = "SELECT g, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS m FROM t GROUP BY g"
BOUNDS = {"x": (0, 10), "w": (0, 4)}


@pytest.fixture
def session() -> veil.Session:
    df = pd.DataFrame(
        {
            "g": ["a", "b", "a", "b"],
            "x": [1.0, 2.0, 3.0, 4.0],
            "w": [0.5, 1.0, 2.0, 3.0],
            "v": [1.0, 1.0, 2.0, 2.0],
            "label": ["p", "q", "r", "s"],
            "uid": [1, 2, 3, 4],
        }
    )
    return veil.Session.local({"t": df}, budget=veil.Budget(epsilon=5), domains={"g": ["a", "b"]})


def test_weights_turn_count_sum_and_avg_into_their_weighted_kinds(
    session: veil.Session,
) -> None:
    agg = aggregate_of(session.plan(SQL, weights="w"))
    assert [(a.alias, a.function, a.column, a.weights) for a in agg.aggregates] == [
        ("n", "wcount", None, "w"),
        ("s", "wsum", "x", "w"),
        ("m", "wavg", "x", "w"),
    ]
    assert [a.value_column for a in agg.aggregates] == ["w", "x * w", "x * w"]
    assert weigh(session.plan(SQL), None) == session.plan(SQL)


def test_a_weighted_query_has_its_own_fingerprint(session: veil.Session) -> None:
    plain = session.explain(SQL, epsilon=1, bounds={"x": (0, 10)})
    by_w = session.explain(SQL, epsilon=1, bounds=BOUNDS, weights="w")
    by_v = session.explain(SQL, epsilon=1, bounds={"x": (0, 10), "v": (0, 4)}, weights="v")
    assert len({fingerprint(e.plan) for e in (plain, by_w, by_v)}) == 3


def test_weighted_releases_carry_error_bars_and_are_charged(session: veil.Session) -> None:
    r = session.sql(SQL, epsilon=1, bounds=BOUNDS, weights="w")
    assert r.columns == ("g", "n", "s", "m")
    assert all(b is not None and b > 0 for row in r.error_bars() for b in row[1:])
    assert session.remaining().eps == 4


REFUSED: list[Any] = [
    pytest.param(
        SQL, {"bounds": {"x": (0, 10), "w": (-1, 4)}, "weights": "w"}, BoundsError,
        r"weights column 'w' are \(-1, 4\): .* at least 0; pass bounds=\{'w': \(0, 4\)\}",
        id="negative-lower-bound",
    ),
    pytest.param(
        SQL, {"bounds": {"x": (0, 10)}, "weights": "w"}, BoundsError,
        r"bounds for the weights column 'w' are required .* bounds=\{'w': \(0, w_max\)\}",
        id="no-weights-bounds",
    ),
    pytest.param(
        "SELECT MEDIAN(x) AS med FROM t", {"bounds": BOUNDS, "weights": "w"},
        UnsupportedQueryError, r"QUANTILE\(x\) \('med'\) cannot be weighted: weights='w' applies",
        id="median",
    ),
    pytest.param(
        "SELECT COUNT(x) AS n FROM t", {"bounds": BOUNDS, "weights": "w"},
        UnsupportedQueryError, r"COUNT\(x\) \('n'\) cannot be weighted.*WHERE col IS NOT NULL",
        id="count-of-a-column",
    ),
    pytest.param(
        SQL, {"bounds": BOUNDS, "weights": "label"}, SchemaError,
        r"the weights column 'label' is string, not numeric", id="text-weights",
    ),
    pytest.param(
        SQL, {"bounds": BOUNDS, "weights": "nope"}, SchemaError, r"unknown column 'nope'",
        id="unknown-weights",
    ),
    pytest.param(
        SQL, {"bounds": BOUNDS, "weights": ""}, InvalidArgumentError,
        r"weights must be the name of a weights column, got ''", id="empty-name",
    ),
    pytest.param(
        SQL, {"bounds": {"x": (0, 1e60), "w": (0, 1e60)}, "weights": "w"}, BoundsError,
        r"bounds for 'x \* w' are \(0, ≈1e\+120\): veil supports bounds within ±1e100",
        id="products-beyond-the-range",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("sql", "options", "error", "match"), REFUSED)
def test_bad_weights_are_refused_before_anything_is_charged(
    session: veil.Session, sql: str, options: dict[str, Any], error: type[Exception], match: str
) -> None:
    before = session.remaining()
    with pytest.raises(error, match=match):
        session.sql(sql, epsilon=1, **options)
    with pytest.raises(error, match=match):
        session.explain(sql, epsilon=1, **options)
    assert session.remaining() == before


def test_weighting_by_the_privacy_unit_is_refused(session: veil.Session) -> None:
    df = pd.DataFrame({"uid": [1, 2], "x": [1.0, 2.0]})
    s = veil.Session.local({"t": df}, privacy_unit="uid", budget=veil.Budget(epsilon=1))
    with pytest.raises(UnsupportedQueryError, match="weighting by the privacy unit 'uid'"):
        s.sql("SELECT SUM(x) AS s FROM t", epsilon=1, bounds={"x": (0, 2)}, weights="uid")
    assert s.remaining().eps == 1


def test_a_target_on_a_weighted_count_finds_the_smallest_epsilon_meeting_it(
    session: veil.Session,
) -> None:
    sql = "SELECT g, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY g"
    e = session.explain(sql, bounds=BOUNDS, weights="w", target={"n": "±50"})
    bar = float(e.errors["n"].removeprefix("± "))
    assert 45 <= bar <= 50  # the weighted count's bar (Σ w, w ≤ 4) meets the target, tightly
    eps = e.cost.eps
    smaller = session.explain(sql, epsilon=float(eps) * 0.98, bounds=BOUNDS, weights="w")
    assert float(smaller.errors["n"].removeprefix("± ")) > 50  # 2 % less ε misses it


def test_the_sessions_weights_apply_to_sql_once_and_weights_false_opts_out() -> None:
    df = pd.DataFrame({"x": [1.0, 2.0], "w": [0.5, 1.0]})
    s = veil.Session.local(
        {"t": df}, budget=veil.Budget(epsilon=1), bounds={"x": (0, 2), "w": (0, 1)}, weights="w"
    )
    weighted = s.explain("SELECT COUNT(*) AS n FROM t", epsilon=1)
    assert [a.function for a in aggregate_of(weighted.plan).aggregates] == ["wcount"]
    plain = s.explain("SELECT COUNT(*) AS n FROM t", epsilon=1, weights=False)
    assert [a.function for a in aggregate_of(plain.plan).aggregates] == ["count"]
    # an unweighted plan passed in stays unweighted: the session's default is for SQL text
    again = s.explain(s.plan("SELECT COUNT(*) AS n FROM t", weights=False), epsilon=1)
    assert [a.function for a in aggregate_of(again.plan).aggregates] == ["count"]


@pytest.mark.parametrize(
    "calls",
    [["COUNT(*)"], ["SUM(x)"], ["AVG(x)"], ["SUM(x)", "COUNT(*)"], ["AVG(x)", "SUM(x)"]],
)
@pytest.mark.parametrize("weights", ["w", "x"])  # x weighted by itself: the product x * x
def test_every_mix_of_weighted_calls_compiles(
    session: veil.Session, calls: list[str], weights: str
) -> None:
    sql = f"SELECT g, {', '.join(f'{c} AS a{i}' for i, c in enumerate(calls))} FROM t GROUP BY g"
    needed = {weights} | ({"x"} if calls != ["COUNT(*)"] else set())
    bounds = {c: b for c, b in BOUNDS.items() if c in needed}  # no unused bounds (a warning)
    e = session.explain(sql, epsilon=1, bounds=bounds, weights=weights)
    assert set(e.errors) == {f"a{i}" for i in range(len(calls))}


def test_automatic_bounds_with_weights_are_refused_at_no_cost(session: veil.Session) -> None:
    before = session.remaining()
    for call in (session.sql, session.explain):
        with pytest.raises(InvalidArgumentError, match="weights='w' and bounds='auto' cannot"):
            call("SELECT g, AVG(x) AS m FROM t GROUP BY g", epsilon=1, bounds="auto", weights="w")
    assert session.remaining() == before
