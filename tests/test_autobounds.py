"""``bounds="auto"`` (veil.autobounds): the public grid, the threshold, the selection, and the
whole flow through a session — cost, cache, refusals before any charge, totality on
degenerate columns, neighbouring datasets (pre-noise counts and outcomes) and the exact
privacy of the selection's outputs.

Documented thresholds. The selection test compares 20 000 seeded selections with the exact
distribution of (first, last) occupied bin (independent exact discrete-Laplace tails) by a
chi-square test, cut-off p > 1e-4 (and the same draws reject a threshold one scale off).
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction
from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

import veil
from support import SeededSource
from system.prenoise import exact
from veil.autobounds import (
    BETA,
    HIGH,
    LOW,
    ChosenBounds,
    _Limits,
    _steps,
    choose,
    find_bounds,
    grid,
    threshold,
)
from veil.catalog import Catalog, Source
from veil.errors import BudgetExhaustedError, InvalidArgumentError, SchemaError
from veil.noise.samplers import discrete_laplace
from veil.plan.tree import aggregate_of

SQL = "SELECT AVG(x) AS m FROM t"


def _session(frame: pd.DataFrame, epsilon: float = 10, **options: object) -> veil.Session:
    return veil.Session.local({"t": frame}, budget=veil.Budget(epsilon=epsilon), **options)  # type: ignore[arg-type]


def _frame(values: list[float | None], **columns: list[object]) -> pd.DataFrame:
    return pd.DataFrame({"x": pd.array(values, dtype="Float64"), **columns})


# -- the grid and the threshold --------------------------------------------------------------
def test_the_grid_is_signed_powers_of_two_fixed_by_the_type_alone() -> None:
    ints, reals = grid(integer=True), grid(integer=False)
    assert ints[0] == -(Fraction(2) ** HIGH)
    assert ints[-1] == Fraction(2) ** HIGH
    assert Fraction(0) in ints
    assert Fraction(1) in ints
    assert Fraction(1, 2) not in ints
    assert Fraction(2) ** LOW in reals
    assert Fraction(2) ** (LOW - 1) not in reals
    for edges in (ints, reals):
        assert all(a < b for a, b in pairwise(edges))
        assert list(edges) == sorted(-e for e in edges)  # symmetric about 0


def test_a_declared_range_cuts_the_grid_at_its_ends() -> None:
    edges = grid(integer=False, outer=(Fraction(-3), Fraction(100)))
    assert edges[0] == -3
    assert edges[-1] == 100
    assert edges[1:-1] == tuple(e for e in grid(integer=False) if -3 < e < 100)


@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(1), Fraction(10), Fraction(333, 7)])
@pytest.mark.parametrize("bins", [1, 126, 158])
def test_an_empty_bin_passes_the_threshold_with_probability_at_most_beta_over_bins(
    scale: Fraction, bins: int
) -> None:
    tau = threshold(scale, bins)
    a = math.exp(-1 / float(scale))
    tail = a**tau / (1 + a)  # P(Z ≥ τ) for discrete Laplace, exactly
    assert bins * tail <= float(BETA)
    # and τ is not needlessly high: one less would not be guaranteed by the bound e^{-τ/s}
    assert bins * math.exp(-(tau - 1) / float(scale)) > float(BETA) or tau == 1


# -- the selection (post-processing) ---------------------------------------------------------
EDGES = tuple(Fraction(e) for e in (-4, -2, -1, 0, 1, 2, 4, 8, 16))


def test_the_bounds_span_the_occupied_bins() -> None:
    c = choose(EDGES, [0, 0, 0, 0, 0, 50, 60, 0], tau=20)
    assert (c.lower, c.upper) == (0, 8)  # [2, 8) widened to 0: by a third at most
    assert c.occupied == 2


def test_a_gap_to_zero_wider_than_a_third_is_kept() -> None:
    edges = tuple(Fraction(e) for e in (0, 1, 2, 4, 8, 1024, 2048))
    c = choose(edges, [0, 0, 0, 0, 0, 90], tau=20)
    assert (c.lower, c.upper) == (1024, 2048)


def test_negative_columns_widen_toward_zero_from_above() -> None:
    c = choose(EDGES, [70, 70, 0, 0, 0, 0, 0, 0], tau=20)
    assert (c.lower, c.upper) == (-4, 0)  # [-4, -1] widened by a third
    c = choose(EDGES, [0, 70, 0, 0, 0, 0, 0, 0], tau=20)
    assert (c.lower, c.upper) == (-2, -1)  # widening to 0 would double it


def test_no_bin_occupied_falls_back_to_the_largest_count_first_of_ties() -> None:
    c = choose(EDGES, [3, 5, -2, 5, 0, 0, 1, 0], tau=20)
    assert (c.lower, c.upper) == (-2, -1)
    assert c.occupied == 0


def test_the_clamped_share_is_the_noisy_mass_outside() -> None:
    c = choose(EDGES, [10, 0, 0, 0, 0, 50, 40, 0], tau=20, scale=Fraction(2))
    assert (c.lower, c.upper) == (0, 8)
    assert c.below == pytest.approx(0.1)
    assert c.above == 0.0
    assert c.rows == 100
    assert 0 < c.bar < 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-(10**6), 10**6), min_size=8, max_size=8), st.integers(1, 10**6))
def test_any_noisy_counts_give_a_valid_pair_on_the_grid(counts: list[int], tau: int) -> None:
    c = choose(EDGES, counts, tau)
    assert c.lower < c.upper
    assert c.lower in EDGES
    assert c.upper in EDGES
    assert 0 <= c.below <= 1
    assert 0 <= c.above <= 1
    assert 0 <= c.bar <= 1


def _tails(true: list[int], tau: int, scale: Fraction) -> list[float]:
    """P(c + Z ≥ τ) per bin, Z exact discrete Laplace of ``scale``."""
    a = math.exp(-1 / float(scale))

    def tail(c: int) -> float:
        k = tau - c
        return a**k / (1 + a) if k > 0 else 1 - a ** (1 - k) / (1 + a)

    return [tail(c) for c in true]


def _exact_first_last(true: list[int], tau: int, scale: Fraction) -> dict[tuple[int, int], float]:
    """P(first occupied = i, last occupied = j) with independent exact discrete-Laplace tails."""
    p = _tails(true, tau, scale)
    out: dict[tuple[int, int], float] = {}
    for i in range(len(p)):
        for j in range(i, len(p)):
            inside = p[i] * (p[j] if j > i else 1)
            outside = math.prod(1 - p[k] for k in range(len(p)) if k < i or k > j)
            out[(i, j)] = inside * outside
    return out


def _exact_choice(true: list[int], tau: int, scale: Fraction, mode: int) -> dict[object, float]:
    """The exact distribution of choose()'s (lower, upper) when bin ``mode`` surely holds the
    largest count: every occupancy pattern of the other bins, with its exact probability."""
    p = _tails(true, tau, scale)
    others = [i for i in range(len(true)) if i != mode]
    out: dict[object, float] = {}
    for pattern in range(2 ** len(others)):
        occupied = [i for k, i in enumerate(others) if pattern >> k & 1]
        prob = math.prod(p[i] if i in occupied else 1 - p[i] for i in others)
        counts = [tau if i in occupied else 0 for i in range(len(true))]
        counts[mode] = 10**6  # the mode, occupied and largest
        c = choose(EDGES, counts, tau)
        out[(c.lower, c.upper)] = out.get((c.lower, c.upper), 0.0) + prob
    return out


def test_the_selection_frequencies_match_the_exact_distribution() -> None:
    true = [0, 3, 12, 400, 15, 6, 0, 9]
    scale, tau = Fraction(4), threshold(Fraction(4), len(true))
    n = 20_000
    noise = discrete_laplace(scale, n * len(true), source=SeededSource("autobounds-select"))
    noisy = np.array(true) + noise.reshape(n, len(true))
    seen = Counter()
    for row in noisy:
        c = choose(EDGES, row.tolist(), tau)
        seen[(c.lower, c.upper)] += 1
    for t, label in ((tau, "exact"), (tau - 4, "wrong")):
        probs = _exact_choice(true, t, scale, mode=3)
        keys = sorted((k for k, v in probs.items() if v * n >= 5), key=str)
        rest = 1 - sum(probs[k] for k in keys)
        observed = [seen.get(k, 0) for k in keys] + [n - sum(seen.get(k, 0) for k in keys)]
        expected = [probs[k] * n for k in keys] + [rest * n]
        if expected[-1] < 1:
            observed, expected = observed[:-1], expected[:-1]
        p = stats.chisquare(observed, np.array(expected) * sum(observed) / sum(expected)).pvalue
        assert (p > 1e-4) if label == "exact" else (p < 1e-10), (label, p)
    assert len(seen) >= 3  # the test sees several outcomes, not one


def test_an_isolated_far_bin_is_not_absorbed_but_neighbouring_ones_are() -> None:
    edges = grid(integer=True)
    counts = [0] * (len(edges) - 1)
    at = {e: i for i, e in enumerate(edges)}
    counts[at[Fraction(2) ** 10]] = 500  # [1024, 2048)
    counts[at[Fraction(2) ** 11]] = 300  # [2048, 4096): adjacent, taken
    counts[at[Fraction(2) ** 50]] = 100  # a spurious bin (or a few outliers) far away
    c = choose(edges, counts, tau=50)
    assert (c.lower, c.upper) == (0, 4096)  # [1024, 4096) widened to 0 by a third
    assert c.occupied == 3


@pytest.mark.parametrize("epsilon", [Fraction(1, 10), Fraction(1)])
def test_every_selection_event_is_within_e_epsilon_between_neighbours(epsilon: Fraction) -> None:
    """Exactly: P_D(first = i, last = j) ≤ e^ε · P_D'(…) for D' = D with one row more in any
    bin (the step's sensitivity is 1 at row level), every (i, j)."""
    scale = 1 / epsilon
    true = [0, 2, 9, 40, 7, 1, 0, 0]
    tau = threshold(scale, len(true))
    for b in range(len(true)):
        other = [c + (i == b) for i, c in enumerate(true)]
        p, q = _exact_first_last(true, tau, scale), _exact_first_last(other, tau, scale)
        for k in p:
            assert p[k] <= math.exp(float(epsilon)) * q[k] * (1 + 1e-9) + 1e-300
            assert q[k] <= math.exp(float(epsilon)) * p[k] * (1 + 1e-9) + 1e-300


# -- through a session -----------------------------------------------------------------------
PEOPLE = _frame([float(v) for v in range(1, 401)])


def test_auto_bounds_cost_what_explain_says_in_two_linked_charges() -> None:
    s = _session(PEOPLE)
    explained = s.explain(SQL, epsilon=1, bounds="auto", bounds_share=Fraction(1, 4))
    assert explained.cost == veil.Budget(epsilon=1)
    assert explained.covered
    assert any("auto bounds for 'x'" in n for n in explained.notes)
    result = s.sql(SQL, epsilon=1, bounds="auto", bounds_share=Fraction(1, 4))
    assert result.cost == veil.Budget(epsilon=1)
    assert s.remaining() == veil.Budget(epsilon=9)
    charges = [r for r in s.ledger.history(s.analyst, s.dataset) if r.event == "charge"]
    assert sorted(r.loss.eps for r in charges) == [Fraction(1, 4), Fraction(3, 4)]
    assert any((r.query or "").startswith("-- veil bounds: auto bounds for 'x'") for r in charges)
    (chosen,) = result.auto_bounds
    assert isinstance(chosen, ChosenBounds)
    assert chosen.lower < chosen.upper
    assert chosen.loss == veil.Budget(epsilon=Fraction(1, 4))
    assert not chosen.cached
    assert result.notes[0].startswith("auto bounds for 'x': [")


def test_an_identical_request_is_answered_from_the_cache_for_free() -> None:
    s = _session(PEOPLE)
    first = s.sql(SQL, epsilon=1, bounds={"x": "auto"})
    again = s.sql(SQL, epsilon=1, bounds={"x": "auto"})
    assert again.cached
    assert again.cost.is_zero
    assert again.rows == first.rows
    assert again.auto_bounds[0].pair == first.auto_bounds[0].pair
    assert s.remaining() == veil.Budget(epsilon=9)


def test_several_auto_columns_share_the_bounds_part_evenly() -> None:
    frame = _frame([float(v) for v in range(100)], y=list(range(100)))
    s = _session(frame)
    result = s.sql("SELECT AVG(x) AS m, SUM(y) AS s FROM t", epsilon=1, bounds="auto")
    assert [c.column for c in result.auto_bounds] == ["x", "y"]
    assert all(c.loss == veil.Budget(epsilon=Fraction(1, 20)) for c in result.auto_bounds)
    assert result.cost == veil.Budget(epsilon=1)


def test_given_bounds_are_kept_and_only_the_rest_found() -> None:
    frame = _frame([float(v) for v in range(100)], y=list(range(100)))
    s = _session(frame)
    result = s.sql(
        "SELECT AVG(x) AS m, SUM(y) AS s FROM t", epsilon=1, bounds={"x": (0, 99), "y": "auto"}
    )
    assert [c.column for c in result.auto_bounds] == ["y"]


def test_a_session_range_is_the_outer_range_the_bounds_stay_within() -> None:
    s = _session(PEOPLE, bounds={"x": (5, 300)})
    (chosen,) = s.sql(SQL, epsilon=1, bounds="auto").auto_bounds
    assert 5 <= chosen.lower < chosen.upper <= 300
    assert chosen.outer == (5, 300)


def test_a_catalog_datasets_owner_bounds_are_only_narrowed(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    PEOPLE.astype({"x": "float64"}).to_parquet(path)
    catalog = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}")
    catalog.add_dataset("t", source=Source("file", path=str(path)), bounds={"x": (0, 1000)})
    catalog.ledger.grant("ana", "t", veil.Budget(epsilon=5))
    with veil.Session.from_catalog(catalog, "t", analyst="ana") as s:
        (chosen,) = s.sql(SQL, epsilon=1, bounds="auto").auto_bounds
        assert 0 <= chosen.lower < chosen.upper <= 1000
        assert chosen.outer == (0, 1000)
        assert s.remaining() == veil.Budget(epsilon=4)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"bounds": "automatic"}, r"bounds='automatic' is not understood"),
        ({"bounds": {"x": "max"}}, r"must be a pair \(lower, upper\) or 'auto'"),
        ({"bounds": {"y": "auto"}}, r"no aggregate of this query clamps 'y'"),
        ({"bounds": "auto", "bounds_share": 0}, r"bounds_share must lie strictly between 0"),
        ({"bounds": "auto", "bounds_share": 1}, r"bounds_share must lie strictly between 0"),
        ({"bounds": "auto", "epsilon": veil.Budget(epsilon=1)}, r"pass epsilon as a number"),
        ({"bounds": (0, 1), "bounds_share": 0.1}, r"no bounds are 'auto'"),
    ],
)
def test_bad_requests_are_refused_before_anything_is_charged(
    options: dict[str, object], message: str
) -> None:
    s = _session(_frame([1.0, 2.0], y=[1, 2]))
    options = {"epsilon": 1, **options}
    if options.get("bounds") == (0, 1):
        options["bounds"] = {"x": (0, 1)}
    with pytest.raises(InvalidArgumentError, match=message):
        s.sql(SQL, **options)  # type: ignore[arg-type]
    assert s.remaining() == veil.Budget(epsilon=10)
    assert not [r for r in s.ledger.history(s.analyst, s.dataset) if r.event == "charge"]


