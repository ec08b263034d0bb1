"""Accuracy targets with ``limits="auto"`` / ``"auto_groups"`` (veil.autolimits_target): the
charges add up, the released bars meet the targets at the limits chosen, refusals before the
limits step write nothing, an identical repeat is free, the outcome on neighbouring datasets,
a stop after the limits step and its free retry, the builder and ``run``, a catalog's cap.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import veil
from support import SeededSource
from veil.accuracy.search import smallest_epsilon, target_bars
from veil.accuracy.targets import parse_targets
from veil.autobounds_choice import threshold
from veil.autolimits import _noise, shape
from veil.autolimits_target import TargetedLimits, limits_epsilon
from veil.catalog import Catalog, Source
from veil.errors import BudgetExhaustedError, InvalidArgumentError
from veil.plan.tree import aggregate_of

SQL = "SELECT COUNT(*) AS n FROM t"
GROUPED = "SELECT state, COUNT(*) AS n FROM t GROUP BY state"
STATES = ("a", "b", "c")


def _table(rows_per_unit: list[int]) -> pa.Table:
    uid = np.repeat(np.arange(len(rows_per_unit)), rows_per_unit)
    state = np.array(STATES)[np.arange(len(uid)) % len(STATES)]
    return pa.table({"uid": uid, "x": np.linspace(0, 1, len(uid)), "state": state})


def _session(table: pa.Table, epsilon: float | Fraction = 10) -> veil.Session:
    return veil.Session.local({"t": table}, privacy_unit="uid", budget=veil.Budget(epsilon=epsilon))


def _charges(s: veil.Session) -> list[Fraction]:
    return [r.loss.eps for r in s.ledger.history(s.analyst, s.dataset) if r.event == "charge"]


def _written(s: veil.Session) -> list[str]:
    """What the ledger holds for the session's budget besides its grant."""
    return [r.event for r in s.ledger.history(s.analyst, s.dataset) if r.event != "grant"]


MANY = [1 + (i % 20) for i in range(3000)]  # 1–20 rows per unit, 150 units each
FOUR = [4] * 4000  # every unit 4 rows: the choice is T = 4, far from any other


def _targeted(result: veil.Result) -> TargetedLimits:
    chosen = result.auto_limits
    assert chosen is not None
    assert chosen.targeted is not None
    t: TargetedLimits = chosen.targeted
    return t


# -- the flow --------------------------------------------------------------------------------
def test_the_charges_add_up_to_the_limits_step_and_the_query_at_the_epsilon_chosen() -> None:
    s = _session(_table(MANY))
    result = s.sql(SQL, target="n=±100", limits="auto", source=SeededSource("flow"))
    t = _targeted(result)
    assert t.chosen is not None
    assert t.epsilon is not None
    assert t.chosen[0] == result.auto_limits.max_rows
    assert result.auto_limits.max_rows in (20, 24)  # 1–20 rows: the heavy units are seen
    assert _charges(s) == [t.limits_epsilon, t.epsilon]  # the step, then the query
    assert result.cost == veil.Budget(epsilon=t.limits_epsilon + t.epsilon)
    assert s.remaining() == veil.Budget(epsilon=10 - t.limits_epsilon - t.epsilon)
    assert t.epsilon_min <= t.epsilon <= (t.epsilon_max or math.inf)
    assert result.notes[0].startswith(f"auto limits: max_rows={t.chosen[0]} ")
    assert result.notes[1].startswith(
        f"smallest epsilon meeting every target at the limits chosen (max_rows={t.chosen[0]})"
    )
    assert abs(result.values[0][0] - sum(MANY)) < 0.05 * sum(MANY)


def test_the_released_bars_meet_the_targets_at_the_limits_chosen_and_not_below_its_epsilon() -> (
    None
):
    s = _session(_table(MANY))
    sql = "SELECT COUNT(*) AS n, SUM(x) AS total FROM t"
    result = s.sql(
        sql, target=["n=±100", "total=±40@90%"], limits="auto", bounds={"x": (0, 1)},
        source=SeededSource("bars"),
    )  # fmt: skip
    t = _targeted(result)
    assert t.epsilon is not None
    assert t.chosen is not None
    n, total = result.columns.index("n"), result.columns.index("total")
    assert result.error_bars(0.95)[0][n] <= 100
    assert result.error_bars(0.90)[0][total] <= 40
    g = dict(max_rows=t.chosen[0], max_groups=t.chosen[1], max_rows_per_group=t.chosen[2])
    below = s.explain(sql, epsilon=t.epsilon * Fraction(99, 100), bounds={"x": (0, 1)}, **g)
    missed = target_bars(below, parse_targets(["n=±100", "total=±40@90%"]))
    assert missed["n"] > 100 or missed["total"] > 40  # 1 % less ε misses a target


