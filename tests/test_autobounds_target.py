"""Accuracy targets with ``bounds="auto"`` (veil.autobounds_target): the charges add up to
ε_B then ε_T, the released bars meet the targets at the bounds chosen, ε_B is a ninth of the
ε meeting them at the declared range, refusals before the bounds step write nothing — a
target on a SUM or AVG of an auto column among them (issue 40: its error would rest on the
clamping) —, an identical repeat is free, the outcome on neighbouring datasets, a stop after
the bounds step and its free retry, per-group bounds, several columns, the builder and
``run``, a catalog. The targets here are on the count, which keeps its promise whatever the
bounds chosen; the bounds move the budget split, hence its ε.
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
from veil.autobounds_choice import grid
from veil.autobounds_target import TargetedBounds, bounds_epsilon
from veil.catalog import Catalog, Source
from veil.errors import BudgetExhaustedError, InvalidArgumentError

SUM = "SELECT SUM(x) AS total FROM t"
BOTH = "SELECT SUM(x) AS total, COUNT(*) AS n FROM t"
GROUPED = "SELECT state, COUNT(*) AS n, SUM(x) AS total FROM t GROUP BY state"
AIM = "n=±10"
STATES = ("a", "b", "c")
DECLARED = {"x": (0, 10**6)}


def _table(x: np.ndarray) -> pa.Table:
    state = np.array(STATES)[np.arange(len(x)) % len(STATES)]
    return pa.table({"uid": np.arange(len(x)), "x": x, "state": state, "y": x / 1000})


SPREAD = np.geomspace(5_000, 100_000, 3000)  # incomes over four bins of the log grid
NARROW = np.linspace(1_100, 1_900, 4000)  # one bin, [1024, 2048): far from any other choice
# either side of 0: chosen [-1024, 1024], centred at 0, so the sum needs no count and the count
# a larger ε than at one bin of the grid ([-2^-16, 0], centred at its end)
EVEN = np.linspace(-1_000, 1_000, 4000)
SIGNED = {"x": (-(10**6), 10**6)}


def _session(
    table: pa.Table, epsilon: float | Fraction = 10, bounds: object = DECLARED
) -> veil.Session:
    return veil.Session.local(
        {"t": table}, privacy_unit="uid", budget=veil.Budget(epsilon=epsilon),
        bounds=bounds,  # type: ignore[arg-type]
    )  # fmt: skip


def _charges(s: veil.Session) -> list[Fraction]:
    return [r.loss.eps for r in s.ledger.history(s.analyst, s.dataset) if r.event == "charge"]


def _written(s: veil.Session) -> list[str]:
    """What the ledger holds for the session's budget besides its grant."""
    return [r.event for r in s.ledger.history(s.analyst, s.dataset) if r.event != "grant"]


def _targeted(result: veil.Result) -> TargetedBounds:
    t = result.targeted
    assert isinstance(t, TargetedBounds)
    return t


# -- the flow --------------------------------------------------------------------------------
def test_the_charges_add_up_to_the_bounds_step_and_the_query_at_the_epsilon_chosen() -> None:
    s = _session(_table(SPREAD))
    result = s.sql(BOTH, target=AIM, bounds="auto", source=SeededSource("flow"))
    t = _targeted(result)
    assert t.epsilon is not None
    assert t.chosen is not None
    (chosen,) = result.auto_bounds
    assert t.chosen == (("x", chosen.lower, chosen.upper),)
    assert chosen.pair == (0, 131072)  # [5 000, 100 000] and the sparse bins toward 0
    assert _charges(s) == [t.bounds_epsilon, t.epsilon]  # the step, then the query
    assert result.cost == veil.Budget(epsilon=t.bounds_epsilon + t.epsilon)
    assert s.remaining() == veil.Budget(epsilon=10 - t.bounds_epsilon - t.epsilon)
    assert abs(t.epsilon / t.epsilon_max - 1) < Fraction(1, 100)  # [0, w]: the same split
    assert result.notes[0].startswith("auto bounds for 'x': [0, 131072] (charged ε=")
    assert result.notes[1].startswith(
        "smallest epsilon meeting every target at the bounds chosen (x: [0, 131072]): "
    )
    n = result.columns.index("n")
    assert abs(result.values[0][n] - len(SPREAD)) <= 10 * 1.5
    assert result.error_bars(0.95)[0][n] <= 10