def test_a_query_clamping_nothing_is_refused_with_auto() -> None:
    s = _session(PEOPLE)
    with pytest.raises(InvalidArgumentError, match="clamps none"):
        s.sql("SELECT COUNT(*) AS n FROM t", epsilon=1, bounds="auto")


def test_auto_with_a_target_and_no_declared_range_is_refused_free() -> None:
    s = _session(PEOPLE)
    said = "target= with bounds='auto' needs a declared range for 'x'"
    total = "SELECT SUM(x) AS s FROM t"
    with pytest.raises(InvalidArgumentError, match=said):
        s.sql(total, target={"s": "±100"}, bounds="auto")
    with pytest.raises(InvalidArgumentError, match=said):
        s.explain(total, target={"s": "±100"}, bounds="auto")
    assert s.remaining() == veil.Budget(epsilon=10)


def test_a_grant_too_small_for_the_whole_is_refused_before_the_bounds_are_charged() -> None:
    s = _session(PEOPLE, epsilon=1)
    s.sql("SELECT COUNT(*) AS n FROM t", epsilon=Fraction(1, 2))
    with pytest.raises(BudgetExhaustedError, match=r"requested ε=0\.6"):
        s.sql(SQL, epsilon=Fraction(6, 10), bounds="auto")
    assert s.remaining() == veil.Budget(epsilon=Fraction(1, 2))
    assert len([r for r in s.ledger.history(s.analyst, s.dataset) if r.event == "charge"]) == 1


