"""Selection frequencies of the exponential mechanism, permute-and-flip and randomized response.

Chi-square goodness of fit against the exact probabilities with fixed seeds; the documented
cut-off is p-value > 1e-4 (and < 1e-10 for the deliberately wrong alternatives).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
from scipy import stats

import veil.mechanisms as mech
from support import SeededSource

SCORES = [0, 1, 2, 4]
EPS, SENS = Fraction(1), Fraction(1)


def _freqs(choices: list[int], k: int) -> np.ndarray:  # type: ignore[type-arg]
    return np.bincount(np.array(choices), minlength=k)


def test_exponential_frequencies_match_exp_eps_score_over_2_delta() -> None:
    src = SeededSource("em")
    n = 20_000
    counts = _freqs(
        [mech.exponential(SCORES, sensitivity=SENS, epsilon=EPS, source=src) for _ in range(n)],
        len(SCORES),
    )
    w = np.exp(float(EPS) * np.array(SCORES) / (2 * float(SENS)))
    assert stats.chisquare(counts, w / w.sum() * n).pvalue > 1e-4
    # the PHP seed's inverted weights exp(ε(max − s)/2Δ) are firmly rejected by the same test
    inv = np.exp(float(EPS) * (max(SCORES) - np.array(SCORES)) / (2 * float(SENS)))
    assert stats.chisquare(counts, inv / inv.sum() * n).pvalue < 1e-10


def test_exponential_handles_huge_score_gaps_exactly() -> None:
    # weight ratio e^{-5000}: the low candidate must never be chosen
    src = SeededSource("gap")
    picks = {
        mech.exponential([0, 10_000], sensitivity=1, epsilon=1, source=src) for _ in range(200)
    }
    assert picks == {1}


def _pf_probabilities(scores: list[int]) -> np.ndarray:  # type: ignore[type-arg]
    top = max(scores)
    acc = [math.exp(-float(EPS) * (top - s) / (2 * float(SENS))) for s in scores]
    probs = np.zeros(len(scores))
    perms = list(itertools.permutations(range(len(scores))))
    for perm in perms:
        reach = 1.0
        for i in perm:
            probs[i] += reach * acc[i] / len(perms)
            reach *= 1 - acc[i]
    return probs


def test_report_noisy_max_matches_permute_and_flip_probabilities() -> None:
    src = SeededSource("pf")
    n = 20_000
    counts = _freqs(
        [
            mech.report_noisy_max(SCORES, sensitivity=SENS, epsilon=EPS, source=src)
            for _ in range(n)
        ],
        len(SCORES),
    )
    assert stats.chisquare(counts, _pf_probabilities(SCORES) * n).pvalue > 1e-4


def test_randomized_response_keeps_the_truth_with_probability_e_eps_over_e_eps_plus_k_minus_1() -> (
    None
):
    cats = ["a", "b", "c", "d"]
    n = 100_000
    r = mech.randomized_response(["b"] * n, categories=cats, epsilon=1, source=SeededSource("rr"))
    counts = np.array([(r.value == c).sum() for c in cats])
    keep = math.e / (math.e + 3)
    expected = np.array([(1 - keep) / 3, keep, (1 - keep) / 3, (1 - keep) / 3]) * n
    assert stats.chisquare(counts, expected).pvalue > 1e-4
