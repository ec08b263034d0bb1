"""Quantiles: rank-interval scores, their sensitivity on neighbouring data, the exact sampler
against the exact pmf, reachability and the rank bound.

Documented thresholds. Distribution tests draw N samples from a seeded source and compare them
with the exact pmf by a χ² goodness-of-fit test (cells with expected count < 5 pooled); they
fail below p = 10⁻³ (a correct sampler fails with probability 10⁻³, and the seed is fixed, so
the outcome is too). A wrong weight of 10 % on a cell holding 5 % of the mass moves χ² by
≈ N·0.05·0.01 = 10 at N = 20 000, far beyond the threshold on these few cells.
"""

from __future__ import annotations

import math
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from support import SeededSource
from veil.accounting import Budget
from veil.errors import InternalError
from veil.noise.ranks import extreme_rank, rank_halfwidth
from veil.plan import Measurement
from veil.release.quantiles import (
    choose_quantile,
    quantile_runs,
    quantile_scores,
    sample_runs,
    score_change,
)

N = 20_000
P_MIN = 1e-3


def measurement(q: Fraction, eps: Fraction, limit: int, rows: int = 1) -> Measurement:
    sens = rows * max(q, 1 - q)
    return Measurement(
        name="quantile(x, q)",
        statistic="quantile",
        mechanism="exponential",
        budget=Budget(epsilon=eps),
        sensitivity=sens,
        scale=2 * sens / eps,
        column="x",
        centre=Fraction(0),
        step=Fraction(1),
        limit=limit,
        quantile=q,
    )


def brute_scores(m: Measurement, values: list[int]) -> list[Fraction]:
    """−dist(τ, [#{x < j}, #{x ≤ j}]) for every candidate j, written out directly."""
    n = len(values)
    q = m.quantile
    assert q is not None
    if q in (0, 1):
        k = extreme_rank(m.scale, m.limit)
        near = min(Fraction(k), Fraction(n, 2))
        target = near if q == 0 else n - near
    else:
        target = q * n
    out = []
    for j in range(m.limit):
        lt = sum(1 for v in values if v < j)
        le = sum(1 for v in values if v <= j)
        out.append(-max(lt - target, target - le, Fraction(0)))
    return out


def cells(values: list[int]) -> dict[int, int]:
    return dict(Counter(values))


# ── scores ───────────────────────────────────────────────────────────────────────────────────


def test_a_tied_value_holding_the_target_rank_scores_zero_and_the_gap_below_it_does_not() -> None:
    # the LFS AGE shape: a few bands; the median band is 47, the gap 33…46 below it is not
    values = [7] * 10 + [20] * 20 + [32] * 15 + [47] * 25 + [65] * 20 + [75] * 10
    m = measurement(Fraction(1, 2), Fraction(1), 101)
    scores = quantile_scores(m, cells(values))
    assert scores == brute_scores(m, values)
    assert [j for j, s in enumerate(scores) if s == 0] == [47]
    assert scores[40] == -5  # the gap's one rank (45) is 5 from n/2 = 50
    assert scores[46] == scores[33] == -5


@pytest.mark.parametrize("q", [Fraction(0), Fraction(1, 10), Fraction(1, 2), Fraction(1)])
def test_scores_equal_the_rank_interval_distance_written_out(q: Fraction) -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(3, 27, 40).tolist()
    m = measurement(q, Fraction(1, 2), 30)
    assert quantile_scores(m, cells(values)) == brute_scores(m, values)


def test_min_and_max_aim_k_ranks_in_but_never_past_the_median() -> None:
    m = measurement(Fraction(0), Fraction(1), 100)
    k = extreme_rank(m.scale, m.limit)
    assert k == Fraction(math.ceil(2 * 2 * math.log(99 * 19)), 2)  # in half ranks
    many = [10] * 5 + [20] * int(3 * k)
    assert max(range(100), key=lambda j: quantile_scores(m, cells(many))[j]) == 20
    few = [10, 11, 12, 13]  # n/2 = 2 < k: the target is the rank 2
    assert quantile_scores(m, cells(few))[11] == 0


# ── neighbouring datasets ────────────────────────────────────────────────────────────────────


def datasets(kind: str, rng: np.random.Generator) -> list[int]:
    n = int(rng.integers(0, 60))
    match kind:
        case "banded":
            return rng.choice([2, 9, 9, 15, 40, 63], n).tolist()
        case "integer":
            return rng.integers(0, 64, n).tolist()
        case _:  # continuous values on a 2^32 grid: mostly distinct cells
            return rng.integers(0, 1 << 32, n).tolist()


