"""Quantile scores and the exponential-mechanism choice."""

from __future__ import annotations

from fractions import Fraction

from support import SeededSource
from veil.accounting import Budget
from veil.plan import Measurement
from veil.release.quantiles import choose_quantile, quantile_scores


def measurement(q: Fraction, eps_g: Fraction, limit: int = 10) -> Measurement:
    sens = max(q, 1 - q)
    return Measurement(
        name="quantile(x, q)",
        statistic="quantile",
        mechanism="exponential",
        budget=Budget(epsilon=eps_g),
        sensitivity=sens,
        scale=2 * sens / eps_g,
        column="x",
        centre=Fraction(0),
        step=Fraction(10),
        limit=limit,
        quantile=q,
    )


def test_scores_are_minus_the_rank_distance_of_each_edge() -> None:
    assert quantile_scores([2, 0, 2], Fraction(1, 2)) == [-2, 0, 0, -2]
    assert quantile_scores([1, 3], Fraction(0)) == [0, -1, -4]


def test_integer_candidates_are_scored_by_mid_rank() -> None:
    # values 1, 2, 3 over candidates 0…4: the median 2 alone scores 0
    scores = quantile_scores([0, 1, 1, 1, 0], Fraction(1, 2), discrete=True)
    assert scores == [Fraction(-3, 2), -1, 0, -1, Fraction(-3, 2)]


def test_a_large_epsilon_picks_an_edge_at_the_true_median() -> None:
    counts = [0, 0, 0, 50, 0, 0, 50, 0, 0, 0]  # half below edge 4..6, half above
    src = SeededSource("median")
    m = measurement(Fraction(1, 2), Fraction(50))
    picks = {choose_quantile(m, counts, source=src) for _ in range(20)}
    assert picks <= {4, 5, 6}


def test_a_tiny_epsilon_spreads_over_all_candidates() -> None:
    counts = [10] * 10
    src = SeededSource("spread")
    m = measurement(Fraction(1, 2), Fraction(1, 1000))
    picks = {choose_quantile(m, counts, source=src) for _ in range(200)}
    assert len(picks) >= 8
