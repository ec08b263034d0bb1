"""Debiased estimates of perturbed (local-DP) releases: unbiased, and their 95 % bars cover.

Fixed seeds through an injected source; thresholds: over 300 independent releases the true
value must fall inside the 95 % bar in at least 92 % of them (the bars are conservative, so
the expected coverage is ≥ 95 %; 92 % is more than 2.5 binomial standard deviations below),
and the mean of the estimates must be within 4 standard errors of the truth (unbiased).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from support import SeededSource
from veil import perturb
from veil.postprocess import laplace_mean, rr_frequencies

REPS = 300


@pytest.mark.slow
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_randomized_response_frequencies_are_unbiased_and_their_bars_cover(epsilon: float) -> None:
    truth = {"a": 1200, "b": 500, "c": 300}
    table = pa.table({"c": [k for k, n in truth.items() for _ in range(n)]})
    hits = dict.fromkeys(truth, 0)
    estimates: dict[str, list[float]] = {k: [] for k in truth}
    for rep in range(REPS):
        p = perturb(
            table, epsilon=epsilon, categories={"c": ["a", "b", "c"]}, source=SeededSource(rep)
        )
        for cat, est in p.frequencies("c").items():
            estimates[str(cat)].append(est.value)
            hits[str(cat)] += abs(est.value - truth[str(cat)]) <= est.error_bar
    for cat, n in truth.items():
        assert hits[cat] / REPS >= 0.92, (cat, hits[cat])
        values = np.array(estimates[cat])
        assert abs(values.mean() - n) <= 4 * values.std() / np.sqrt(REPS), cat


@pytest.mark.slow
def test_the_mean_of_a_perturbed_column_is_unbiased_and_its_bar_covers() -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(0, 100, 2000)
    truth = float(np.clip(x, 0, 100).mean())
    table = pa.table({"x": x})
    hits, means = 0, []
    for rep in range(REPS):
        est = perturb(table, epsilon=1, bounds={"x": (0, 100)}, source=SeededSource(rep)).mean("x")
        means.append(est.value)
        hits += abs(est.value - truth) <= est.error_bar
    assert hits / REPS >= 0.92
    arr = np.array(means)
    assert abs(arr.mean() - truth) <= 4 * arr.std() / np.sqrt(REPS)


def test_frequencies_can_be_read_from_a_mapping_of_report_counts() -> None:
    est = rr_frequencies({"x": 70, "y": 30}, categories=["x", "y"], epsilon=1)
    assert est["x"].value + est["y"].value == pytest.approx(100)
    assert est["x"].error_bar == est["y"].error_bar > 0


def test_a_mean_of_nothing_has_no_estimate() -> None:
    from fractions import Fraction

    from veil.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match="no values"):
        laplace_mean([], noise_scale=Fraction(10), grid=0)
