"""Accuracy-versus-ε curves: free, monotone, and the bars explain shows."""

from __future__ import annotations

from fractions import Fraction

import pytest

from accuracy_support import BOUNDS, Q, session
from veil.accuracy import Target, accuracy_curve, target_bars
from veil.errors import InvalidArgumentError


def test_curve_is_free_nonincreasing_and_matches_explain() -> None:
    s = session()
    before = s.remaining()
    curve = accuracy_curve(
        s,
        Q,
        ["n", "total", Target("mean", halfwidth=1, min_group_size=300)],
        [2, 0.5, 1],
        bounds=BOUNDS,
    )
    assert s.remaining() == before
    assert curve.epsilons == (Fraction(1, 2), Fraction(1), Fraction(2))
    for col in curve.columns:
        seq = [b[col] for b in curve.bars]
        assert seq[0] > seq[1] > seq[2], (col, seq)
    direct = target_bars(s.explain(Q, epsilon=1, bounds=BOUNDS), (Target("n", halfwidth=1),))
    assert curve.bars[1]["n"] == direct["n"]
    text = curve.table()
    assert text.splitlines()[0].split() == ["epsilon", "n", "total", "mean"]
    assert len(text.splitlines()) == 4


def test_curve_refuses_bad_input_free() -> None:
    s = session()
    with pytest.raises(InvalidArgumentError, match="no epsilon given"):
        accuracy_curve(s, Q, ["n"], [], bounds=BOUNDS)
    with pytest.raises(InvalidArgumentError, match="epsilon -1 must be positive"):
        accuracy_curve(s, Q, ["n"], [-1], bounds=BOUNDS)
    with pytest.raises(InvalidArgumentError, match="unknown column 'x'"):
        accuracy_curve(s, Q, ["x"], [1], bounds=BOUNDS)
    with pytest.raises(InvalidArgumentError, match="min_group_size"):
        accuracy_curve(s, Q, ["mean"], [1], bounds=BOUNDS)
