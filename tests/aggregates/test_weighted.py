"""The weighted kinds' estimates and bars on fixed noisy statistics (their coverage over
seeded releases on the LFS: ``tests/system/test_weights_lfs.py``), and the weighted mean's
bar against seeded draws of its two discrete noises."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from support import SeededSource
from veil.aggregates import kind
from veil.aggregates.base import Group, NoiseModel
from veil.noise.aggregate_bars import avg_halfwidths
from veil.noise.families import family
from veil.release.estimators import ColumnModel, estimate, halfwidth

STEP_P, STEP_W = Fraction(1, 64), Fraction(1, 1024)


def noise(centre_w: Fraction = Fraction(0)) -> dict[str, NoiseModel]:
    return {
        "sum(x * w)": NoiseModel(
            "sum(x * w)", "sum", "discrete_laplace", Fraction(300), Fraction(0), STEP_P, 1 << 20
        ),
        "sum(w)": NoiseModel(
            "sum(w)", "sum", "discrete_laplace", Fraction(80), centre_w, STEP_W, 1 << 20
        ),
        "count": NoiseModel("count", "count", "discrete_laplace", Fraction(2), Fraction(0),
                            Fraction(1), 1),
    }  # fmt: skip


def wavg(count: bool = False) -> ColumnModel:
    return ColumnModel(
        "m", "wavg", Fraction(0), Fraction(60), sum="sum(x * w)", total="sum(w)",
        count="count" if count else None,
    )  # fmt: skip


def test_the_weighted_mean_is_the_ratio_of_the_two_noisy_sums_clamped_to_the_bounds() -> None:
    w, p = 2000.0, 2000.0 * 35.5  # Σw and Σw·x in value units
    st = {"sum(x * w)": round(p / float(STEP_P)), "sum(w)": round(w / float(STEP_W))}
    assert estimate(wavg(), st, noise()) == pytest.approx(35.5)
    st["sum(x * w)"] = round(2000.0 * 80 / float(STEP_P))
    assert estimate(wavg(), st, noise()) == 60.0  # clamped to the upper bound
    st["sum(w)"] = -5  # a noisy total weight at or below 0: the bounds' midpoint
    assert estimate(wavg(), st, noise()) == 30.0


def test_the_weighted_mean_bar_is_the_averages_bar_with_the_weights_as_the_count() -> None:
    st = {"sum(x * w)": round(150 * 35.5 / float(STEP_P)), "sum(w)": round(150 / float(STEP_W))}
    m = noise()
    want = avg_halfwidths(
        m["sum(x * w)"], m["sum(w)"], step=float(STEP_P / STEP_W), centre=0.0, lower=0.0,
        upper=60.0, counts=[st["sum(w)"]], sums=[st["sum(x * w)"]], level=0.95,
    )[0]  # fmt: skip
    value = estimate(wavg(), st, m)
    bar = halfwidth(wavg(), st, value, m, 0.95)
    assert bar == want
    assert 0 < bar < 60


def test_the_weighted_mean_bar_spans_the_whole_range_for_a_tiny_total_weight() -> None:
    for model, st, m in (
        (wavg(), {"sum(x * w)": 0, "sum(w)": 3}, noise()),
        (wavg(True), {"sum(x * w)": 0, "sum(w)": 3, "count": 1}, noise(Fraction(1, 2))),
        (wavg(True), {"sum(x * w)": 0, "sum(w)": -9, "count": -2}, noise(Fraction(1, 2))),
    ):
        value = estimate(model, st, m)
        bar = halfwidth(model, st, value, m, 0.95)
        assert bar is not None
        assert value - bar <= 0.0
        assert value + bar >= 60.0  # the release says nothing: value ± bar holds [0, 60]


@pytest.mark.parametrize("total", [40.0, 150.0, 2000.0])
def test_the_weighted_mean_bar_covers_its_exact_error_at_the_level(total: float) -> None:
    """4000 seeded draws of the two discrete Laplace noises (veil's exact sampler, a seeded
    source) around a group whose weighted mean is 59, near the bound (the widest case): the
    bar computed from each noisy outcome covers the true weighted mean at least 95 % of the time
    (less 3 standard errors: P(false failure) ≈ 0.0013, fixed by the seed), and is not vacuous
    (half the bar covers less than 95 %)."""
    m = noise()
    vw = round(total / float(STEP_W))
    vp = round(total * 59.0 / float(STEP_P))
    truth = (vp * float(STEP_P)) / (vw * float(STEP_W))
    draws = 4000
    zp = family("discrete_laplace").sample(Fraction(300), draws, SeededSource(f"wavg-p-{total}"))
    zw = family("discrete_laplace").sample(Fraction(80), draws, SeededSource(f"wavg-w-{total}"))
    inside = inside_half = 0
    for a, b in zip(zp, zw, strict=True):
        st = {"sum(x * w)": int(vp + a), "sum(w)": int(vw + b)}
        value = estimate(wavg(), st, m)
        bar = halfwidth(wavg(), st, value, m, 0.95)
        assert bar is not None
        err = abs(value - truth)
        inside += err <= bar
        inside_half += err <= bar / 2
    assert inside / draws >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / draws)
    assert inside_half / draws < 0.95


@pytest.mark.parametrize("total", [40.0, 2000.0])
def test_the_centred_weighted_mean_bar_covers_its_exact_error_at_the_level(total: float) -> None:
    """Both sums centred away from 0 (they then share the count's noise), at the scales a
    release has (10^9 grid steps): 4000 seeded draws of the three noises; the cell-wise joint
    bar covers the true weighted mean at least 95 % of the time (less 3 standard errors) and
    half of it does not."""
    sp, sw = Fraction(1, 1 << 24), Fraction(1, 1 << 30)
    m = {
        "sum(x * w)": NoiseModel("sum(x * w)", "sum", "discrete_laplace", Fraction(2 * 10**9),
                                 Fraction(30), sp, 1 << 30),
        "sum(w)": NoiseModel("sum(w)", "sum", "discrete_laplace", Fraction(2 * 10**9),
                             Fraction(1, 2), sw, 1 << 30),
        "count": NoiseModel("count", "count", "discrete_laplace", Fraction(2), Fraction(0),
                            Fraction(1), 1),
    }  # fmt: skip
    rows, mean = round(total / 2), 59.0  # rows of weight 2 each, all at x = 59
    vw = round((total - 0.5 * rows) / float(sw))  # Σ(w − c_W) in grid steps
    vp = round((total * mean - 30 * rows) / float(sp))  # Σ(w·x − c_P)
    truth = (vp * float(sp) + 30 * rows) / (vw * float(sw) + 0.5 * rows)
    draws = 4000
    laplace = family("discrete_laplace")
    zp = laplace.sample(Fraction(2 * 10**9), draws, SeededSource(f"c-p-{total}"))
    zw = laplace.sample(Fraction(2 * 10**9), draws, SeededSource(f"c-w-{total}"))
    zn = laplace.sample(Fraction(2), draws, SeededSource(f"c-n-{total}"))
    model = wavg(True)
    groups = [
        Group(model, {"sum(x * w)": int(vp + a), "sum(w)": int(vw + b), "count": rows + c}, m)
        for a, b, c in zip(zp, zw, zn, strict=True)
    ]
    k = kind("wavg")
    values = [float(k.estimate(g)) for g in groups]
    bars = k.halfwidths(groups, values, 0.95)
    errors = [abs(v - truth) for v in values]
    inside = sum(e <= b for e, b in zip(errors, bars, strict=True) if b is not None)
    half = sum(e <= b / 2 for e, b in zip(errors, bars, strict=True) if b is not None)
    assert inside / draws >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / draws)
    assert half / draws < 0.95
