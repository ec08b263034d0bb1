from __future__ import annotations

import numpy as np
import pytest

from veil.errors import InvalidArgumentError
from veil.postprocess import clamp, non_negative, round_to


def test_clamp_clips_noisy_values_to_a_public_range() -> None:
    assert clamp(130.5, 0, 120) == 120.0
    assert clamp(np.array([-3.0, 50.0, 200.0]), 0, 120).tolist() == [0.0, 50.0, 120.0]


def test_clamp_rejects_an_inverted_or_non_finite_range() -> None:
    with pytest.raises(InvalidArgumentError, match="lower must be ≤ upper, got lower=5, upper=1"):
        clamp(1.0, 5, 1)
    with pytest.raises(InvalidArgumentError, match="upper must be a finite number, got inf"):
        clamp(1.0, 0, float("inf"))


def test_non_negative_replaces_negative_counts_by_zero() -> None:
    assert non_negative(-2.5) == 0
    assert non_negative(np.array([-1, 3])).tolist() == [0, 3]


def test_round_to_rounds_half_to_even() -> None:
    assert round_to(2.5) == 2.0
    assert round_to(np.array([1.25, 1.35]), 1).tolist() == [1.2, 1.4]
    with pytest.raises(InvalidArgumentError, match=r"decimals must be an integer, got 1\.5"):
        round_to(1.0, 1.5)  # type: ignore[arg-type]