def test_an_identical_repeat_is_a_free_cache_hit() -> None:
    s = _session(_table(MANY))
    first = s.sql(SQL, target="n=±100", limits="auto")
    left = s.remaining()
    again = s.sql(SQL, target="n=±100", limits="auto")
    assert again.cached
    assert again.auto_limits.cached
    assert again.cost == veil.Budget(epsilon=0)
    assert s.remaining() == left
    assert again.values == first.values
    assert len(_charges(s)) == 2


def test_explain_shows_the_range_and_the_cover_and_reads_nothing() -> None:
    s = _session(_table(MANY), epsilon=1)
    explained = s.explain(SQL, target="n=±100", limits="auto")
    t: TargetedLimits = explained.targeted
    assert s.remaining() == veil.Budget(epsilon=1)
    assert _charges(s) == []
    assert t.cheapest == (1, 1, 1)
    assert t.dearest == (1024, 1024, 1024)
    assert t.epsilon_max is not None
    assert t.epsilon_min < t.epsilon_max
    assert explained.cost == veil.Budget(epsilon=t.limits_epsilon + t.epsilon_max)
    assert t.covers_cheapest is True
    assert t.covers_dearest is False
    assert explained.covered is False
    assert any("covers the cheapest candidate but not the dearest" in n for n in explained.notes)
    assert explained.notes[0].startswith("accuracy targets with limits='auto': the limits step")
    assert "at most 1024 group(s)" in explained.contribution  # shown at the dearest


def test_the_limits_step_sees_a_bin_of_as_many_units_as_the_query_s_noise() -> None:
    s = _session(_table(MANY))
    targets = parse_targets("n=±100")
    found = shape(s, SQL, limits="auto", bounds=None, domains=None)
    cheapest = smallest_epsilon(
        s, found.plan, targets, max_groups=1, max_rows_per_group=1, max_rows=1
    )
    assert cheapest is not None
    rows = _noise(aggregate_of(cheapest[0].plan))
    eps_l = limits_epsilon(rows, len(found.t_grid), cheapest[1])
    assert threshold(1 / eps_l, len(found.t_grid)) <= math.ceil(rows)
    assert threshold(1 / (eps_l * Fraction(99, 100)), len(found.t_grid)) > rows  # the least
    t = s.explain(SQL, target="n=±100", limits="auto").targeted
    assert t.limits_epsilon == eps_l
    assert t.epsilon_min == cheapest[1]


@pytest.mark.slow
def test_the_epsilon_meeting_the_targets_grows_with_the_limits() -> None:
    s = _session(_table(MANY))
    sql = "SELECT COUNT(*) AS n, SUM(x) AS total, AVG(x) AS m FROM t"
    targets = parse_targets(["n=±100", "total=±40", "m=±0.05"], min_group_size=500)
    found = shape(s, sql, limits="auto", bounds={"x": (0, 1)}, domains=None)
    epsilons = []
    for t, g, r in found.limits:
        got = smallest_epsilon(
            s, found.plan, targets, bounds={"x": (0, 1)}, max_groups=g, max_rows_per_group=r,
            max_rows=t, tolerance=1e-6, quiet=True,
        )  # fmt: skip
        assert got is not None
        epsilons.append(got[1])
    assert all(a <= b * (1 + Fraction(1, 10**5)) for a, b in itertools.pairwise(epsilons))


def test_auto_groups_chooses_the_triple_and_meets_the_targets() -> None:
    s = _session(_table(MANY))
    result = s.sql(
        GROUPED, target="n=±100", limits="auto_groups", domains={"state": list(STATES)},
        source=SeededSource("groups"),
    )  # fmt: skip
    t = _targeted(result)
    assert t.mode == "auto_groups"
    assert t.epsilon is not None
    assert result.auto_limits.mode == "auto_groups"
    assert all(row[1] <= 100 for row in result.error_bars(0.95))
    assert _charges(s) == [t.limits_epsilon, t.epsilon]
    assert t.cheapest == (1, 1, 1)
    assert t.dearest[1] == 3