def test_the_released_bars_meet_the_targets_at_the_bounds_chosen_and_not_below_its_epsilon() -> (
    None
):
    s = _session(_table(SPREAD))
    sql = "SELECT SUM(x) AS total, AVG(x) AS m, COUNT(*) AS n FROM t"
    targets = parse_targets(["n=±10@90%"])
    result = s.sql(sql, target=targets, bounds="auto", source=SeededSource("bars"))
    t = _targeted(result)
    assert t.epsilon is not None
    n = result.columns.index("n")
    assert result.error_bars(0.9)[0][n] <= 10
    pairs = {"x": result.auto_bounds[0].pair}
    below = s.explain(sql, epsilon=t.epsilon * Fraction(99, 100), bounds=pairs)
    assert target_bars(below, targets)["n"] > 10


def test_an_identical_repeat_is_a_free_cache_hit() -> None:
    s = _session(_table(SPREAD))
    first = s.sql(BOTH, target=AIM, bounds="auto")
    left = s.remaining()
    again = s.sql(BOTH, target=AIM, bounds="auto")
    assert again.cached
    assert again.auto_bounds[0].cached
    assert again.cost == veil.Budget(epsilon=0)
    assert s.remaining() == left
    assert again.values == first.values
    assert len(_charges(s)) == 2


def test_explain_shows_the_range_and_the_cover_and_reads_nothing() -> None:
    first = _even().explain(BOTH, target=AIM, bounds="auto").targeted
    grant = first.bounds_epsilon + (first.epsilon_min + first.epsilon_max) / 2
    s = _even(epsilon=grant)
    explained = s.explain(BOTH, target=AIM, bounds="auto")
    t: TargetedBounds = explained.targeted
    assert s.remaining() == veil.Budget(epsilon=grant)
    assert _charges(s) == []
    assert t.widest == (("x", -(10**6), 10**6),)
    assert t.narrowest == (("x", -Fraction(1, 2**16), 0),)
    assert t.epsilon_min < t.epsilon_max
    assert explained.cost == veil.Budget(epsilon=t.bounds_epsilon + t.epsilon_max)
    assert t.covers_cheapest is True
    assert t.covers_dearest is False  # ε_max at [-10⁶, 10⁶] is 1.4 times ε_min
    assert explained.covered is False
    assert any("covers the cheapest whole but not the dearest" in n for n in explained.notes)
    assert explained.notes[0].startswith("accuracy targets with bounds='auto': the bounds step")
    assert any(n.startswith("auto bounds for 'x': a noisy histogram") for n in explained.notes)


def test_the_bounds_step_costs_a_ninth_of_the_epsilon_at_the_declared_range() -> None:
    s = _session(_table(SPREAD))
    targets = parse_targets(AIM)
    at_declared = smallest_epsilon(s, s.plan(BOTH, bounds=DECLARED), targets, bounds=DECLARED)
    assert at_declared is not None
    t = s.explain(BOTH, target=AIM, bounds="auto").targeted
    assert t.epsilon_max == at_declared[1]
    assert t.bounds_epsilon == bounds_epsilon(t.epsilon_max)
    assert t.epsilon_max / 9 <= t.bounds_epsilon < t.epsilon_max / 9 * Fraction(101, 100)
    assert len(str(t.bounds_epsilon.numerator).rstrip("0")) <= 3  # three significant digits


@pytest.mark.slow
def test_the_epsilon_meeting_the_targets_grows_with_the_bounds() -> None:
    s = _session(_table(SPREAD))
    sql = "SELECT SUM(x) AS total, AVG(x) AS m FROM t"
    targets = parse_targets(["total=±2000000", "m=±500"], min_group_size=1000)
    edges = grid(False, (Fraction(0), Fraction(10**6)))
    epsilons = []
    for hi in edges[1:]:  # nested ranges [0, e] up to the declared one
        pairs = {"x": (Fraction(0), hi)}
        got = smallest_epsilon(
            s, s.plan(sql, bounds=pairs), targets, bounds=pairs, tolerance=1e-6, quiet=True
        )
        assert got is not None
        epsilons.append(got[1])
    assert all(a <= b * (1 + Fraction(1, 10**5)) for a, b in itertools.pairwise(epsilons))
    inner = {"x": (Fraction(1024), Fraction(2048))}  # a range that does not reach 0
    got = smallest_epsilon(s, s.plan(sql, bounds=inner), targets, bounds=inner, quiet=True)
    assert got is not None
    assert got[1] <= epsilons[-1]