def test_a_non_numeric_column_is_refused_free() -> None:
    s = _session(_frame([1.0], y=["a"]))
    with pytest.raises(SchemaError):
        s.sql("SELECT AVG(y) AS m FROM t", epsilon=1, bounds="auto")
    assert s.remaining() == veil.Budget(epsilon=10)


@pytest.mark.parametrize(
    "values",
    [
        pytest.param([], id="no-rows"),
        pytest.param([None, None, None], id="all-null"),
        pytest.param([7.0], id="one-row"),
        pytest.param([3.0] * 500, id="one-value"),
        pytest.param([math.inf, -math.inf, math.nan, 1e308, -1e308], id="off-grid"),
        pytest.param([-(2.0**70), 2.0**70, 0.0], id="beyond-the-grid"),
    ],
)
def test_degenerate_columns_still_yield_bounds_and_an_answer(values: list[float | None]) -> None:
    s = _session(_frame(values))
    result = s.sql(SQL, epsilon=1, bounds="auto", source=SeededSource("degenerate"))
    (chosen,) = result.auto_bounds
    assert chosen.lower < chosen.upper
    assert len(result.rows) == 1
    assert result.cost == veil.Budget(epsilon=1)


def test_one_value_columns_find_its_bin() -> None:
    s = _session(_frame([3.0] * 500))
    (chosen,) = s.sql(SQL, epsilon=1, bounds="auto", source=SeededSource("one")).auto_bounds
    assert (chosen.lower, chosen.upper) == (2, 4)  # widening to 0 would double it