# -- refusals before the limits step, free --------------------------------------------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"epsilon": 1}, "pass target= or epsilon=1, not both"),
        ({"limits_share": 0.2}, "with target= the limits step's ε is set by the targets"),
        ({"max_rows": 4}, "max_rows=4 is given too"),
        ({"bounds": "auto"}, "and limits='auto' together is not supported"),
        ({"target": "m=±5"}, "target for unknown column 'm'"),
        ({"limits": "sometimes"}, "limits='sometimes' is not understood"),
    ],
)
def test_bad_requests_are_refused_free(options: dict[str, object], message: str) -> None:
    s = _session(_table(MANY))
    options = {"target": "n=±100", "limits": "auto", **options}
    with pytest.raises(InvalidArgumentError, match=message):
        s.sql(SQL, **options)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=message):
        s.explain(SQL, **options)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=message):
        s.run(s.plan(SQL), **options)  # type: ignore[arg-type]
    assert s.remaining() == veil.Budget(epsilon=10)
    assert _written(s) == []


def test_a_grant_short_of_the_cheapest_whole_cost_is_refused_before_anything_is_reserved() -> None:
    probe = _session(_table(FOUR))
    t = probe.explain(SQL, target="n=±100", limits="auto").targeted
    cheapest = t.limits_epsilon + t.epsilon_min
    s = _session(_table(FOUR), epsilon=cheapest * Fraction(99, 100))
    with pytest.raises(BudgetExhaustedError, match="nothing was charged") as err:
        s.sql(SQL, target="n=±100", limits="auto")
    assert err.value.requested == veil.Budget(epsilon=cheapest)
    assert "the limits step ε_L=" in str(err.value)
    with pytest.raises(BudgetExhaustedError, match="nothing was charged"):
        s.explain(SQL, target="n=±100", limits="auto")
    assert _written(s) == []  # nothing reserved, nothing refunded


def test_a_grant_short_of_the_limits_chosen_stops_after_the_step_and_a_retry_is_free() -> None:
    probe = _session(_table(FOUR))
    t = probe.explain(SQL, target="n=±100", limits="auto").targeted
    grant = t.limits_epsilon + 2 * t.epsilon_min  # covers the cheapest, not T = 4
    s = _session(_table(FOUR), epsilon=grant)
    with pytest.raises(BudgetExhaustedError, match="at the limits chosen \\(max_rows=4\\)") as e:
        s.sql(SQL, target="n=±100", limits="auto", source=SeededSource("short"))
    assert "its answer is cached: asking again costs nothing for it" in str(e.value)
    assert _charges(s) == [t.limits_epsilon]  # the step's charge stays
    s.ledger.grant(s.analyst, s.dataset, veil.Budget(epsilon=1))
    result = s.sql(SQL, target="n=±100", limits="auto", source=SeededSource("retry"))
    assert result.auto_limits.cached  # the step from the cache: free
    assert result.auto_limits.max_rows == 4  # four rows each (the grid before offered 6)
    t2 = _targeted(result)
    assert t2.epsilon is not None
    assert result.cost == veil.Budget(epsilon=t2.epsilon)
    assert _charges(s) == [t.limits_epsilon, t2.epsilon]


# -- neighbouring datasets --------------------------------------------------------------------
def _outcome(table: pa.Table, grant: Fraction, seed: str) -> tuple[str, str, tuple[str, ...]]:
    s = _session(table, epsilon=grant)
    try:
        result = s.sql(SQL, target="n=±100", limits="auto", source=SeededSource(seed))
    except BudgetExhaustedError as err:
        charged = "refused free" if not _charges(s) else "stopped after the limits step"
        shape_of = str(err).split(" at the limits chosen")[0].split(", but")[0]
        return charged, str(s.remaining()), (shape_of,)
    lines = tuple(line.split(" (")[0] for line in result.notes[:2])
    return "released", str(s.remaining()), (*lines, str(result.cost))