def test_per_group_bounds_meet_the_targets_with_one_step() -> None:
    x = np.concatenate([SPREAD[:1000], NARROW[:1000], SPREAD[2000:]])
    s = _session(_table(x))
    result = s.sql(
        GROUPED, target=AIM, bounds={"x": {"auto": "state"}},
        domains={"state": list(STATES)}, source=SeededSource("groups"),
    )  # fmt: skip
    t = _targeted(result)
    assert t.epsilon is not None
    (chosen,) = result.auto_bounds
    assert chosen.key == "state"
    assert len(chosen.groups) == 3
    assert _charges(s) == [t.bounds_epsilon, t.epsilon]  # one histogram for every group
    assert all(row[1] <= 10 for row in result.error_bars(0.95))
    explained = s.explain(
        GROUPED, target=AIM, bounds={"x": {"auto": "state"}},
        domains={"state": list(STATES)},
    )  # fmt: skip
    assert explained.targeted.widest == (("x", 0, 10**6),)


def test_two_auto_columns_share_the_bounds_step_s_epsilon() -> None:
    s = _session(_table(SPREAD), bounds={"x": (0, 10**6), "y": (0, 10**3)})
    sql = "SELECT SUM(x) AS total, SUM(y) AS small, COUNT(*) AS n FROM t"
    result = s.sql(sql, target=AIM, bounds="auto", source=SeededSource("two"))
    t = _targeted(result)
    assert t.epsilon is not None
    assert [c.column for c in result.auto_bounds] == ["x", "y"]
    half = t.bounds_epsilon / 2
    assert _charges(s) == [half, half, t.epsilon]
    assert result.cost == veil.Budget(epsilon=t.bounds_epsilon + t.epsilon)


# -- refusals before the bounds step, free --------------------------------------------------
@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"epsilon": 1}, "pass target= or epsilon=1, not both"),
        ({"bounds_share": 0.2}, "with target= the bounds step's ε is set by the targets"),
        ({"limits": "auto"}, "and limits='auto' together is not supported"),
        ({"target": "q=±5"}, "target for unknown column 'q'"),
        (
            {"target": "small=±0.0001", "bounds": {"x": "auto"}},
            r"need more than 9000 .* at the widest bounds",
        ),
        ({"target": "total=±2000000"}, r"the target on 'total' \(SUM of 'x', whose bounds are "),
        ({"target": ["n=±60", "m=±500"]}, r"the target on 'm' \(AVG of 'x', whose bounds are "),
        ({"bounds": {"state": "auto"}}, "no aggregate of this query clamps 'state'"),
        ({"bounds": "automatic"}, "bounds='automatic' is not understood"),
        ({"weights": "y"}, "weights='y' and bounds='auto' cannot be combined yet"),
    ],
)
def test_bad_requests_are_refused_free(options: dict[str, object], message: str) -> None:
    s = _session(_table(SPREAD), bounds={**DECLARED, "y": (0, 1000)})
    options = {"target": AIM, "bounds": "auto", **options}
    options["target"] = parse_targets(options["target"], min_group_size=1000)  # type: ignore[arg-type]
    sql = "SELECT SUM(x) AS total, AVG(x) AS m, SUM(y) AS small, COUNT(*) AS n FROM t"
    with pytest.raises(InvalidArgumentError, match=message):
        s.sql(sql, **options)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=message):
        s.explain(sql, **options)  # type: ignore[arg-type]
    if "weights" not in options:
        with pytest.raises(InvalidArgumentError, match=message):
            s.run(s.plan(sql), **options)  # type: ignore[arg-type]
    assert s.remaining() == veil.Budget(epsilon=10)
    assert _written(s) == []


