"""The weighted kinds' estimates and bars on fixed noisy statistics (their coverage over
seeded releases on the LFS: ``tests/system/test_weights_lfs.py``), and the weighted mean's
bar against seeded draws of its two discrete noises."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from support import SeededSource
from veil.aggregates.base import NoiseModel
from veil.noise.errorbars import avg_halfwidths
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


def test_the_weighted_mean_bar_is_the_whole_range_for_a_tiny_total_weight() -> None:
    st = {"sum(x * w)": 0, "sum(w)": 3}
    assert halfwidth(wavg(), st, 30.0, noise(), 0.95) == 60.0
    st = {"sum(x * w)": 0, "sum(w)": 3, "count": 1}
    assert halfwidth(wavg(True), st, 30.0, noise(Fraction(1, 2)), 0.95) == 60.0


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
