"""Accuracy targets with ``limits="auto"``: a spurious tail in the limits step's noisy counts
cannot make the query dearer than ``COST_CAP`` times the ε its targets need at the limits the
counts support beyond doubt (``veil.autolimits_target``, issue 40: 6 of 200 releases spent
ε = 0.52 … 30.7 instead of 0.25).

The table is the tour's (20,000 units of one to three rows each), the target ``n=±50``. Seeded
source 204 draws a noisy count of 24 — above the threshold τ = 19 — in the bin of 512–639
rows per unit, which no unit has: the choice from those counts is ``max_rows=512`` (the query
would need ε ≈ 30.4 there, 170 times the 0.178 at 3 rows), the choice from the counts the step
supports beyond doubt is ``max_rows=3``; the query runs at the largest limits whose ε is at
most twice the targets' at 3 rows (4 of 300 seeds drew such a bin, choosing 14, 20, 32, 512).
A real tail of many thin bins (each between τ and 2τ, side by side) is trusted, not capped."""

from __future__ import annotations

from fractions import Fraction

import pyarrow as pa
import pytest

import veil
from support import SeededSource
from veil.accuracy.search import smallest_epsilon
from veil.accuracy.targets import parse_targets
from veil.autobounds_choice import threshold
from veil.autolimits_choice import choose_limit
from veil.autolimits_target import COST_CAP, TargetedLimits, _plan, trusted_counts
from veil.demo import generate_people

SQL = "SELECT COUNT(*) AS n FROM people"
TARGET = "n=±50"
SPURIOUS = 204  # the seed whose limits step shows a far bin above τ (found by a scan of 300)


@pytest.fixture(scope="module")
def people() -> pa.Table:
    return generate_people()


def _session(people: pa.Table, name: str) -> veil.Session:
    return veil.Session.local(
        {"people": people}, privacy_unit="user_id", budget=veil.Budget(epsilon=1000),
        dataset=name,
    )  # fmt: skip


def _targeted(result: veil.Result) -> TargetedLimits:
    assert result.auto_limits is not None
    t = result.auto_limits.targeted
    assert isinstance(t, TargetedLimits)
    return t


@pytest.mark.slow
def test_a_spurious_tail_cannot_make_the_query_dearer_than_the_cap(people: pa.Table) -> None:
    s = _session(people, "spurious")
    result = s.sql(SQL, target=TARGET, limits="auto", source=SeededSource(SPURIOUS))
    t = _targeted(result)
    # the step's released counts, again from the cache (free): a far empty bin passed τ
    planned = _plan(
        s, SQL, target=TARGET, epsilon=None, delta=None, bounds=None, limits="auto",
        limits_share=None, domains=None, given=(None, None, None), quantile_buckets=None,
    )  # fmt: skip
    p = planned.prepared
    step = s.run(p.hist, epsilon=p.step_epsilon, max_groups=1, max_rows_per_group=1)
    assert step.cached
    counts = [int(x["count"]) for x in step.stats]
    tau = threshold(p.step_scale, len(counts))
    far = [c for lower, c in zip(p.grid, counts, strict=True) if lower > 3]  # no unit has > 3
    assert max(far) >= tau  # spurious: noise alone
    assert p.choose(counts).max_rows == 512  # what the counts alone choose
    assert p.choose(trusted_counts(counts, tau, len(counts))).max_rows == 3
    # the cap: ε_T at most twice the targets' ε at the limits the counts support beyond doubt
    assert t.trusted == (3, 3, 3)
    assert t.capped
    assert t.epsilon is not None
    assert t.trusted_epsilon is not None
    assert t.epsilon <= COST_CAP * t.trusted_epsilon
    at_trusted = smallest_epsilon(  # ε_S is the targets' ε at 3 rows (to the search's 0.1 %)
        s, s.plan(SQL), parse_targets(TARGET), max_groups=3, max_rows_per_group=3, max_rows=3
    )
    assert at_trusted is not None
    assert abs(t.trusted_epsilon / at_trusted[1] - 1) <= Fraction(2, 1000)
    assert result.cost == veil.Budget(epsilon=t.limits_epsilon + t.epsilon)
    assert result.cost.eps < Fraction(1)  # against ε ≈ 0.35 + 30.4 at max_rows=512
    assert result.auto_limits is not None
    assert 3 <= result.auto_limits.max_rows <= 6
    assert any("the query ran at the largest limits within that cap" in n for n in result.notes)
    assert abs(result.rows[0][0] - people.num_rows) <= 50 * 3  # most rows kept (bars: ±50)


@pytest.mark.slow
def test_a_step_without_a_spurious_tail_is_not_capped(people: pa.Table) -> None:
    s = _session(people, "plain")
    t = _targeted(s.sql(SQL, target=TARGET, limits="auto", source=SeededSource(0)))
    assert t.trusted == t.chosen == (3, 3, 3)
    assert not t.capped


def test_the_choice_may_be_held_to_some_candidates() -> None:
    grid = [1, 2, 3, 4, 6, 8]
    counts = [0, 0, 0, 0, 0, 500]  # a heavy tail: every unit has 8 rows or more
    noise = [float(t) for t in grid]
    assert choose_limit(grid, counts, noise, Fraction(1)).limit == 8
    assert choose_limit(grid, counts, noise, Fraction(1), {1, 2, 3}).limit == 3
    with pytest.raises(veil.errors.InternalError, match="no candidate"):
        choose_limit(grid, counts, noise, Fraction(1), {5})


def test_an_isolated_bin_above_tau_is_not_trusted_a_run_of_them_is() -> None:
    tau = 10
    #         1   2  3  4  5  6  7  8
    counts = [500, 0, 0, 12, 0, 0, 11, 12]
    assert trusted_counts(counts, tau, len(counts)) == [500, 0, 0, 0, 0, 0, 11, 12]
    assert trusted_counts([0, 0, 25, 0], tau, 4) == [0, 0, 25, 0]  # 2τ alone
    # a joint histogram of two rows of four cells: neighbours across rows count, not wraps
    grid = [0, 0, 0, 12, 12, 0, 0, 0]
    assert trusted_counts(grid, tau, 4) == [0, 0, 0, 0, 0, 0, 0, 0]
    assert trusted_counts([0, 0, 0, 12, 0, 0, 0, 12], tau, 4) == [0, 0, 0, 12, 0, 0, 0, 12]