@pytest.mark.parametrize("kind", ["banded", "integer", "continuous"])
@pytest.mark.parametrize("q", [Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(9, 10), 1])
def test_adding_a_unit_of_r_rows_moves_no_score_by_more_than_the_sensitivity(
    kind: str, q: Fraction
) -> None:
    rng = np.random.default_rng(hash((kind, str(q))) % 2**32)
    limit = 1 << 32 if kind == "continuous" else 64
    worst = Fraction(0)
    for trial in range(150):
        rows = 1 + trial % 3
        m = measurement(Fraction(q), Fraction(2), limit, rows=rows)  # MIN/MAX: k ≤ 22 < n/2
        base = datasets(kind, rng)
        extra = datasets(kind, rng)[:rows] or [int(rng.integers(0, limit))]
        change = score_change(m, cells(base), cells(base + extra))
        assert change <= m.sensitivity
        worst = max(worst, change / m.sensitivity)
        if limit <= 64:  # the vectorised comparison equals the candidate-by-candidate one
            a, b = brute_scores(m, base), brute_scores(m, base + extra)
            assert change == max(abs(x - y) for x, y in zip(a, b, strict=True))
    assert worst == 1  # the bound is attained: the test could catch a smaller claim


# ── the sampler against the exact pmf ────────────────────────────────────────────────────────


def exact_pmf(m: Measurement, values: list[int]) -> np.ndarray:
    u = np.array([float(s) for s in brute_scores(m, values)])
    w = np.exp((u - u.max()) / float(m.scale))
    return np.asarray(w / w.sum())


def chi2_pvalue(observed: np.ndarray, expected: np.ndarray) -> float:
    order = np.argsort(expected)
    obs, exp_ = observed[order], expected[order]
    small = np.cumsum(exp_) < 5  # pool the smallest cells into one of expected count ≥ 5
    pooled_o = np.append(obs[small].sum(), obs[~small])
    pooled_e = np.append(exp_[small].sum(), exp_[~small])
    if pooled_e[0] == 0:
        pooled_o, pooled_e = pooled_o[1:], pooled_e[1:]
    return float(stats.chisquare(pooled_o, pooled_e * pooled_o.sum() / pooled_e.sum()).pvalue)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("q", "eps", "values"),
    [
        (Fraction(1, 2), Fraction(1, 2), [3] * 4 + [9] * 3 + [10] * 5 + [30] * 2),
        (Fraction(1, 4), Fraction(2), [5, 6, 7, 20, 21, 22, 23, 38]),
        (Fraction(0), Fraction(4), [12] * 6 + [13, 25, 26]),  # MIN: distances far into the tail
        (Fraction(1), Fraction(1), [1, 2, 2, 2, 3, 30]),
    ],
)
def test_draws_follow_the_exact_exponential_mechanism_pmf(
    q: Fraction, eps: Fraction, values: list[int]
) -> None:
    m = measurement(q, eps, 40)
    src = SeededSource(f"pmf-{q}-{eps}")
    picks = [choose_quantile(m, *zip(*cells(values).items(), strict=True), source=src)
             for _ in range(N)]  # fmt: skip
    observed = np.bincount(picks, minlength=m.limit).astype(float)
    expected = exact_pmf(m, values) * N
    assert chi2_pvalue(observed, expected) > P_MIN
    assert observed[expected == 0].sum() == 0


@pytest.mark.slow
def test_on_a_2_to_32_grid_each_run_is_drawn_with_its_exact_mass() -> None:
    # runs of equal score: mass ∝ length · exp(−distance/scale); positions uniform inside
    m = measurement(Fraction(1, 2), Fraction(1, 64), 1 << 32)  # scale 64: wide spread
    values = [1000, 1 << 20, (1 << 20) + 5, 1 << 31, (1 << 31) + 1, (1 << 32) - 1] * 10
    runs = quantile_runs(m, *zip(*cells(values).items(), strict=True))
    weight = runs.length * np.exp(-runs.distance.astype(float) / (runs.factor * float(m.scale)))
    src = SeededSource("runs")
    picks = np.array([sample_runs(runs, m.scale, src) for _ in range(N)])
    which = np.searchsorted(runs.start, picks, side="right") - 1
    observed = np.bincount(which, minlength=runs.start.size).astype(float)
    assert chi2_pvalue(observed, weight / weight.sum() * N) > P_MIN
    # inside the widest run the positions are uniform (its two halves equally often)
    wide = int(np.argmax(weight))
    inside = picks[which == wide] - runs.start[wide]
    half = int(runs.length[wide]) // 2
    assert stats.binomtest(int((inside < half).sum()), inside.size).pvalue > P_MIN


def test_every_candidate_is_reachable_and_nothing_outside_the_grid_is() -> None:
    m = measurement(Fraction(1, 2), Fraction(1, 1000), 12)
    src = SeededSource("reach")
    picks = {choose_quantile(m, [2, 3], [5, 1], source=src) for _ in range(600)}
    assert picks == set(range(12))


