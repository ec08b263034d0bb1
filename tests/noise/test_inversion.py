"""The exact-inversion machinery: words that leave the table ambiguous are resolved exactly."""

from __future__ import annotations

from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
from scipy import stats

from support import SeededSource
from veil.noise.samplers import _geometric_direct, _laplace_magnitude


def test_an_ambiguous_word_is_resolved_with_its_conditional_probability() -> None:
    # For the discrete Laplace magnitude at scale 3, S(2) = 2e^{-2/3}/(1 + e^{-1/3}). The 31-bit
    # word v = floor(2^31·S(2)) cannot tell |X| = 1 from |X| ≥ 2; given v,
    # P(|X| ≥ 2) = frac(2^31·S(2)). The refinement must reproduce that.
    x = Fraction(1, 3)
    inv = _laplace_magnitude(x)
    with localcontext() as ctx:
        ctx.prec = 60
        s2 = 2 * (Decimal(-2) / 3).exp() / (1 + (Decimal(-1) / 3).exp()) * Decimal(2) ** 31
    v = int(s2)
    assert inv.lo[2] == v
    assert inv.hi[2] == v + 1
    frac = float(s2 - v)
    n = 4000
    results = [
        int(inv.invert(np.array([v], dtype=np.int64), SeededSource(f"amb{i}"))[0]) for i in range(n)
    ]
    assert set(results) <= {1, 2}
    assert stats.binomtest(results.count(2), n, frac).pvalue > 1e-4


def test_certain_words_are_inverted_without_drawing_extra_bits() -> None:
    # geometric at scale 10: G = max{m : W < e^{-m/10}} = floor(-10·ln W) unless W is
    # within 2^-32 of a threshold; these words are far from every threshold
    inv = _geometric_direct(Fraction(1, 10))
    src = SeededSource(0)
    words = [1 << 10, 1 << 20, 1 << 31, (1 << 32) - 5]
    out = inv.invert(np.array(words, dtype=np.int64), src)
    assert src.bytes_drawn == 0
    with localcontext() as ctx:
        ctx.prec = 60
        expected = [int(-10 * (Decimal(w) / Decimal(2) ** 32).ln()) for w in words]
    assert out.tolist() == expected
