from __future__ import annotations

import pytest

from veil.release.consistency import consistent_counts


@pytest.mark.parametrize(
    ("noisy", "expected"),
    [
        ([10, -3, 5, 2], [9, 0, 4, 1]),
        ([3, 3, 3], [3, 3, 3]),
        ([-5, -2], [0, 0]),
        ([100, 1, -50], [51, 0, 0]),
        ([], []),
    ],
)
def test_counts_become_non_negative_integers_adding_up_to_the_noisy_total(
    noisy: list[int], expected: list[int]
) -> None:
    out = consistent_counts(noisy)
    assert out == expected
    assert sum(out) == max(sum(noisy), 0)
    assert all(v >= 0 for v in out)
