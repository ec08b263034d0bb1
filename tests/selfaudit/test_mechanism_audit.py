"""``veil.audit.mechanism`` (:mod:`veil.audit.mechanisms`): veil's own mechanisms PASS at
their claimed parameters, the positive controls FAIL (float Laplace by reachability, a Laplace at
70 % of its scale by the ε bound, a Gaussian calibrated for ten times the claimed δ by the δ
bound, a sampler whose outputs leave its grid or its pmf by conformance), and the false-alarm
rate stays within 1 − confidence."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from support import SeededSource
from veil import mechanisms as mech
from veil.audit import selftest
from veil.audit.mechanisms import (
    BUILTINS,
    NOT_PROOF,
    builtin,
    categorical_conformance,
    exponential_pmf,
    mechanism,
)
from veil.errors import InvalidArgumentError
from veil.noise import samplers

pytestmark = pytest.mark.statistical


@pytest.mark.parametrize("name", [n for n in BUILTINS if n != "exponential"])
def test_veils_additive_and_local_mechanisms_pass(name: str) -> None:
    delta = 1e-6 if "gaussian" in name else 0.0
    audit = builtin(name, epsilon=1.0, delta=delta, samples=200_000, source=SeededSource(name))
    assert audit.verdict == "PASS", audit.lines()
    assert audit.exit_code == 0
    assert audit.pairs[0].bound.epsilon <= 1.0
    assert audit.failures == ()
    assert NOT_PROOF in audit.lines()


def test_veils_exponential_mechanism_passes_and_follows_its_pmf() -> None:
    audit = builtin("exponential", epsilon=1.0, samples=3000, source=SeededSource("exp"))
    assert audit.verdict == "PASS", audit.lines()


def test_numpy_float_laplace_fails_by_reachability() -> None:
    audit = selftest.float_laplace(50_000)
    assert audit.verdict == "FAIL"
    assert "grid of 2^" in audit.pairs[0].bound.event
    assert audit.pairs[0].bound.epsilon > 5  # absent on one side: a huge loss
    assert audit.exit_code == 1


def test_a_laplace_at_70_percent_of_its_scale_fails_the_epsilon_bound() -> None:
    audit = selftest.laplace_70(100_000, SeededSource("70"))
    assert audit.verdict == "FAIL"
    assert audit.pairs[0].bound.epsilon > 1.0
    assert "grid" not in audit.pairs[0].bound.event  # a genuine ε violation, not reachability


def test_a_gaussian_calibrated_for_ten_times_delta_fails_the_delta_bound() -> None:
    audit = selftest.gaussian_10_delta(400_000, SeededSource("delta"))
    assert audit.verdict == "FAIL"
    assert audit.pairs[0].bound.delta > 1e-3


def test_the_same_gaussian_passes_at_the_delta_it_was_calibrated_for() -> None:
    src = SeededSource("delta-ok")
    rel = mech.discrete_gaussian(0, sensitivity=1, epsilon=1, delta=1e-2, source=src)
    audit = mechanism(
        lambda x, n: x + samplers.discrete_gaussian(rel.noise_scale, n, source=src),
        epsilon=1.0,
        delta=1e-2,
        samples=400_000,
        batch=True,
    )
    assert audit.verdict == "PASS", audit.lines()


def test_false_alarms_of_a_correct_mechanism_stay_within_one_minus_confidence() -> None:
    """200 audits of an exact discrete Laplace at its true ε: by construction each FAILs with
    probability ≤ 5 %; 200 audits FAIL at most 19 times except with probability < 1 %
    (Binomial(200, 0.05) tail)."""
    src = SeededSource("false-alarms")

    def fn(x: int, n: int) -> np.ndarray:
        return x + samplers.discrete_laplace(Fraction(1), n, source=src)

    fails = sum(
        mechanism(fn, epsilon=1.0, samples=2000, batch=True).verdict == "FAIL" for _ in range(200)
    )
    assert fails <= 19


def test_too_few_samples_are_inconclusive() -> None:
    src = SeededSource("few")
    audit = mechanism(
        lambda x, n: x + samplers.discrete_laplace(Fraction(10), n, source=src),
        epsilon=0.1,
        samples=200,
        batch=True,
    )
    assert audit.verdict == "INCONCLUSIVE"
    assert audit.exit_code == 2
    assert audit.detectable > 0.2


def test_an_output_off_the_claimed_grid_fails_conformance() -> None:
    src = SeededSource("grid")
    audit = mechanism(
        lambda x, n: x + samplers.discrete_laplace(Fraction(1), n, source=src) + 1e-9,
        epsilon=1.0,
        samples=2000,
        batch=True,
        conformance=lambda _, out: None if np.all(out == np.round(out)) else "off the grid",
    )
    assert audit.verdict == "FAIL"
    assert audit.failures == ("input 0: off the grid", "input 1: off the grid")


def test_categorical_conformance_names_the_category_and_the_pmf() -> None:
    pmf = exponential_pmf([3, 2, 1], 1.0, 1.0)
    assert pmf == pytest.approx([0.5065, 0.3072, 0.1863], abs=1e-4)
    rng = np.random.default_rng(3)
    right = rng.choice(3, size=20_000, p=pmf).astype(float)
    inverted = rng.choice(3, size=20_000, p=pmf[::-1]).astype(float)
    assert categorical_conformance(right, pmf, 0.95) is None
    problem = categorical_conformance(inverted, pmf, 0.95)
    assert problem is not None
    assert problem.startswith("category 0 came out 0.18")
    assert "do not follow the claimed distribution" in problem
    assert "not a category code" in str(categorical_conformance(np.array([5.0]), pmf, 0.95))


def test_bad_claims_are_refused_naming_the_value() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown mechanism 'lapalce'"):
        builtin("lapalce", epsilon=1.0)
    with pytest.raises(InvalidArgumentError, match="needs --delta"):
        builtin("gaussian", epsilon=1.0)
    with pytest.raises(InvalidArgumentError, match="pure ε-DP: drop --delta"):
        builtin("laplace", epsilon=1.0, delta=1e-6)
    with pytest.raises(InvalidArgumentError, match="epsilon must be a positive number, got -1"):
        mechanism(lambda x: x, epsilon=-1)
    with pytest.raises(InvalidArgumentError, match="asked the mechanism for 10 outputs, got 3"):
        mechanism(lambda x, n: [1, 2, 3], epsilon=1.0, samples=10, batch=True)