def test_a_target_on_a_sum_of_an_auto_column_is_refused_with_the_declared_range_s_epsilon() -> None:
    s = _session(_table(SPREAD))
    with pytest.raises(InvalidArgumentError) as err:
        s.sql(BOTH, target=["total=±2000000", AIM], bounds="auto")
    said = str(err.value)
    assert "its error includes the clamping of the rows outside the bounds" in said
    assert "pass bounds={'x': (0, 1e+06)} instead of 'auto'" in said
    assert "--bounds x=0:1e+06 without --bounds x=auto" in err.value.cli
    assert _written(s) == []
    # the fix it names: the declared range, at the ε it names
    fixed = s.sql(BOTH, target=["total=±2000000", AIM], bounds=DECLARED)
    assert f"ε={float(fixed.cost.eps):.6g}:" in said
    assert fixed.error_bars(0.95)[0][0] <= 2_000_000


def test_a_column_without_a_declared_range_is_refused_free_naming_the_fix() -> None:
    s = _session(_table(SPREAD), bounds=None)
    with pytest.raises(InvalidArgumentError, match=r"needs a declared range for 'x'.*bounds="):
        s.sql(BOTH, target=AIM, bounds="auto")
    query = s.query("t").sum("x", alias="total").count("n")
    plan = query.plan(privacy_unit="uid", bounds=DECLARED)
    result = s.run(plan, target=AIM, bounds="auto")  # a plan's own range serves
    assert _targeted(result).widest == (("x", 0, 10**6),)


def test_a_grant_short_of_the_cheapest_whole_cost_is_refused_before_anything_is_reserved() -> None:
    t = _session(_table(NARROW)).explain(BOTH, target=AIM, bounds="auto").targeted
    cheapest = t.bounds_epsilon + t.epsilon_min
    s = _session(_table(NARROW), epsilon=cheapest * Fraction(99, 100))
    with pytest.raises(BudgetExhaustedError, match="nothing was charged") as err:
        s.sql(BOTH, target=AIM, bounds="auto")
    assert err.value.requested == veil.Budget(epsilon=cheapest)
    assert "the bounds step ε_B=" in str(err.value)
    with pytest.raises(BudgetExhaustedError, match="nothing was charged"):
        s.explain(BOTH, target=AIM, bounds="auto")
    assert _written(s) == []  # nothing reserved, nothing refunded


def test_a_grant_short_of_the_bounds_chosen_stops_after_the_step_and_a_retry_is_free() -> None:
    t = _even().explain(BOTH, target=AIM, bounds="auto").targeted
    grant = t.bounds_epsilon + (t.epsilon_min + t.epsilon_max) / 2  # one bin, not [-1024, 1024]
    s = _even(epsilon=grant)
    with pytest.raises(
        BudgetExhaustedError, match="at the bounds chosen \\(x: \\[-1024, 1024\\]\\)"
    ) as e:
        s.sql(BOTH, target=AIM, bounds="auto", source=SeededSource("short"))
    assert "its answer is cached: asking again costs nothing for it" in str(e.value)
    assert _charges(s) == [t.bounds_epsilon]  # the step's charge stays
    # the grant must still cover the cheapest whole, as before any step (decided unread)
    s.ledger.grant(s.analyst, s.dataset, veil.Budget(epsilon=t.bounds_epsilon + 1))
    result = s.sql(BOTH, target=AIM, bounds="auto", source=SeededSource("retry"))
    assert result.auto_bounds[0].cached  # the step from the cache: free
    assert result.auto_bounds[0].pair == (-1024, 1024)
    t2 = _targeted(result)
    assert t2.epsilon is not None
    assert result.cost == veil.Budget(epsilon=t2.epsilon)
    assert _charges(s) == [t.bounds_epsilon, t2.epsilon]


# -- neighbouring datasets --------------------------------------------------------------------
def _even(table: pa.Table | None = None, epsilon: float | Fraction = 10) -> veil.Session:
    return _session(_table(EVEN) if table is None else table, epsilon=epsilon, bounds=SIGNED)


def _outcome(table: pa.Table, grant: Fraction, seed: str) -> tuple[str, str, tuple[str, ...]]:
    s = _even(table, epsilon=grant)
    try:
        result = s.sql(BOTH, target=AIM, bounds="auto", source=SeededSource(seed))
    except BudgetExhaustedError as err:
        charged = "refused free" if not _charges(s) else "stopped after the bounds step"
        return charged, str(s.remaining()), (str(err),)
    lines = tuple(line.split(" (charged")[0].split(": 0.")[0] for line in result.notes[:2])
    return "released", str(s.remaining()), (*lines, str(result.cost))


