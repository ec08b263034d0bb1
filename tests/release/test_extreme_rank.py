"""MIN and MAX aim k ranks in from their end, k as close to the extreme as the noise allows
(issue 40): the least half rank at which a release outside the data keeps probability ≤ β for
every dataset — exactly, on the worst one (every row in one cell: MAX then has every other
cell above the data, each at distance k) — and their note says which rank they estimate."""

from __future__ import annotations

import math
from fractions import Fraction

import pyarrow as pa
import pytest

import veil
from veil.accounting.budget import Budget
from veil.noise.ranks import EXTREME_MISS, extreme_rank
from veil.plan.nodes import Measurement
from veil.release.quantiles import quantile_scores


def _max(scale: Fraction, limit: int) -> Measurement:
    return Measurement(
        name="quantile(x, 1)", statistic="quantile", mechanism="exponential",
        budget=Budget(epsilon=1), sensitivity=Fraction(1), scale=scale, column="x",
        centre=Fraction(0), step=Fraction(1), limit=limit, quantile=Fraction(1),
    )  # fmt: skip


def _outside(scale: Fraction, limit: int, k: Fraction, n: int) -> float:
    """P(release above the maximum) when all n rows lie in cell 0 and MAX aims k ranks in:
    the cell of the data scores 0, the limit − 1 cells above it −k (exact, in floats)."""
    above = (limit - 1) * math.exp(-float(k / scale))
    return above / (1 + above)


@pytest.mark.parametrize(
    ("scale", "limit"), [(Fraction(2), 101), (Fraction(8), 2**32), (Fraction(1, 3), 7)]
)
def test_k_is_the_least_half_rank_keeping_a_release_inside_the_data(
    scale: Fraction, limit: int
) -> None:
    k = extreme_rank(scale, limit)
    assert (2 * k).denominator == 1
    n = int(4 * k) + 2  # n ≥ 2k: the target is k ranks in
    assert _outside(scale, limit, k, n) <= float(EXTREME_MISS)
    assert _outside(scale, limit, k - Fraction(1, 2), n) > float(EXTREME_MISS)


def test_the_worst_dataset_scores_as_the_bound_assumes() -> None:
    m = _max(Fraction(2), 40)
    k = extreme_rank(m.scale, m.limit)
    n = int(4 * k) + 2
    scores = quantile_scores(m, {0: n})
    assert scores[0] == 0
    assert set(scores[1:]) == {-k}  # every cell above the data, at distance exactly k


def test_the_issue_s_max_aims_two_hundred_ranks_in_and_says_so() -> None:
    # MAX(income) by sex on 2^32 cells at ε/4 per group: scale 8
    assert extreme_rank(Fraction(8), 2**32) == Fraction(403, 2)  # 201.5 (was 202)
    people = pa.table({"x": [float(i) for i in range(1000)]})
    s = veil.Session.local({"t": people}, budget=veil.Budget(epsilon=1), bounds={"x": (0, 1000)})
    r = s.sql("SELECT MAX(x) AS top FROM t", epsilon=1)
    (note,) = r.notes
    assert note.startswith("top: the value ")
    assert "ranks from the top (rank n − " in note
    assert "not the maximum" in note
    e = s.explain("SELECT MIN(x) AS bottom FROM t", epsilon=1)
    assert any("ranks from the bottom (rank " in v for v in e.errors.values())
