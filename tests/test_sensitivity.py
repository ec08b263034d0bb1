from __future__ import annotations

import numpy as np
import pytest

from veil.errors import InvalidArgumentError
from veil.sensitivity import ObservedSensitivity, probe


def test_probe_reports_the_largest_observed_change_as_a_lower_bound() -> None:
    data = np.array([120, 80, 90, 110])
    pairs = [(data, np.array([120, 80, 90, 111])), (data, np.array([120, 80, 90, 150]))]
    observed = probe(lambda d: d.sum(), pairs)
    assert observed == ObservedSensitivity(lower_bound=40.0, norm="l1", pairs=2)
    assert "lower bound" in str(observed)


def test_probe_l2_norm_of_vector_queries() -> None:
    observed = probe(lambda d: np.array(d), [([0, 0], [3, 4])], norm="l2")
    assert observed.lower_bound == 5.0


def test_probe_underestimates_when_the_worst_pair_is_missing() -> None:
    # sum over values in [0, 1000]: true sensitivity 1000, the examples only show 1
    observed = probe(sum, [([1, 2], [1, 2, 1])])
    assert observed.lower_bound == 1.0 < 1000


@pytest.mark.parametrize(
    ("pairs", "match"),
    [([], "dataset_pairs is empty"), ([(1,)], "must yield \\(D, D'\\) pairs")],
)
def test_probe_rejects_bad_pairs(pairs: list[object], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        probe(sum, pairs)  # type: ignore[arg-type]


def test_probe_rejects_an_unknown_norm() -> None:
    with pytest.raises(InvalidArgumentError, match="norm must be 'l1' or 'l2', got 'linf'"):
        probe(sum, [([1], [2])], norm="linf")  # type: ignore[arg-type]