def test_the_step_respects_the_privacy_unit_and_contribution_limits() -> None:
    frame = _frame([1.0, 2.0, 3.0], uid=[1, 1, 2])
    s = _session(frame, privacy_unit="uid", max_groups=2, max_rows_per_group=3)
    agg = aggregate_of(s.plan(SQL))
    (step,) = _steps(s, agg, ["x"], Fraction(1, 10), _Limits(None, None, None))
    compiled = aggregate_of(s._compile(step.plan, Fraction(1, 10), None, None, None, None))
    (m,) = compiled.measurements
    assert m.sensitivity == 6
    assert m.scale == 60
    assert step.scale == 60
    assert compiled.privacy_unit == "uid"
    (tight,) = _steps(s, agg, ["x"], Fraction(1, 10), _Limits(1, 1, None))
    assert tight.scale == 10


NEIGHBOUR_VALUES = [
    1e16, -1.0, 0.1, -0.0, 5e-324, 2.0**53, 1e308, -1e308, math.inf, -math.inf, math.nan, None,
    0.5, 3.0, 3.0, 70.0, 2.0**62, -(2.0**62), 2.0**63,
]  # fmt: skip


def _units(values: list[float | None]) -> pd.DataFrame:
    uid = [i % 4 for i in range(len(values))]
    return _frame(values, uid=uid)