@pytest.mark.parametrize("grant", ["refused", "stopped", "released"])
def test_neighbours_have_the_same_outcome(grant: str) -> None:
    t = _even().explain(BOTH, target=AIM, bounds="auto").targeted
    budget = {
        "refused": (t.bounds_epsilon + t.epsilon_min) / 2,
        "stopped": t.bounds_epsilon + (t.epsilon_min + t.epsilon_max) / 2,
        "released": Fraction(10),
    }[grant]
    outcomes = set()
    for unit in (None, 0, 1999, 3999):
        table = _table(EVEN)
        if unit is not None:
            table = table.filter(pc.not_equal(table["uid"], unit))
        outcomes.add(_outcome(table, budget, f"n{unit}"))
    assert len(outcomes) == 1, outcomes
    (outcome,) = outcomes
    assert outcome[0] == {"refused": "refused free", "stopped": "stopped after the bounds step",
                          "released": "released"}[grant]  # fmt: skip


@pytest.mark.parametrize("value", [0.0, 1_000_000.0, -5.0, math.inf, math.nan])
def test_an_adversarial_neighbour_has_the_same_outcome(value: float) -> None:
    """One unit with an extreme value (clamped, or NaN/±inf read as the engine reads them)
    added to the table: the same step choice, ε_T and charges."""
    base = _table(EVEN)
    extra = _table(np.array([value]))
    extra = extra.set_column(0, "uid", pa.array([10**6]))
    plus = pa.concat_tables([base, extra])
    grant = Fraction(10)
    assert _outcome(base, grant, "a") == _outcome(plus, grant, "b")


# -- the builder, run(plan) and a catalog ----------------------------------------------------
def test_the_builder_and_run_take_targets_with_bounds_auto() -> None:
    s = _session(_table(SPREAD))
    query = s.query("t").sum("x", alias="total").count("n")
    explained = query.explain(target=AIM, bounds="auto")
    assert isinstance(explained.targeted, TargetedBounds)
    result = query.run(target=AIM, bounds="auto", source=SeededSource("builder"))
    direct = s.run(s.plan(BOTH), target=AIM, bounds="auto")
    again = s.sql(BOTH, target=AIM, bounds="auto")
    assert direct.cached
    assert again.cached
    assert direct.auto_bounds[0].pair == again.auto_bounds[0].pair == result.auto_bounds[0].pair
    assert len(_charges(s)) == 2


def test_a_catalog_s_range_is_the_declared_one_and_its_cap_bounds_the_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(_table(SPREAD), path)
    catalog = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}")
    catalog.add_dataset(
        "t", source=Source("file", path=str(path)), privacy_unit="uid",
        bounds={"x": (0, 10**6)}, max_epsilon=Fraction(1),
    )  # fmt: skip
    catalog.ledger.grant("ana", "t", veil.Budget(epsilon=10))
    with veil.Session.from_catalog(catalog, "t", analyst="ana") as s:
        with pytest.raises(InvalidArgumentError, match=r"need more than 0\.9 .* the largest cost"):
            s.sql(BOTH, target="n=±3", bounds="auto")  # ε_max ≈ 1.7
        assert _charges(s) == []
        result = s.sql(BOTH, target=AIM, bounds="auto")
        t = _targeted(result)
        assert t.widest == (("x", 0, 10**6),)
        assert result.cost.eps <= 1
        assert _charges(s) == [t.bounds_epsilon, t.epsilon]


@pytest.mark.slow
def test_targets_with_auto_bounds_run_on_postgresql_as_on_duckdb() -> None:
    pytest.importorskip("psycopg")
    import postgres_support

    table = _table(SPREAD[::5])
    qualified = postgres_support.load(table)
    options = {"target": AIM, "bounds": "auto"}
    with veil.Session.postgres(
        postgres_support.PG_URL, {"t": qualified}, privacy_unit="uid",
        budget=veil.Budget(epsilon=10), bounds=DECLARED,
    ) as s:  # fmt: skip
        pg = s.sql(BOTH, source=SeededSource("pg"), **options)  # type: ignore[arg-type]
    duck = _session(table).sql(BOTH, source=SeededSource("pg"), **options)  # type: ignore[arg-type]
    assert pg.auto_bounds[0].pair == duck.auto_bounds[0].pair
    assert pg.cost == duck.cost
    assert pg.error_bars(0.95)[0][1] <= 10
