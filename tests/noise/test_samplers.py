from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from support import SeededSource
from veil.errors import InvalidArgumentError
from veil.noise import MAX_SCALE, discrete_gaussian, discrete_laplace, geometric


@pytest.mark.parametrize("sampler", [discrete_laplace, discrete_gaussian, geometric])
def test_samplers_draw_from_the_system_source_by_default(sampler: object) -> None:
    out = sampler(Fraction(5, 2), 1000)  # type: ignore[operator]
    assert out.dtype == np.int64
    assert out.shape == (1000,)
    assert len(np.unique(out)) > 3


@pytest.mark.parametrize("sampler", [discrete_laplace, discrete_gaussian, geometric])
def test_samplers_are_deterministic_given_a_seeded_source(sampler: object) -> None:
    a = sampler(7, 500, source=SeededSource(1))  # type: ignore[operator]
    b = sampler(7, 500, source=SeededSource(1))  # type: ignore[operator]
    assert np.array_equal(a, b)


def test_zero_samples_draw_no_randomness() -> None:
    src = SeededSource(0)
    assert discrete_laplace(3, 0, source=src).size == 0
    assert discrete_gaussian(3, 0, source=src).size == 0
    assert src.bytes_drawn == 0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: discrete_laplace(0, 1), "scale must be > 0, got 0"),
        (lambda: discrete_laplace(-2, 1), "scale must be > 0, got -2"),
        (lambda: discrete_laplace(0.5, 1), "int or a fractions.Fraction, got 0.5.*exact"),
        (lambda: discrete_laplace(MAX_SCALE * 2, 1), "exceeds the supported maximum"),
        (lambda: discrete_gaussian(MAX_SCALE**2 * 2, 1), "sigma2=.* exceeds the supported maximum"),
        (lambda: geometric(True, 1), "int or a fractions.Fraction, got True"),
        (lambda: discrete_laplace(1, 2.5), "size must be a non-negative integer, got 2.5"),
    ],
)
def test_bad_sampler_parameters_raise_a_user_error(call: object, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        call()  # type: ignore[operator]


def test_the_largest_supported_scale_samples_within_int64() -> None:
    x = discrete_laplace(MAX_SCALE, 10_000, source=SeededSource(2))
    assert np.abs(x).max() < 2**62
    g = discrete_gaussian(MAX_SCALE**2, 2000, source=SeededSource(3))
    assert np.abs(g).max() < 2**62


@pytest.mark.parametrize(
    ("sampler", "scale"),
    [(discrete_laplace, 7), (discrete_laplace, 10**9), (discrete_gaussian, 49), (geometric, 1000)],
)
def test_a_batch_larger_than_a_chunk_is_drawn_chunk_after_chunk(
    sampler: object, scale: int
) -> None:
    """Past ``_CHUNK`` draws, a batch is the chunks drawn one after another from the same
    source — each a batch of independent draws of the same law — with the same bytes read."""
    from veil.noise.samplers import _CHUNK

    n = 2 * _CHUNK + 12_345
    a, b = SeededSource(f"chunks{scale}"), SeededSource(f"chunks{scale}")
    whole = sampler(scale, n, source=a)  # type: ignore[operator]
    parts = [sampler(scale, k, source=b) for k in (_CHUNK, _CHUNK, 12_345)]  # type: ignore[operator]
    assert whole.dtype == np.int64
    assert whole.shape == (n,)
    assert np.array_equal(whole, np.concatenate(parts))
    assert a.bytes_drawn == b.bytes_drawn