@pytest.mark.slow
def test_removing_a_unit_moves_the_steps_counts_by_at_most_its_sensitivity() -> None:
    full = _units(NEIGHBOUR_VALUES * 2)
    for unit in range(4):
        less = full[full["uid"] != unit].reset_index(drop=True)
        changes = []
        for frame in (full, less):
            s = _session(frame, privacy_unit="uid", max_groups=2, max_rows_per_group=2)
            (step,) = _steps(s, aggregate_of(s.plan(SQL)), ["x"], Fraction(1), _Limits(2, 2, None))
            agg = aggregate_of(s._compile(step.plan, Fraction(1), None, None, 2, 2))
            changes.append(exact(s.engine, agg, salt=99))
        (m,) = changes[0].agg.measurements
        keys = set(changes[0].stats) | set(changes[1].stats)
        before, after = changes[0].stats, changes[1].stats
        moved = sum(
            abs(before.get(k, {}).get(m.name, 0) - after.get(k, {}).get(m.name, 0)) for k in keys
        )
        assert moved <= m.sensitivity, (unit, moved)


def _ask(how: str, s: veil.Session, **options: object) -> veil.Result:
    """``SQL`` asked as SQL, as a builder query or as a plan run."""
    if how == "sql":
        return s.sql(SQL, **options)  # type: ignore[arg-type]
    if how == "builder":
        return s.query("t").avg("x", "m").run(**options)
    return s.run(s.plan(SQL), **options)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sql", "builder", "plan"])
def test_neighbours_have_the_same_outcome_and_the_same_shape_of_answer(how: str) -> None:
    full = _units(NEIGHBOUR_VALUES * 2)
    outcomes = []
    for unit in (None, *range(4)):
        frame = full if unit is None else full[full["uid"] != unit].reset_index(drop=True)
        s = _session(frame, privacy_unit="uid")
        try:
            result = _ask(how, s, epsilon=1, bounds="auto", source=SeededSource(f"n{unit}"))
            outcomes.append(("released", len(result.rows), len(result.notes), str(result.cost)))
        except veil.VeilError as exc:  # pragma: no cover - would be the bug this test catches
            outcomes.append(("refused", type(exc).__name__, str(exc), ""))
    assert len(set(outcomes)) == 1, outcomes


