"""A positive control for crafted sum neighbours: an integer sum that wraps on overflow.

:func:`wrapping_sum` is a mechanism as a careless library writes it — clamp each value to
``[0, upper]``, sum in numpy ``int64`` (which wraps silently past 2^63 − 1), add discrete
Laplace noise calibrated *correctly* to the claimed sensitivity ``upper`` — and
:func:`overflow_pairs` the neighbouring datasets that expose it (Casacuberta et al. 2022,
"Widespread underestimation of sensitivity in differentially private libraries and how to fix
it", §4: overflow): D sums to just below 2^63, D′ adds one value at the upper bound, and the
wrapped sum of D′ lies 2^63 *below* D's instead of ``upper`` above — twice the sensitivity, the
wrong way. An audit of it must FAIL; veil's own SUM on the same data must PASS (its sums are
exact integers, ``veil.release.exact``).

The noise is ``2^k · Z`` with ``Z`` discrete Laplace of scale ``(upper / 2^k) / ε`` (veil's exact
sampler), and the datasets hold multiples of ``2^k``: on that lattice the mechanism would be
exactly ε-DP if its sum did not wrap, so what the audit finds is the overflow alone.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import numpy as np
from numpy.typing import NDArray

from veil.noise.samplers import MAX_SCALE, discrete_laplace
from veil.random import RandomSource, system_source

__all__ = ["LATTICE", "UPPER", "overflow_pairs", "wrapping_sum"]

UPPER = 2**62
"""The control's claimed bound on one value (its L1 sensitivity)."""
LATTICE = 2**14
"""Every value and every noise draw is a multiple of it (``UPPER / LATTICE`` ≤ ``MAX_SCALE``)."""


def wrapping_sum(
    epsilon: Fraction, *, source: RandomSource | None = None
) -> Callable[[NDArray[np.int64], int], list[int]]:
    """The flawed mechanism: ``fn(values, count)`` returns ``count`` releases of
    ``int64_sum(clamp(values, 0, UPPER)) + noise`` (see the module docstring)."""
    scale = Fraction(UPPER // LATTICE) / epsilon
    if not 0 < scale <= MAX_SCALE:
        raise ValueError(f"epsilon={epsilon} puts the noise scale outside (0, 2^48]")
    src = source if source is not None else system_source()

    def release(values: NDArray[np.int64], count: int) -> list[int]:
        clamped = np.clip(values.astype(np.int64), 0, UPPER)
        with np.errstate(over="ignore"):
            total = int(np.sum(clamped, dtype=np.int64))  # wraps past 2^63 - 1
        noise = discrete_laplace(scale, count, source=src)
        return [total + LATTICE * int(z) for z in noise]

    return release


def overflow_pairs() -> list[tuple[NDArray[np.int64], NDArray[np.int64]]]:
    """Neighbouring datasets (D, D′ = D plus one value) whose int64 sums wrap on one side:
    D sums to 2^63 − 2^14; D′ adds the value ``UPPER``."""
    d = np.array([UPPER, 2**61, 2**61 - LATTICE], dtype=np.int64)
    return [(d, np.append(d, np.int64(UPPER)))]
