"""The fast (closed-form, many-groups) error bars against the exact grid convolution."""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import numpy as np
import pytest

from veil.noise import aggregate_bars as ab
from veil.noise import errorbars as eb
from veil.noise.aggregate_bars import avg_halfwidths, stddev_halfwidths
from veil.noise.errorbars import combination_halfwidth, combination_halfwidths

K = 1 << 30
LAPLACE_SUM = ("discrete_laplace", Fraction(K) * 2)
LAPLACE_SQUARES = ("discrete_laplace", Fraction(K) * 3)
LAPLACE_COUNT = ("discrete_laplace", Fraction(670215385, 182537948))  # ≈ 3.67
GAUSS_SUM = ("discrete_gaussian", Fraction(K) ** 2 * 4)
GAUSS_SQUARES = ("discrete_gaussian", Fraction(K) ** 2 * 9)
GAUSS_COUNT = ("discrete_gaussian", Fraction(409035557, 97774385))  # σ² ≈ 4.18


def _sd(terms: list[tuple[float, str, Fraction]]) -> float:
    return math.sqrt(sum((abs(c) * eb._std(m, s)) ** 2 for c, m, s in terms))


SHAPES = {
    "laplace sum+count": (LAPLACE_SUM, LAPLACE_COUNT),
    "laplace squares+sum+count": (LAPLACE_SQUARES, LAPLACE_SUM, LAPLACE_COUNT),
    "gaussian sum+count": (GAUSS_SUM, GAUSS_COUNT),
    "gaussian squares+sum+count": (GAUSS_SQUARES, GAUSS_SUM, GAUSS_COUNT),
    "laplace two wide": (LAPLACE_SQUARES, LAPLACE_SUM),
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_the_fast_bars_are_never_narrower_than_the_exact_grid_computation(
    shape: str, level: float
) -> None:
    # The grid's answer g = (m + n/2)·h with m the smallest window reaching the level on the
    # grid, so the true quantile is above g − (n + 1)·h (h = sd/500): a fast bar below that
    # would under-cover. 60 random coefficient sets per shape, coefficients over 6 decades
    # (fixed seed: the coefficients are data, not noise); the fast bar is also at most the
    # grid's (which exceeds the quantile by n·h/2 at most) plus a hair.
    noises = SHAPES[shape]
    rng = np.random.default_rng(zlib.crc32(f"{shape} {level}".encode()))
    reps = 60
    coefs = [
        10 ** rng.uniform(-3, 3, reps) / (K if m_s[1] > 10**6 else 1) * rng.choice([-1, 1], reps)
        for m_s in noises
    ]
    fast = combination_halfwidths(
        [(c, m, s) for c, (m, s) in zip(coefs, noises, strict=True)], level
    )
    for g in range(reps):
        terms = [(float(c[g]), m, s) for c, (m, s) in zip(coefs, noises, strict=True)]
        grid = eb._grid_halfwidth(terms, level)
        h = _sd(terms) / eb._CELLS
        n = len(terms)
        assert fast[g] >= grid - (n + 1) * h, (terms, fast[g], grid)
        assert fast[g] <= grid + 1e-6 * grid, (terms, fast[g], grid)


def test_one_group_at_a_time_and_all_at_once_agree() -> None:
    a = np.array([3.0, 100.0, 0.5])
    batch = combination_halfwidths([(500 / K, *LAPLACE_SUM), (a, *LAPLACE_COUNT)], 0.95)
    one = [combination_halfwidth([(500 / K, *LAPLACE_SUM), (x, *LAPLACE_COUNT)]) for x in a]
    assert batch.tolist() == pytest.approx(one, rel=1e-12)


def test_a_group_without_wide_noise_gets_the_exact_discrete_quantile() -> None:
    t = combination_halfwidths([(np.zeros(1), *LAPLACE_SUM), (2.5, *LAPLACE_COUNT)], 0.95)
    assert t[0] == 2.5 * eb.laplace_halfwidth(LAPLACE_COUNT[1], 0.95)


def test_shapes_off_the_fast_path_and_the_mixture_fall_back_to_the_grid() -> None:
    # three narrow noises: neither the closed forms nor the two-noise mixture apply
    terms = [
        (1.0, "discrete_laplace", Fraction(3)),
        (2.0, "discrete_laplace", Fraction(5)),
        (0.5, "discrete_laplace", Fraction(2)),
    ]
    batch = combination_halfwidths([(np.array([c]), m, s) for c, m, s in terms])
    assert batch[0] == eb._grid_halfwidth(terms, 0.95)
    # two noises, both of support beyond the mixture's limit
    wide = [(1.0, "discrete_laplace", Fraction(400)), (2.0, "discrete_laplace", Fraction(500))]
    assert eb._support(*wide[0][1:]) > eb._MIX_POINTS
    batch = combination_halfwidths([(np.array([1.0]), *wide[0][1:]), (2.0, *wide[1][1:])])
    assert batch[0] == eb._grid_halfwidth(wide, 0.95)


def _pmf(mechanism: str, scale: Fraction, k_max: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact pmf on −k_max…k_max (normalised over it; the cut tail is < 1e-15)."""
    k = np.arange(-k_max, k_max + 1, dtype=np.float64)
    if mechanism == "discrete_laplace":
        w = np.exp(-np.abs(k) / float(scale))
    else:
        w = np.exp(-(k * k) / (2 * float(scale)))
    return k, w / w.sum()


def _exact_quantile(terms: list[tuple[float, str, Fraction]], level: float) -> float:
    """The smallest t with P(|c_a·X + c_b·Y| ≤ t) ≥ level, by enumerating the joint law."""
    (ca, ma, sa), (cb, mb, sb) = terms
    xa, pa = _pmf(ma, sa, 3 * eb._support(ma, sa))
    xb, pb = _pmf(mb, sb, 3 * eb._support(mb, sb))
    v = np.abs(ca * xa[:, None] + cb * xb[None, :]).ravel()
    p = (pa[:, None] * pb[None, :]).ravel()
    order = np.argsort(v, kind="stable")
    v, cum = v[order], np.cumsum(p[order])
    return float(v[np.searchsorted(cum, level, side="left")])


DL, DG = "discrete_laplace", "discrete_gaussian"
MIXED = {
    "laplace+laplace": ((DL, Fraction(37, 3)), (DL, Fraction(1, 2))),
    "gauss+gauss": ((DG, Fraction(50)), (DG, Fraction(3, 4))),
    "laplace+gauss": ((DL, Fraction(20)), (DG, Fraction(2))),
    "staircase": ((DL, Fraction(1, 3)), (DL, Fraction(1, 5))),
}


@pytest.mark.parametrize("shape", list(MIXED))
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_the_two_noise_mixture_is_the_exact_quantile_to_its_tolerance(
    shape: str, level: float
) -> None:
    # against the joint law enumerated point by point: the bar covers (never below the exact
    # quantile at the level) and is tight (within 1e-6 of the quantile at level + 2e-9, the
    # margin the search adds); coefficients over 4 decades, both orders, fixed seed (data)
    (ma, sa), (mb, sb) = MIXED[shape]
    rng = np.random.default_rng(zlib.crc32(f"mix {shape} {level}".encode()))
    ca = 10 ** rng.uniform(-2, 2, 25)
    cb = 10 ** rng.uniform(-2, 2, 25) * rng.choice([-1, 1], 25)
    got = combination_halfwidths([(ca, ma, sa), (cb, mb, sb)], level)
    for g in range(25):
        terms = [(float(ca[g]), ma, sa), (float(cb[g]), mb, sb)]
        low = _exact_quantile(terms, level)
        high = _exact_quantile(terms, level + 2e-9)
        assert low * (1 - 1e-12) <= got[g] <= high * (1 + 1e-6) + 1e-300, (terms, got[g], low)
        one = combination_halfwidth(terms[::-1], level)  # the scalar path, terms swapped
        assert one == pytest.approx(float(got[g]), rel=1e-6)


def test_a_group_without_the_closed_form_term_gets_the_mixing_noise_own_quantile() -> None:
    # the mixture sums over the noise of the smaller support and reads the other in closed
    # form; where the closed-form term's coefficient is 0 (as in an AVG table's first cell
    # when the count has the larger support) the group holds the mixing noise alone: its
    # exact discrete quantile, and the other groups mix as before (before, one zero sent the
    # whole batch to the grid convolution, group by group)
    small, large = (DL, Fraction(1, 2)), (DL, Fraction(37, 3))
    assert eb._support(*large) > eb._support(*small)
    c_large = np.array([0.0, 1.5, 0.0, 4.0])
    terms = [(c_large, *large), (np.array([2.0]), *small)]
    assert eb._mixture([c_large, np.array([2.0])], [large, small], 0.95) is not None
    got = combination_halfwidths(terms, 0.95)
    assert got[0] == got[2] == 2.0 * eb.laplace_halfwidth(small[1], 0.95)
    for g in (1, 3):
        pair = [(float(c_large[g]), *large), (2.0, *small)]
        low = _exact_quantile(pair, 0.95)
        assert low * (1 - 1e-12) <= got[g] <= _exact_quantile(pair, 0.95 + 2e-9) * (1 + 1e-6)


def test_an_avg_bar_at_a_large_epsilon_takes_the_mixture_and_covers() -> None:
    # the AVG table at ε ≈ 4096 on a 2^30-step grid: the sum's scale is far below the fast
    # path's 10^6 steps and the count's coefficient (the reach) is ~2^29 sum steps, where the
    # grid needed millions of cells per bar (98 s per table); the mixture is exact there
    sum_noise = ("discrete_laplace", Fraction(K, 4096))
    count_noise = ("discrete_laplace", Fraction(1, 4096))
    step = 500 / K
    reach = np.array([0.0, 1.0, 250.0, 500.0])
    got = combination_halfwidths([(step, *sum_noise), (reach, *count_noise)], 0.95)
    assert eb._mixture([np.asarray(step), reach], [sum_noise, count_noise], 0.95) == pytest.approx(
        got, rel=0
    )
    # the count's noise is 0 with probability 1 − 2e^(−4096)/(1 + …): the bar is the sum's
    want = step * eb.laplace_halfwidth(sum_noise[1], 0.95)
    assert got.tolist() == pytest.approx([want] * 4, rel=1e-6)


def test_erfc_is_within_its_documented_fractional_error() -> None:
    x = np.linspace(0, 26, 200_001)
    want = np.array([math.erfc(v) for v in x])
    got = eb._erfc(x)
    keep = want > 1e-300
    assert float(np.max(np.abs(got[keep] / want[keep] - 1))) < 1.2e-7


def test_the_two_laplace_tail_matches_the_convolution_and_is_stable_at_equal_scales() -> None:
    # P(L1 + L2 > x) by quadrature of the convolution, and r = 1 against the r → 1 limit
    b1, b2 = np.array([2.0]), np.array([0.7])
    u = np.linspace(-60, 60, 1_200_001)
    du = u[1] - u[0]
    for x in (0.0, 0.5, 3.0, 9.0):
        dens1 = np.exp(-np.abs(u) / 2.0) / 4.0
        tail2 = np.where(x - u >= 0, 0.5 * np.exp(-(x - u) / 0.7), 1 - 0.5 * np.exp((x - u) / 0.7))
        want = float((dens1 * tail2).sum() * du)
        got = eb._tail(False, b1, b2, np.array([x]))[0][0]
        assert got == pytest.approx(want, abs=1e-6)
    near = eb._tail(False, np.array([1.0]), np.array([1 - 1e-9]), np.array([2.0]))[0][0]
    equal = eb._tail(False, np.array([1.0]), np.array([1.0]), np.array([2.0]))[0][0]
    assert equal == pytest.approx(0.5 * math.exp(-2) * 2, rel=1e-12)  # e^(−y)(1 + y/2)/2
    assert near == pytest.approx(equal, rel=1e-8)


# ── AVG ───────────────────────────────────────────────────────────────────────────────────


class _Noise:
    def __init__(self, mechanism: str, scale: Fraction) -> None:
        self.mechanism = mechanism
        self.scale = scale


def _avg_fixed_point(sm: _Noise, cm: _Noise, step: float, n: float, m_hat: float) -> float:
    """The AVG bar as it was: t(|m̂| + u)/n̂ with u ≥ t(|m̂| + u)/n̂, by iteration."""

    def t(m: float) -> float:
        terms = [(step, sm.mechanism, sm.scale), (m, cm.mechanism, cm.scale)]
        return eb._grid_halfwidth(terms, 0.95) / n

    u = t(m_hat)
    for _ in range(50):
        bar = t(m_hat + u)
        if bar <= u:
            return bar
        u = bar * 1.001
    raise AssertionError("no fixed point")


@pytest.mark.parametrize("noises", [(LAPLACE_SUM, LAPLACE_COUNT), (GAUSS_SUM, GAUSS_COUNT)])
def test_avg_bars_cover_the_set_of_consistent_errors_and_stay_near_the_old_fixed_point(
    noises: tuple[tuple[str, Fraction], tuple[str, Fraction]],
) -> None:
    sm, cm = _Noise(*noises[0]), _Noise(*noises[1])
    step, centre, lower, upper = 500 / K, 500.0, 0.0, 1000.0
    rng = np.random.default_rng(7)  # groups (data), not noise
    n = rng.integers(60, 5000, 40).astype(np.float64)
    means = rng.uniform(0, 1000, 40)
    sums = np.round((means - centre) * n / step)
    bars = avg_halfwidths(
        sm, cm, step=step, centre=centre, lower=lower, upper=upper, counts=n, sums=sums
    )
    for g in range(40):
        m_hat = abs(step * sums[g] / n[g])
        old = _avg_fixed_point(sm, cm, step, n[g], m_hat)
        # every x ≤ T(|m̂| + x)/n̂ (the errors the true mean could have) lies within the bar:
        # probe x just above the bar with the exact grid at the rounded-up mean
        x = bars[g] * 1.001
        m_up = min(m_hat + x, 500.0)
        terms = [(step, sm.mechanism, sm.scale), (m_up, cm.mechanism, cm.scale)]
        assert x > eb._grid_halfwidth(terms, 0.95) / n[g] * (1 - 2e-3)
        assert bars[g] == pytest.approx(old, rel=5e-3)


def test_avg_bars_are_the_whole_range_for_tiny_counts_and_zero_for_an_empty_range() -> None:
    sm, cm = _Noise(*LAPLACE_SUM), _Noise(*LAPLACE_COUNT)
    common = {"step": 500 / K, "centre": 500.0, "sums": [0, 0, 0]}
    bars = avg_halfwidths(sm, cm, lower=0.0, upper=1000.0, counts=[0, 5, 10_000], **common)
    assert bars[:2].tolist() == [1000.0, 1000.0]
    assert 0 < bars[2] < 10
    flat = avg_halfwidths(sm, cm, lower=500.0, upper=500.0, counts=[10_000] * 3, **common)
    assert flat.tolist() == [0.0, 0.0, 0.0]


def test_the_stddev_interval_is_the_variance_interval_through_sqrt() -> None:
    got = stddev_halfwidths([100.0, 4.0], [21.0, 9.0])
    assert got.tolist() == pytest.approx([10 - math.sqrt(79), 2.0])  # the wider side


# ── the VARIANCE shape: the search against the grid and its own certificate ───────────────

COUNTS = {
    "narrow": ("discrete_laplace", Fraction(670215385, 182537948)),  # ≈ 3.67: one point per k
    "blocked": ("discrete_laplace", Fraction(400)),  # 11 300 points, grouped into blocks
    "staircase": ("discrete_laplace", Fraction(1, 3)),  # almost all mass on 0 and ±1
}


def _variance_coefficients(
    seed: str, reps: int, dominant: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a_Q, a_S, a_N) with signs, over 8 decades; ``dominant``: the wide widths are 1e-9 to
    1e-2 of the count's lattice step a_N (data, fixed seed)."""
    rng = np.random.default_rng(zlib.crc32(seed.encode()))
    sign = lambda: rng.choice([-1.0, 1.0], reps)  # noqa: E731
    a_n = 10 ** rng.uniform(-2, 3, reps) * sign()
    if dominant:
        a_q = np.abs(a_n) * 10 ** rng.uniform(-9, -2, reps) / K * sign()
        a_s = np.abs(a_n) * 10 ** rng.uniform(-9, -2, reps) / K * sign()
    else:
        a_q = 10 ** rng.uniform(-4, 4, reps) / K * sign()
        a_s = 10 ** rng.uniform(-4, 4, reps) / K * sign()
    return a_q, a_s, a_n


@pytest.mark.parametrize("count", list(COUNTS))
@pytest.mark.parametrize("dominant", [False, True], ids=["mixed", "count dominates"])
def test_variance_bars_are_never_narrower_than_the_exact_grid_computation(
    count: str, dominant: bool
) -> None:
    # as above, on the three-term VARIANCE shape a_Q·Z_Q + a_S·Z_S + a_N·Z_N: a bar below
    # grid − (n + 1)·h would under-cover. With one narrow point per k the search is also tight
    # (≤ grid + a hair); blocks of a wide count evaluated at their largest |k| may only widen.
    noises = (LAPLACE_SQUARES, LAPLACE_SUM, COUNTS[count])
    coefs = _variance_coefficients(f"{count} {dominant}", 40, dominant)
    fast = combination_halfwidths(
        [(c, m, s) for c, (m, s) in zip(coefs, noises, strict=True)], 0.95
    )
    for g in range(40):
        terms = [(float(c[g]), m, s) for c, (m, s) in zip(coefs, noises, strict=True)]
        grid = eb._grid_halfwidth(terms, 0.95)
        h = _sd(terms) / eb._CELLS
        assert fast[g] >= grid - 4 * h, (terms, fast[g], grid)
        if count != "blocked":
            assert fast[g] <= grid + 1e-6 * grid, (terms, fast[g], grid)


@pytest.mark.parametrize("count", list(COUNTS))
def test_each_variance_bar_is_the_upper_end_of_a_closed_bracket_of_the_coverage(
    count: str,
) -> None:
    # the certificate itself: F(t) ≥ target at the returned t and F < target a relative 1e-7
    # below it, F recomputed here from the fast path's own law (wide noises continuous, the
    # count's mass at its block tops) — whatever the search did to get there
    noises = (LAPLACE_SQUARES, LAPLACE_SUM, COUNTS[count])
    a_q, a_s, a_n = _variance_coefficients(f"bracket {count}", 200, dominant=False)
    a_q[:50], a_s[:50], _ = _variance_coefficients(f"dominant {count}", 50, dominant=True)
    a_q[:50] *= np.abs(a_n[:50])
    a_s[:50] *= np.abs(a_n[:50])
    level = 0.95
    t = combination_halfwidths([(a_q, *noises[0]), (a_s, *noises[1]), (a_n, *noises[2])], level)
    wide = [np.abs(a_q) * float(noises[0][1]), np.abs(a_s) * float(noises[1][1])]
    slack = sum(-math.expm1(-1 / float(s)) for _m, s in noises[:2])  # 2·Σ d_K
    target = level + eb._MARGIN + slack
    points = eb._narrow(*noises[2])
    assert points is not None
    ks, w = points
    law = eb._Wide(False, np.maximum(*wide), np.minimum(*wide))
    y = np.abs(a_n)[:, None] * ks[None, :]
    with np.errstate(all="ignore"):
        at, _ = eb._coverage(law, y, w, t)
        below, _ = eb._coverage(law, y, w, t * (1 - eb._RTOL))
    assert np.all(at >= target)
    assert np.all(below < target)


def test_the_search_takes_a_few_evaluations_per_group(monkeypatch: pytest.MonkeyPatch) -> None:
    # the benchmark's shape (500 groups, n ≈ 2000, x in [0, 1000]): a start within ~1e-3 and
    # Newton reach the pair of points that closes the bracket in ≤ 3 steps (4 evaluations)
    evaluations: list[int] = []
    coverage = eb._coverage

    def counted(
        law: eb._Wide, y: np.ndarray, w: np.ndarray, t: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        evaluations.append(len(t))
        return coverage(law, y, w, t)

    monkeypatch.setattr(eb, "_coverage", counted)
    rng = np.random.default_rng(11)  # groups (data), not noise
    n = rng.uniform(1800, 2200, 500)
    a_q = 250_000 / K / n
    a_s = rng.uniform(-1, 1, 500) * 40 / K / n
    a_n = rng.uniform(15, 25, 500)
    combination_halfwidths(
        [(a_q, *LAPLACE_SQUARES), (a_s, *LAPLACE_SUM), (a_n, *COUNTS["narrow"])], 0.95
    )
    assert sum(evaluations) <= 5 * 500


def _prefix_avg_bars(
    sm: _Noise, cm: _Noise, step: float, centre: float, n: np.ndarray, sums: np.ndarray
) -> np.ndarray:
    """The AVG bars by the previous formulation (bounds [0, 1000], level 0.95): every cell
    T_0…T_1000 computed, made nondecreasing by a running maximum, T̄(x) the cell of |m̂| + x."""
    reach, lv = max(centre, 1000.0 - centre), 0.95
    grid = np.linspace(0.0, reach, 1001)
    half = 1 - (1 - lv) / 2
    union = step * eb.single_halfwidth(sm.mechanism, sm.scale, half) + reach * eb.single_halfwidth(
        cm.mechanism, cm.scale, half
    )
    terms = [(step, sm.mechanism, sm.scale), (grid, cm.mechanism, cm.scale)]
    table = np.minimum(np.maximum.accumulate(combination_halfwidths(terms, lv)), union)
    m_hat = np.abs(step * sums / n)[:, None]
    lo_x = np.maximum(grid[None, :-1] - m_hat, 0.0)
    hi_x = grid[None, 1:] - m_hat
    hi_x[:, -1] = np.inf
    cap = table[None, 1:] / n[:, None]
    hit = (hi_x >= 0) & (lo_x <= cap)
    return np.asarray(np.where(hit, np.minimum(hi_x, cap), 0.0).max(axis=1))


def _groups(seed: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)  # groups (data), not noise
    n = np.round(np.exp(rng.uniform(np.log(60), np.log(200_000), count)))
    means = rng.uniform(0, 1000, count)
    return n, np.round((means - 500.0) * n / (500 / K))


LARGE_EPSILON = (("discrete_laplace", Fraction(K, 4096)), ("discrete_laplace", Fraction(1, 8)))


@pytest.mark.parametrize(
    "noises", [(LAPLACE_SUM, LAPLACE_COUNT), (GAUSS_SUM, GAUSS_COUNT), LARGE_EPSILON]
)
def test_avg_bars_from_the_cells_they_reach_match_the_full_prefix_table(
    noises: tuple[tuple[str, Fraction], tuple[str, Fraction]],
) -> None:
    # the bars now read only the cells around each group's |m̂| (W_j, a maximum over the
    # cells the true mean can be in): never wider than the running maximum of every cell,
    # and as narrow as it to the search's relative 1e-7
    sm, cm = _Noise(*noises[0]), _Noise(*noises[1])
    step = 500 / K
    n, sums = _groups(11, 60)
    ab._AVG_TABLES.clear()
    got = avg_halfwidths(
        sm, cm, step=step, centre=500.0, lower=0.0, upper=1000.0, counts=n, sums=sums
    )
    want = _prefix_avg_bars(sm, cm, step, 500.0, n, sums)
    assert np.all(got <= want * (1 + 1e-12))
    assert got == pytest.approx(want, rel=1e-6)


def test_avg_bars_of_all_groups_at_once_equal_those_of_each_group_alone() -> None:
    sm, cm = _Noise(*LAPLACE_SUM), _Noise(*LAPLACE_COUNT)
    common = {"step": 500 / K, "centre": 500.0, "lower": 0.0, "upper": 1000.0}
    n, sums = _groups(12, 40)
    ab._AVG_TABLES.clear()
    together = avg_halfwidths(sm, cm, counts=n, sums=sums, **common)
    for g in range(len(n)):
        ab._AVG_TABLES.clear()  # each group's cells computed afresh, in a batch of its own
        alone = avg_halfwidths(sm, cm, counts=n[g : g + 1], sums=sums[g : g + 1], **common)
        assert alone[0] == pytest.approx(together[g], rel=1e-9)


def test_an_avg_table_is_computed_once_per_law_and_only_in_the_cells_reached() -> None:
    sm, cm = _Noise(*LAPLACE_SUM), _Noise(*LAPLACE_COUNT)
    common = {"step": 500 / K, "centre": 0.0, "lower": 0.0, "upper": 1000.0}
    # large groups, their means near 660 (|m̂| ≈ 660 of the reach 1000: cell ≈ 660): the
    # prefix table needed ~660 cells, these bars a few cells each
    n = np.array([30_000.0, 20_000.0, 10_000.0, 5_000.0])
    sums = np.round(np.array([655.0, 661.0, 667.0, 670.0]) * n / common["step"])
    ab._AVG_TABLES.clear()
    first = avg_halfwidths(sm, cm, counts=n, sums=sums, **common)
    ((_key, table),) = ab._AVG_TABLES.items()
    computed = np.flatnonzero(~np.isnan(table))
    assert 0 < len(computed) < 40
    assert computed.min() > 600
    again = avg_halfwidths(sm, cm, counts=n, sums=sums, **common)
    # the same law: every cell it needs is in the table, which is not computed again
    assert next(iter(ab._AVG_TABLES.values())) is table
    assert again.tolist() == first.tolist()
    # a group further out needs a few more cells: only those are added
    more = avg_halfwidths(sm, cm, counts=[8_000.0], sums=[round(800 * 8_000 / common["step"])],
                          **common)  # fmt: skip
    grown = next(iter(ab._AVG_TABLES.values()))
    assert grown[computed].tolist() == table[computed].tolist()
    assert len(computed) < np.count_nonzero(~np.isnan(grown)) < len(computed) + 40
    want = _prefix_avg_bars(sm, cm, common["step"], 0.0, n, sums)
    assert first == pytest.approx(want, rel=1e-6)
    assert more[0] == pytest.approx(
        _prefix_avg_bars(sm, cm, common["step"], 0.0, np.array([8_000.0]),
                         np.array([round(800 * 8_000 / common["step"])]))[0], rel=1e-6,
    )  # fmt: skip