def test_counts_beyond_64_bit_ranks_are_scored_exactly() -> None:
    m = measurement(Fraction(1, 3), Fraction(1), 8)
    big = 1 << 62  # n = 1.5·2^62 fits int64, 3·n does not
    runs = quantile_runs(m, [1, 6], [big, big // 2])
    assert runs.distance.dtype == object
    assert runs.distance[1] == 0  # the cell 1 covers [0, 2^62] ∋ n/3 = 2^61
    assert choose_quantile(m, [1, 6], [big, big // 2], source=SeededSource(3)) == 1


@pytest.mark.parametrize("wide", [False, True], ids=["int64", "python-integers"])
def test_the_shared_class_thresholds_give_each_run_its_exact_class(wide: bool) -> None:
    """f = min(⌊s·γ·c⌋, cap) for distances on both sides of every threshold, by the thresholds
    computed once per (γ, cap) and shared by every group, against Fractions written out."""
    from veil.release.quantiles import _LOG2E_LOW, Runs, _classes

    gamma, cap = Fraction(1, 6 * 7), 40
    inv = 1 / (gamma * _LOG2E_LOW)
    edges = [math.ceil(k * inv) for k in range(1, cap + 3)]
    distances = sorted({0, 1, *(e + d for e in edges for d in (-1, 0, 1)), 10**6})
    dtype: object = object if wide else np.int64
    runs = Runs(
        start=np.arange(len(distances), dtype=np.int64),
        length=np.ones(len(distances), dtype=np.int64),
        distance=np.array(distances, dtype=dtype),
        factor=6,
    )
    for _ in range(2):  # the second call reads the cached thresholds
        got = _classes(runs, gamma, cap).tolist()
        want = [min(math.floor(s * gamma * _LOG2E_LOW), cap) for s in distances]
        assert got == want


def test_cells_a_correct_lowering_cannot_return_are_a_bug() -> None:
    m = measurement(Fraction(1, 2), Fraction(1), 8)
    with pytest.raises(InternalError, match="distinct, inside the grid"):
        choose_quantile(m, [3, 3], [1, 1])
    with pytest.raises(InternalError, match="one count per"):
        choose_quantile(m, [3, 4], [1])


# ── the rank bound: releases stay within it on banded, integer and continuous data ─────────


@pytest.mark.parametrize("kind", ["banded", "integer", "continuous"])
@pytest.mark.parametrize("q", [Fraction(0), Fraction(1, 2), Fraction(9, 10), Fraction(1)])
def test_released_rank_errors_stay_within_the_95_percent_bound(kind: str, q: Fraction) -> None:
    rng = np.random.default_rng(11)
    limit = 1 << 32 if kind == "continuous" else 101
    match kind:
        case "banded":
            values = rng.choice([7, 20, 32, 47, 65, 75], 3000).tolist()
        case "integer":
            values = np.clip(rng.normal(50, 15, 3000), 0, 100).astype(int).tolist()
        case _:
            values = rng.integers(0, 1 << 32, 3000).tolist()
    m = measurement(q, Fraction(1, 2), limit)
    r = rank_halfwidth(m.scale, m.limit, 0.95)
    got = cells(values)
    runs = quantile_runs(m, list(got), list(got.values()))
    src = SeededSource(f"bound-{kind}-{q}")
    misses = 0
    reps = 300
    for _ in range(reps):
        j = sample_runs(runs, m.scale, src)
        i = int(np.searchsorted(runs.start, j, side="right") - 1)
        misses += runs.distance[i] / runs.factor > r
    # P(miss) < 5 %: fewer than 27 misses in 300 fails with probability < 10⁻³ if it holds
    assert misses <= 26


@pytest.mark.parametrize("q", [Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(1)])
@pytest.mark.parametrize("limit", [1, 7, 101, 1 << 32])
def test_the_binary_search_of_classes_draws_what_the_full_pass_draws(
    q: Fraction, limit: int
) -> None:
    """A quantile's runs are unimodal: their classes found by binary search give the same
    class sizes and, from the same source, the same candidates draw by draw as a pass over
    every run (empty cells, one cell, cells at both ends of the grid, ties, a tiny scale)."""
    from dataclasses import replace

    from veil.release.quantiles import _per_class_unimodal

    rng = np.random.default_rng(5)
    for trial in range(12):
        occupied = int(rng.integers(0, min(limit, 40) + 1))
        b = np.sort(rng.choice(limit, size=occupied, replace=False)) if occupied else []
        if trial == 1 and limit > 1:
            b = np.array([0, limit - 1])
        c = rng.integers(1, 6 if trial % 2 else 2000, size=len(b))
        eps = Fraction(1, 3) if trial % 3 else Fraction(40)
        m = measurement(q, eps, limit, rows=1 + trial % 2)
        runs = quantile_runs(m, b, c)
        assert runs.unimodal
        gamma = 1 / (runs.factor * m.scale)
        if runs.distance.size > 1:  # (one run: nothing to search)
            assert _per_class_unimodal(runs, gamma, 64 + limit.bit_length()) is not None
        full = replace(runs, unimodal=False)
        a, z = SeededSource(f"same-{trial}"), SeededSource(f"same-{trial}")
        fast = [sample_runs(runs, m.scale, a) for _ in range(40)]
        assert fast == [sample_runs(full, m.scale, z) for _ in range(40)]
        assert a.random_bytes(8) == z.random_bytes(8)  # and the same number of bytes read