def test_veil_bounds_then_the_same_rows_with_auto_pays_for_the_bounds_once() -> None:
    s = _session(PEOPLE)
    (found,) = find_bounds(s, "t", ["x"], epsilon=Fraction(1, 10), where="x > 10")
    result = s.sql(f"{SQL} WHERE x > 10", epsilon=1, bounds="auto")
    (chosen,) = result.auto_bounds
    assert chosen.cached
    assert chosen.pair == found.pair
    assert s.remaining() == veil.Budget(epsilon=Fraction(10) - Fraction(1, 10) - Fraction(9, 10))


@pytest.mark.parametrize(
    "where",
    [
        "x > 10 GROUP BY x",
        "x > 10 --",
        "x > 10 -- the rest is a comment",
        "x > 10 /* a comment */",
        "x > 10; SELECT 1",
        "x > 10) OR (x < 5",
        "x > 10 UNION SELECT x FROM t",
        "SELECT x FROM t",
        "",
        "   ",
        "'unterminated",
    ],
)
def test_find_bounds_takes_where_as_one_condition_and_refuses_anything_else_free(
    where: str,
) -> None:
    s = _session(PEOPLE)
    with pytest.raises(InvalidArgumentError, match=r"must be (one|a non-empty) SQL condition"):
        find_bounds(s, "t", ["x"], epsilon=Fraction(1, 10), where=where)
    assert s.remaining() == veil.Budget(epsilon=10)


def test_find_bounds_where_measures_the_rows_of_the_same_where_clause() -> None:
    s = _session(PEOPLE)
    (found,) = find_bounds(s, "t", ["x"], epsilon=Fraction(1, 10), where="x > 10 OR x < 0")
    again = s.sql(f"{SQL} WHERE x > 10 OR x < 0", epsilon=1, bounds="auto")
    assert again.auto_bounds[0].cached
    assert again.auto_bounds[0].pair == found.pair


def test_explain_says_when_the_grant_does_not_cover_the_whole() -> None:
    s = _session(PEOPLE, epsilon=1)
    explained = s.explain(SQL, epsilon=Fraction(11, 10), bounds="auto")
    assert explained.cost == veil.Budget(epsilon=Fraction(11, 10))
    assert explained.covered is False
    assert s.remaining() == veil.Budget(epsilon=1)


def test_declared_contributions_without_a_unit_scale_the_steps_noise() -> None:
    s = _session(PEOPLE, contributions=3)
    (step,) = _steps(s, aggregate_of(s.plan(SQL)), ["x"], Fraction(1), _Limits(None, None, None))
    assert step.scale == 3


def test_integer_extremes_still_yield_bounds_and_an_answer() -> None:
    frame = pd.DataFrame({"x": pd.array([2**63 - 1, -(2**63), 0, 5, 5, 5], dtype="Int64")})
    s = _session(frame)
    result = s.sql(SQL, epsilon=1, bounds="auto", source=SeededSource("int-extremes"))
    (chosen,) = result.auto_bounds
    assert chosen.lower < chosen.upper
    assert len(result.rows) == 1


@pytest.mark.slow
def test_auto_bounds_run_on_postgresql_as_on_duckdb() -> None:
    pytest.importorskip("psycopg")
    import postgres_support

    qualified = postgres_support.load(pa.table({"x": [float(v) for v in range(1, 401)]}))
    with veil.Session.postgres(
        postgres_support.PG_URL, {"t": qualified}, budget=veil.Budget(epsilon=2)
    ) as s:
        result = s.sql(SQL, epsilon=1, bounds="auto", source=SeededSource("pg"))
    local = _session(PEOPLE).sql(SQL, epsilon=1, bounds="auto", source=SeededSource("pg"))
    assert result.auto_bounds[0].pair == local.auto_bounds[0].pair
    assert result.cost == veil.Budget(epsilon=1)


def test_a_one_point_declared_range_is_refused_free() -> None:
    s = _session(PEOPLE, bounds={"x": (5, 5)})
    with pytest.raises(InvalidArgumentError, match=r"single point \[5, 5\]"):
        s.sql(SQL, epsilon=1, bounds="auto")
    assert s.remaining() == veil.Budget(epsilon=10)
