"""The smallest ε meeting accuracy targets: exact to the tolerance, monotone, refusals free."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

import veil
from accuracy_support import BOUNDS, Q, session
from veil.accuracy import Target, choose_epsilon, parse_target, target_bars
from veil.errors import BudgetExhaustedError, InvalidArgumentError, UnsupportedQueryError


def bars_at(s: veil.Session, eps: Fraction, targets: tuple[Target, ...]) -> dict[str, float]:
    return target_bars(s.explain(Q, epsilon=eps, bounds=BOUNDS), targets)


def test_count_target_of_50_yields_the_smallest_epsilon_to_within_one_percent() -> None:
    s = session()
    before = s.remaining()
    c = choose_epsilon(s, Q, "n=±50", bounds=BOUNDS)
    assert c.bars["n"] <= 50
    assert bars_at(s, c.epsilon, c.targets)["n"] <= 50
    assert bars_at(s, c.epsilon * Fraction(99, 100), c.targets)["n"] > 50
    assert s.remaining() == before  # the search charged nothing
    # the released bars at that cost are within the target
    r = s.sql(Q, epsilon=c.epsilon, bounds=BOUNDS)
    col = r.columns.index("n")
    assert all(b[col] is not None and b[col] <= 50 for b in r.error_bars(0.95))
    assert r.cost == veil.Budget(epsilon=c.epsilon)


def test_every_target_is_met_and_the_binding_one_is_tight() -> None:
    s = session()
    c = choose_epsilon(
        s, Q, ["n=±50@90%", "total=±20000", "mean=±25"], min_group_size=500, bounds=BOUNDS
    )
    assert c.bars["n"] <= 50
    assert c.bars["total"] <= 20000
    assert c.bars["mean"] <= 25
    lower = bars_at(s, c.epsilon * Fraction(99, 100), c.targets)
    assert any(lower[t.column] > (t.limit or 0) for t in c.targets)
    assert any("min_group_size" in a for a in c.assumptions)


def test_bars_are_nonincreasing_in_epsilon() -> None:
    s = session()
    targets = (Target("n", halfwidth=1.0), Target("total", halfwidth=1.0))
    grid = [Fraction(k, 20) for k in range(1, 60, 3)]
    rows = [bars_at(s, e, targets) for e in grid]
    for col in ("n", "total"):
        seq = [r[col] for r in rows]
        assert all(a >= b for a, b in itertools.pairwise(seq)), seq


def test_relative_target_uses_the_public_reference() -> None:
    s = session()
    c = choose_epsilon(s, Q, "n=±5%", references={"n": 600}, bounds=BOUNDS)
    assert c.bars["n"] <= 30
    assert "reference" in c.assumptions[0]


@pytest.mark.parametrize(
    ("target", "kwargs", "error", "match"),
    [
        ("n=50", {}, InvalidArgumentError, "malformed target 'n=50'"),
        ("n=±abc", {}, InvalidArgumentError, "'abc' is not a number"),
        ("n=±50@150%", {}, InvalidArgumentError, "level 1.5 is out of range"),
        ("n=±-5", {}, InvalidArgumentError, "must be a positive finite"),
        ("nope=±50", {}, InvalidArgumentError, "unknown column 'nope'.*mean, n, total"),
        ("n=±2%", {}, InvalidArgumentError, "relative target on 'n' needs a public reference"),
        ("mean=±5", {}, InvalidArgumentError, "min_group_size=100"),
        (["n=±5", "n=±6"], {}, InvalidArgumentError, "two targets for 'n'"),
    ],
)
def test_bad_targets_are_refused_free(
    target: object, kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    s = session()
    before = s.remaining()
    with pytest.raises(error, match=match):
        choose_epsilon(s, Q, target, bounds=BOUNDS, **kwargs)
    assert s.remaining() == before


def test_quantile_targets_are_refused_clearly() -> None:
    s = session()
    q = "SELECT MEDIAN(income) AS med FROM people"
    with pytest.raises(UnsupportedQueryError, match=r"'med' \((MEDIAN|QUANTILE)"):
        choose_epsilon(s, q, "med=±5", bounds=BOUNDS)


def test_targets_beyond_the_remaining_budget_are_refused_with_the_epsilon_needed() -> None:
    s = session(veil.Budget(epsilon="0.01"))
    before = s.remaining()
    with pytest.raises(
        BudgetExhaustedError, match=r"need ε=1\.0.*remaining budget is ε=0\.01.*nothing was charged"
    ):
        choose_epsilon(s, Q, "n=±5", bounds=BOUNDS)
    assert s.remaining() == before


def test_parse_target_reads_level_and_relative() -> None:
    t = parse_target("avg_income = ±2% @ 90%", reference=30000)
    assert t.relative == pytest.approx(0.02)
    assert t.level == pytest.approx(0.9)
    assert t.limit == pytest.approx(600)
    assert parse_target("n=+-50@0.9").halfwidth == 50


def test_session_explain_and_sql_take_a_target() -> None:
    s = session()
    before = s.remaining()
    e = s.explain(Q, target="n=±50", bounds=BOUNDS)
    assert e.notes[0].startswith("smallest epsilon meeting every target")
    assert any(n.startswith("target n ±50 at 95%") for n in e.notes)
    assert s.remaining() == before
    c = choose_epsilon(s, Q, "n=±50", bounds=BOUNDS)
    assert e.cost == c.explanation.cost
    r = s.sql(Q, target="n=±50", bounds=BOUNDS)
    assert r.cost == veil.Budget(epsilon=c.epsilon)
    with pytest.raises(InvalidArgumentError, match="not both"):
        s.sql(Q, target="n=±50", epsilon=1, bounds=BOUNDS)


@pytest.mark.filterwarnings("ignore:epsilon=.* protects little")  # probes far above ε*
@pytest.mark.parametrize("start", [1e-5, 0.01, 0.2, 3, 900])
def test_a_start_hint_changes_the_probes_not_the_answer(start: float) -> None:
    s = session()
    tol = 0.001
    plain = choose_epsilon(s, Q, "n=±50", bounds=BOUNDS)
    hinted = choose_epsilon(s, Q, "n=±50", bounds=BOUNDS, start=start)
    assert bars_at(s, hinted.epsilon, hinted.targets)["n"] <= 50
    assert bars_at(s, hinted.epsilon / Fraction(1 + tol), hinted.targets)["n"] > 50
    assert abs(hinted.epsilon / plain.epsilon - 1) <= tol


@pytest.mark.filterwarnings("ignore:epsilon=.* protects little")  # the targets need ε ≫ 10
def test_avg_targets_at_large_epsilon_are_found_and_unmeetable_ones_refused_free() -> None:
    # Past ε ≈ 1000 the AVG bar's sum noise is narrower than the closed forms' 10^6 grid
    # steps; its bars take the exact two-noise mixture (noise.errorbars), so the search
    # reaches ε = 10⁴ in probes of milliseconds (the grid convolution took 98 s per probe)
    s = session(veil.Budget(epsilon=10**6))
    before = s.remaining()
    c = choose_epsilon(s, Q, "mean=±0.1", min_group_size=10, bounds=BOUNDS)
    assert 1000 < c.epsilon < 10**4
    want = c.targets
    assert bars_at(s, c.epsilon, want)["mean"] <= 0.1 < bars_at(s, c.epsilon * 0.99, want)["mean"]
    with pytest.raises(InvalidArgumentError, match=r"need more than epsilon=10000.*nothing"):
        choose_epsilon(s, Q, "mean=±0.02", min_group_size=10, bounds=BOUNDS)
    assert s.remaining() == before


def _weighted_session() -> veil.Session:
    import numpy as np
    import pyarrow as pa

    from support import SeededSource
    from veil.engines.fake import FakeEngine

    rng = np.random.default_rng(3)  # the table (data), not noise
    n = 2000
    table = pa.table(
        {
            "user_id": np.arange(n),
            "state": rng.choice(["CA", "NY", "TX"], n),
            "income": rng.uniform(0, 1000, n),
            "w": rng.uniform(0, 10, n),  # per-state total weight ≈ 3 300
        }
    )
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "people", veil.Budget(epsilon=10))
    return veil.Session(
        FakeEngine({"people": table}),
        ledger=ledger,
        analyst="alice",
        dataset="people",
        privacy_unit="user_id",
        domains={"state": ("CA", "NY", "TX")},
        source=SeededSource(1),
    )


WQ = "SELECT state, AVG(income) AS m FROM people GROUP BY state"
WB = {"income": (0, 1000), "w": (0, 10)}


@pytest.mark.parametrize("bounds", [WB, {"income": (-200, 1000), "w": (1, 10)}])
def test_a_weighted_avg_target_states_a_total_weight_and_its_bars_meet_it(
    bounds: dict[str, tuple[float, float]],
) -> None:
    # the bar of a weighted AVG is a function of the noisy total weight Ŵ and the noisy mean;
    # min_group_size states Ŵ (a public assumption) and the search takes the widest bar over
    # the means in the bounds — also where both sums are centred away from 0 (second bounds)
    s = _weighted_session()
    before = s.remaining()
    c = choose_epsilon(s, WQ, "m=±20", min_group_size=3000, bounds=bounds, weights="w")
    assert s.remaining() == before  # free
    assert any("total weight is 3000" in a for a in c.assumptions)

    def bar(eps: Fraction) -> float:
        return target_bars(s.explain(WQ, epsilon=eps, bounds=bounds, weights="w"), c.targets)["m"]

    assert bar(c.epsilon) <= 20 < bar(c.epsilon * Fraction(99, 100))
    # released groups whose total weight is above the assumption get bars within the target
    r = s.sql(WQ, epsilon=c.epsilon, bounds=bounds, weights="w")
    assert r.cost == veil.Budget(epsilon=c.epsilon)
    assert all(0 < row[1] <= 20 for row in r.error_bars(0.95))
    # without the assumption: refused free, saying what to state
    after = s.remaining()
    with pytest.raises(InvalidArgumentError, match=r"total weight .*min_group_size=100000"):
        choose_epsilon(s, WQ, "m=±20", bounds=bounds, weights="w")
    assert s.remaining() == after
