"""A vector release adds its noise chunk by chunk into the grid integers and converts them in
place: the same values from the same bytes as one array of noise added to a copy (what the
mechanisms did before), for vectors within one chunk and across several."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from support import SeededSource
from veil import InternalError, InvalidArgumentError
from veil.mechanisms import standalone as mech
from veil.noise import samplers
from veil.noise.grid import from_grid, to_grid

SIZES = [1, 5, 1000, samplers._CHUNK + 3]


def _old_to_grid(values: np.ndarray, k: int) -> np.ndarray:
    scaled = values.astype(np.float64) * math.ldexp(1.0, -k)
    np.rint(scaled, out=scaled)
    return scaled.astype(np.int64)


@pytest.mark.parametrize("n", SIZES)
def test_laplace_over_a_vector_gives_what_one_array_of_noise_gave(n: int) -> None:
    values = np.linspace(-1e3, 1e3, n)  # data to release: any spread will do
    for eps, sens in ((Fraction(1, 2), 1), (Fraction(3), Fraction(1, 1000))):
        release = mech.laplace(values, sensitivity=sens, epsilon=eps, source=SeededSource(n))
        k, scale_units = release.grid, release.noise_scale
        src = SeededSource(n)
        noise = samplers.discrete_laplace(scale_units, n, source=src)
        want = (_old_to_grid(values, k) + noise).astype(np.float64) * math.ldexp(1.0, k)
        assert np.array_equal(release.value, want)
        assert values[0] == -1e3  # the caller's array is not written to


@pytest.mark.parametrize("n", SIZES)
def test_gaussian_over_a_vector_gives_what_one_array_of_noise_gave(n: int) -> None:
    values = np.linspace(-5.0, 7.0, n, dtype=np.float32)  # (a float32 input is widened)
    release = mech.gaussian(values, sensitivity=1, rho=Fraction(1, 8), source=SeededSource(n))
    k, sigma2 = release.grid, release.noise_scale
    noise = samplers.discrete_gaussian(sigma2, n, source=SeededSource(n))
    want = (_old_to_grid(values, k) + noise).astype(np.float64) * math.ldexp(1.0, k)
    assert np.array_equal(release.value, want)


@pytest.mark.parametrize("scale", [Fraction(3), Fraction(10**9)])
def test_chunks_are_the_draws_of_one_array(scale: Fraction) -> None:
    n = 2 * samplers._CHUNK + 17
    whole = samplers.discrete_laplace(scale, n, source=SeededSource("c"))
    parts = list(samplers.discrete_laplace_chunks(scale, n, source=SeededSource("c")))
    assert [start for start, _ in parts] == [0, samplers._CHUNK, 2 * samplers._CHUNK]
    assert np.array_equal(np.concatenate([chunk for _, chunk in parts]), whole)
    gauss = samplers.discrete_gaussian(scale, n, source=SeededSource("g"))
    chunks = samplers.discrete_gaussian_chunks(scale, n, source=SeededSource("g"))
    assert np.array_equal(np.concatenate([c for _, c in chunks]), gauss)


def test_to_grid_and_from_grid_in_place_are_the_copying_conversions() -> None:
    rng = np.random.default_rng(2)  # data, not noise
    values = rng.normal(0.0, 1e6, 3 * (1 << 16) + 5)
    for k in (-36, -3, 0, 5):
        units = to_grid(values, k)
        assert np.array_equal(units, _old_to_grid(values, k))
        want = units.astype(np.float64) * math.ldexp(1.0, k)
        assert np.array_equal(from_grid(units.copy(), k), want)
        assert np.array_equal(from_grid(units, k, overwrite=True), want)
    strided = values[::2]  # not contiguous: converted by copy
    assert np.array_equal(to_grid(strided, -3), _old_to_grid(strided, -3))


def test_a_non_finite_value_is_still_refused_by_name() -> None:
    for bad in (np.nan, np.inf, -np.inf):
        values = np.array([1.0, bad, 2.0])
        with pytest.raises(InvalidArgumentError, match=f"values must be finite, got {bad}"):
            mech.laplace(values, sensitivity=1, epsilon=1)


def test_a_noise_chunk_reaching_two_to_the_61_is_an_internal_error() -> None:
    units = np.zeros(4, dtype=np.int64)
    with pytest.raises(InternalError, match="reached 2\\^61"):
        mech._add_drawn(units, [(0, np.array([1, -(1 << 61), 0, 0], dtype=np.int64))])
    with pytest.raises(InternalError, match="reached 2\\^61"):
        mech._add_noise(units, np.array([0, 0, 1 << 61, 0], dtype=np.int64))