@pytest.mark.parametrize("grant", ["refused", "stopped", "released"])
def test_neighbours_have_the_same_outcome(grant: str) -> None:
    probe = _session(_table(FOUR))
    t = probe.explain(SQL, target="n=±100", limits="auto").targeted
    budget = {
        "refused": (t.limits_epsilon + t.epsilon_min) / 2,
        "stopped": t.limits_epsilon + 2 * t.epsilon_min,
        "released": Fraction(10),
    }[grant]
    outcomes = set()
    for unit in (None, 0, 1999, 3999):
        table = _table(FOUR)
        if unit is not None:
            table = table.filter(pc.not_equal(table["uid"], unit))
        outcomes.add(_outcome(table, budget, f"n{unit}"))
    assert len(outcomes) == 1, outcomes
    (outcome,) = outcomes
    assert outcome[0] == {"refused": "refused free", "stopped": "stopped after the limits step",
                          "released": "released"}[grant]  # fmt: skip


# -- the builder, run(plan) and a catalog ----------------------------------------------------
def test_the_builder_and_run_take_targets_with_limits_auto() -> None:
    s = _session(_table(MANY))
    query = s.query("t").count(alias="n")
    explained = query.explain(target="n=±100", limits="auto")
    assert explained.targeted is not None
    result = query.run(target="n=±100", limits="auto", source=SeededSource("builder"))
    direct = s.run(s.plan(SQL), target="n=±100", limits="auto")
    again = s.sql(SQL, target="n=±100", limits="auto")
    assert direct.cached
    assert again.cached
    assert direct.auto_limits.max_rows == again.auto_limits.max_rows == result.auto_limits.max_rows
    assert len(_charges(s)) == 2
    plain = s.run(s.plan(SQL), target="n=±100")  # run takes target= without limits too
    assert plain.error_bars(0.95)[0][0] <= 100


def test_a_catalog_s_largest_cost_caps_the_whole_request(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(_table(MANY), path)
    catalog = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}")
    catalog.add_dataset(
        "t", source=Source("file", path=str(path)), privacy_unit="uid", max_rows=64,
        max_groups=64, max_rows_per_group=64, max_epsilon=Fraction(1, 2),
    )  # fmt: skip
    catalog.ledger.grant("ana", "t", veil.Budget(epsilon=10))
    with veil.Session.from_catalog(catalog, "t", analyst="ana") as s:
        explained = s.explain(SQL, target="n=±100", limits="auto")
        t: TargetedLimits = explained.targeted
        assert t.dearest == (64, 64, 64)  # the owner's limits cap the candidates
        assert t.epsilon_max is None  # above ½ at T = 64
        assert any("more than epsilon=0.5" in n for n in explained.notes)
        with pytest.raises(InvalidArgumentError, match="even at the smallest limits"):
            s.sql(SQL, target="n=±1", limits="auto")
        assert _charges(s) == []
        # ±100 at T = 24 needs ε ≈ 0.72: above the cap, known only once T is chosen
        with pytest.raises(InvalidArgumentError, match="at the limits chosen \\(max_rows=24\\)"):
            s.sql(SQL, target="n=±100", limits="auto")
        assert _charges(s) == [t.limits_epsilon]  # the step's charge stays
        result = s.sql(SQL, target="n=±400", limits="auto")  # ε ≈ 0.2 at T = 20: released
        assert result.auto_limits.max_rows == 20  # 20 rows at most: on the grid since 40
        assert result.cost.eps <= Fraction(1, 2)  # its own limits step and the query


@pytest.mark.slow
def test_targets_with_auto_limits_run_on_postgresql_as_on_duckdb() -> None:
    pytest.importorskip("psycopg")
    import postgres_support

    rows = [1 + (i % 6) for i in range(600)]
    qualified = postgres_support.load(_table(rows))
    with veil.Session.postgres(
        postgres_support.PG_URL, {"t": qualified}, privacy_unit="uid",
        budget=veil.Budget(epsilon=10),
    ) as s:  # fmt: skip
        pg = s.sql(SQL, target="n=±50", limits="auto", source=SeededSource("pg"))
    duck = _session(_table(rows)).sql(SQL, target="n=±50", limits="auto", source=SeededSource("pg"))
    assert pg.auto_limits.max_rows == duck.auto_limits.max_rows
    assert pg.cost == duck.cost
    assert pg.error_bars(0.95)[0][0] <= 50
