"""``bounds="auto"`` on builder plans and ``Session.run(plan, bounds=…, bounds_share=…)``,
alone and with ``limits="auto"`` / ``"auto_groups"``: the same steps, charges, fingerprints,
answers and cached repeats as the SQL of the same question; explain reads and charges
nothing; refusals decidable without data come before anything is reserved."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import veil
from support import SeededSource
from veil.errors import InvalidArgumentError, SchemaError, SessionStateError
from veil.plan.tree import aggregate_of

SQL = "SELECT SUM(x) AS s FROM t"
GROUPED = "SELECT g, AVG(x) AS m FROM t WHERE g IN ('a', 'b', 'c') GROUP BY g"
MANY = [1 + (i % 20) for i in range(2000)]  # 1–20 rows per unit, 100 units each


def _table(rows_per_unit: list[int] = MANY) -> pa.Table:
    uid = np.repeat(np.arange(len(rows_per_unit)), rows_per_unit)
    x = np.linspace(0, 300, len(uid))
    return pa.table({
        "uid": uid, "x": x, "y": np.arange(len(uid)) % 50,
        "g": np.array(["a", "b", "c"])[uid % 3], "name": np.array(["p", "q"])[uid % 2],
    })  # fmt: skip


def _session(table: pa.Table | None = None, epsilon: float = 10, **options: Any) -> veil.Session:
    return veil.Session.local(
        {"t": _table() if table is None else table},
        privacy_unit="uid",
        budget=veil.Budget(epsilon=epsilon),
        **options,
    )


def _charges(s: veil.Session) -> list[tuple[Fraction, str]]:
    """(ε, fingerprint) of every charge, in order."""
    return [
        (r.loss.eps, r.fingerprint or "")
        for r in s.ledger.history(s.analyst, s.dataset)
        if r.event == "charge"
    ]


Ask = Callable[[veil.Session, dict[str, Any]], veil.Result]


def _by_sql(text: str) -> Ask:
    return lambda s, options: s.sql(text, **options)


def _by_run(text: str) -> Ask:
    return lambda s, options: s.run(s.plan(text), **options)


def _sum_builder(s: veil.Session, options: dict[str, Any]) -> veil.Result:
    return s.query("t").sum("x", "s").run(**options)


def _grouped_builder(s: veil.Session, options: dict[str, Any]) -> veil.Result:
    q = s.query("t").where("g IN ('a', 'b', 'c')").group_by("g").avg("x", "m")
    return q.run(**options)


CASES = [
    pytest.param(SQL, _sum_builder, {"bounds": "auto", "bounds_share": Fraction(1, 4)},
                 [Fraction(1, 4), Fraction(3, 4)], id="bounds-auto"),
    pytest.param(SQL, _sum_builder, {"bounds": {"x": "auto"}},
                 [Fraction(1, 10), Fraction(9, 10)], id="per-column"),
    pytest.param(GROUPED, _grouped_builder, {"bounds": {"x": {"auto": "g"}}},
                 [Fraction(1, 10), Fraction(9, 10)], id="per-group"),
    pytest.param(SQL, _sum_builder, {"bounds": "auto", "bounds_share": Fraction(1, 5),
                                     "limits": "auto", "limits_share": Fraction(1, 4)},
                 [Fraction(1, 4), Fraction(1, 5), Fraction(11, 20)], id="limits-auto"),
    pytest.param(GROUPED, _grouped_builder, {"bounds": {"x": {"auto": "g"}},
                                             "limits": "auto_groups"},
                 [Fraction(1, 10), Fraction(1, 10), Fraction(4, 5)], id="auto-groups"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "builder", "options", "split"), CASES)
def test_a_plan_runs_the_same_steps_charges_and_answer_as_its_sql(
    text: str, builder: Ask, options: dict[str, Any], split: list[Fraction]
) -> None:
    answers = []
    for ask in (_by_sql(text), builder, _by_run(text)):
        s = _session()
        result = ask(s, {"epsilon": 1, "source": SeededSource("same"), **options})
        charges = _charges(s)
        assert [eps for eps, _ in charges] == split
        assert sum(eps for eps, _ in charges) == 1
        assert result.cost == veil.Budget(epsilon=1)
        assert s.remaining() == veil.Budget(epsilon=9)
        answers.append((charges, result.rows, [c.value for c in result.auto_bounds],
                        result.auto_limits and result.auto_limits.max_rows))  # fmt: skip
    # the same fingerprints charged, the same noise drawn from the same source
    assert answers[0] == answers[1] == answers[2]


@pytest.mark.parametrize(("text", "builder", "options", "split"), CASES)
def test_a_plan_after_its_sql_and_its_sql_after_it_are_free_cache_hits(
    text: str, builder: Ask, options: dict[str, Any], split: list[Fraction]
) -> None:
    for first, then in ((_by_sql(text), builder), (builder, _by_sql(text)),
                        (_by_run(text), builder)):  # fmt: skip
        s = _session()
        answer = first(s, {"epsilon": 1, **options})
        assert not answer.cached
        again = then(s, {"epsilon": 1, **options})
        assert again.cached
        assert again.cost.is_zero
        assert all(c.cached for c in again.auto_bounds)
        assert again.auto_limits is None or again.auto_limits.cached
        assert again.rows == answer.rows
        assert s.remaining() == veil.Budget(epsilon=9)
        assert len(_charges(s)) == len(split)


@pytest.mark.parametrize(("text", "builder", "options", "split"), CASES)
def test_explaining_a_plan_costs_what_its_sql_explains_and_writes_nothing(
    text: str, builder: Ask, options: dict[str, Any], split: list[Fraction]
) -> None:
    s = _session()
    by_sql = s.explain(text, epsilon=1, **options)
    built = s.query("t")
    if text == SQL:
        built = built.sum("x", "s")
    else:
        built = built.where("g IN ('a', 'b', 'c')").group_by("g").avg("x", "m")
    for explained in (built.explain(epsilon=1, **options), s.explain(s.plan(text), epsilon=1,
                                                                   **options)):  # fmt: skip
        assert explained.cost == by_sql.cost == veil.Budget(epsilon=1)
        assert explained.covered
        assert explained.notes == by_sql.notes
    assert s.remaining() == veil.Budget(epsilon=10)
    assert [r.event for r in s.ledger.history(s.analyst, s.dataset)] == ["grant"]


def test_given_pairs_beside_auto_columns_are_kept_on_a_builder_plan() -> None:
    s = _session()
    q = s.query("t").avg("x", "m").sum("y", "s")
    result = q.run(epsilon=1, bounds={"x": (0, 300), "y": "auto"})
    assert [c.column for c in result.auto_bounds] == ["y"]
    by_sql = s.sql("SELECT AVG(x) AS m, SUM(y) AS s FROM t", epsilon=1,
                   bounds={"x": (0, 300), "y": "auto"})  # fmt: skip
    assert by_sql.cached  # the same question: answered from the cache, free
    assert s.remaining() == veil.Budget(epsilon=9)


def test_the_session_range_bounds_a_plans_auto_bounds() -> None:
    s = _session(bounds={"x": (5, 200)})
    (chosen,) = s.query("t").sum("x", "s").run(epsilon=1, bounds="auto").auto_bounds
    assert chosen.outer == (5, 200)
    assert 5 <= chosen.lower < chosen.upper <= 200


def test_a_plans_own_bounds_are_the_range_its_auto_bounds_stay_within() -> None:
    s = _session()
    plan = s.query("t").sum("x", "s").plan(privacy_unit="uid", bounds={"x": (10, 250)})
    (chosen,) = s.run(plan, epsilon=1, bounds="auto").auto_bounds
    assert chosen.outer == (10, 250)
    assert 10 <= chosen.lower < chosen.upper <= 250
    explained = s.explain(plan, epsilon=1, bounds="auto")
    assert "within the declared [10, 250]" in explained.notes[0]


def _no_charge(s: veil.Session) -> None:
    assert s.remaining() == veil.Budget(epsilon=10)
    assert _charges(s) == []


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"bounds": {"x": (0, 300)}, "bounds_share": 0.1}, InvalidArgumentError,
         r"bounds_share=0\.1 is the share of epsilon spent on finding bounds, but no bounds "
         r"are 'auto'"),
        ({"bounds_share": 0.1, "limits": "auto", "bounds": {"x": (0, 300)}},
         InvalidArgumentError, r"no bounds are 'auto'"),
        ({"bounds": "auto", "bounds_share": 0}, InvalidArgumentError,
         r"bounds_share must lie strictly between 0 and 1"),
        ({"bounds": "auto", "bounds_share": 1}, InvalidArgumentError,
         r"bounds_share must lie strictly between 0 and 1"),
        ({"bounds": "auto", "bounds_share": Fraction(3, 2), "limits": "auto"},
         InvalidArgumentError, r"bounds_share must lie strictly between 0 and 1"),
        ({"bounds": "auto", "bounds_share": 0.5, "limits": "auto", "limits_share": 0.5},
         InvalidArgumentError, r"leave nothing of epsilon for the query itself"),
        ({"bounds": "automatic"}, InvalidArgumentError, r"bounds='automatic' is not understood"),
        ({"bounds": {"x": "max"}}, InvalidArgumentError, r"must be a pair \(lower, upper\) or"),
        ({"bounds": {"y": "auto"}}, InvalidArgumentError, r"no aggregate of this query clamps 'y'"),
        ({"bounds": {"x": {"auto": "g"}}}, InvalidArgumentError, r"no GROUP BY key 'g'"),
        ({"bounds": "auto", "epsilon": veil.Budget(epsilon=1)}, InvalidArgumentError,
         r"pass epsilon as a number"),
    ],
)  # fmt: skip
def test_bad_requests_on_plans_are_refused_before_anything_is_reserved(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    s = _session()
    options = {"epsilon": 1, **options}
    asks = [
        lambda: s.query("t").sum("x", "s").run(**options),
        lambda: s.query("t").sum("x", "s").explain(**options),
        lambda: s.run(s.plan(SQL, bounds={"x": (0, 300)}), **options),
        lambda: s.sql(SQL, **options),  # the same refusal for SQL
    ]
    for ask in asks:
        with pytest.raises(error, match=message):
            ask()
    _no_charge(s)


def test_auto_on_a_non_numeric_column_is_refused_free_for_plans_as_for_sql() -> None:
    s = _session()
    asks = [
        lambda: s.sql("SELECT AVG(name) AS m FROM t", epsilon=1, bounds="auto"),
        lambda: s.query("t").avg("name", "m").run(epsilon=1, bounds="auto"),
        lambda: (
            s.query("t").avg("name", "m").run(epsilon=1, bounds={"name": "auto"}, limits="auto")
        ),
        lambda: s.query("t").avg("name", "m").explain(epsilon=1, bounds="auto"),
    ]
    for ask in asks:
        with pytest.raises(SchemaError, match="name"):
            ask()
    _no_charge(s)


def test_a_plan_that_clamps_nothing_is_refused_with_auto() -> None:
    s = _session()
    with pytest.raises(InvalidArgumentError, match="clamps none"):
        s.query("t").count("n").run(epsilon=1, bounds="auto")
    _no_charge(s)


def test_a_weighted_plan_is_refused_with_auto_as_weighted_sql_is() -> None:
    s = _session(weights="y", bounds={"y": (0, 50)})
    for ask in (
        lambda: s.sql(SQL, epsilon=1, bounds="auto"),
        lambda: s.query("t").sum("x", "s").run(epsilon=1, bounds="auto"),
        lambda: s.query("t").sum("x", "s").run(epsilon=1, bounds="auto", limits="auto"),
        lambda: s.run(s.plan(SQL), epsilon=1, bounds={"x": "auto"}),
        lambda: s.explain(s.plan(SQL), epsilon=1, bounds="auto"),
        lambda: s.query("t").sum("x", "s").explain(epsilon=1, bounds="auto", limits="auto"),
    ):
        with pytest.raises(InvalidArgumentError, match="weights='y' and bounds='auto'"):
            ask()
    _no_charge(s)


def test_weights_false_runs_the_unweighted_query_for_sql_and_plans_alike() -> None:
    """A session with survey weights: ``weights=False`` with auto bounds answers the
    unweighted question (the same fingerprints as the builder's unweighted plan), never the
    session's weighted one."""
    s = _session(weights="y", bounds={"y": (0, 50)})
    by_sql = s.sql(SQL, epsilon=1, bounds="auto", weights=False)
    built = s.query("t").sum("x", "s").run(epsilon=1, bounds="auto", weights=False)
    assert built.cached
    assert built.fingerprint == by_sql.fingerprint
    (chosen,) = by_sql.auto_bounds
    plain = s.query("t").sum("x", "s").run(epsilon=Fraction(9, 10), bounds={"x": chosen.pair},
                                          weights=False)  # fmt: skip
    assert plain.cached  # the unweighted query at the bounds chosen
    explained = s.explain(SQL, epsilon=1, bounds="auto", weights=False)
    assert [a.function for a in aggregate_of(explained.plan).aggregates] == ["sum"]
    assert s.remaining() == veil.Budget(epsilon=9)


def test_a_closed_session_refuses_a_plan_with_auto_bounds() -> None:
    s = _session()
    plan = s.plan(SQL)
    s.close()
    with pytest.raises(SessionStateError, match="closed"):
        s.run(plan, epsilon=1, bounds="auto")


def test_on_neighbouring_datasets_a_plan_draws_what_its_sql_draws() -> None:
    """Remove one unit (a heavy one, an ordinary one): on each dataset the plan and the SQL
    release the same values draw by draw from the same source — so the same distribution —
    and the same outcome (released, the same charges) on every neighbour."""
    full = _table([1, 3, 3, 8, 20, 300, 5, 5, 5, 5] * 5)
    outcomes = set()
    for unit in (None, 0, 5, 9):
        table = full if unit is None else full.filter(pc.not_equal(full["uid"], unit))
        seen = []
        for ask in (_by_sql(SQL), _sum_builder, _by_run(SQL)):
            s = _session(table)
            options = {"epsilon": 1, "bounds": "auto", "limits": "auto",
                       "source": SeededSource(f"n{unit}")}  # fmt: skip
            result = ask(s, options)
            seen.append((result.rows, [eps for eps, _ in _charges(s)]))
        assert seen[0] == seen[1] == seen[2], unit
        outcomes.add(("released", str(seen[0][1]), len(seen[0][0])))
    assert len(outcomes) == 1, outcomes
