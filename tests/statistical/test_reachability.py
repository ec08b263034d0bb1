"""Mironov (2012) reachability: outputs from neighbouring inputs must lie on one grid.

For each mechanism we release many times from input 0 and from input 1 and compute the
*finest power of two* dividing every output of each run. A mechanism whose output set does not
depend on the input gives the same grid for both (the mechanism's ``2^k``); textbook
``x + numpy laplace`` gives a much finer grid from 0 (any double near 0) than from 1 (multiples
of 2^-53), so outputs from 0 that cannot occur from 1 identify the input.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from numpy.typing import NDArray

import veil.mechanisms as mech
from support import SeededSource


def finest_grid(outputs: NDArray[np.float64]) -> int:
    """The largest k such that every nonzero output is a multiple of 2^k."""
    y = outputs[outputs != 0]
    mant, exp = np.frexp(y)
    ints = np.ldexp(mant, 53).astype(np.int64)  # exact: 53-bit mantissa as an integer
    low = ints & -ints  # lowest set bit
    k = exp - 53 + np.log2(low).astype(np.int64)
    return int(k.min())


MECHANISMS: dict[str, Callable[[float, int], mech.Release]] = {
    "laplace": lambda x, s: mech.laplace(
        np.full(1, x), sensitivity=1, epsilon=1, source=SeededSource(s)
    ),
    "gaussian": lambda x, s: mech.gaussian(
        np.full(1, x), sensitivity=1, rho=1, source=SeededSource(s)
    ),
    "gaussian (epsilon, delta)": lambda x, s: mech.gaussian(
        np.full(1, x), sensitivity=1, epsilon=1, delta=1e-6, source=SeededSource(s)
    ),
}


@pytest.mark.parametrize("name", list(MECHANISMS))
def test_outputs_from_neighbouring_inputs_lie_on_the_same_grid(name: str) -> None:
    run = MECHANISMS[name]
    releases = {x: [run(x, 1000 * i + int(x)) for i in range(300)] for x in (0.0, 1.0)}
    grids = {r.grid for rs in releases.values() for r in rs}
    assert len(grids) == 1  # the grid depends on the parameters only
    outs = {x: np.concatenate([r.value for r in rs]) for x, rs in releases.items()}
    g0, g1 = finest_grid(outs[0.0]), finest_grid(outs[1.0])
    assert g0 == g1 == grids.pop()


def test_the_naive_float_laplace_fails_the_same_check() -> None:
    rng = np.random.default_rng(2012)

    def naive(x: float, n: int) -> NDArray[np.float64]:
        return x + rng.laplace(0.0, 1.0, n)

    g0, g1 = finest_grid(naive(0.0, 300)), finest_grid(naive(1.0, 300))
    assert g0 < g1 - 5  # outputs from 0 sit on a grid far finer than anything 1 can produce
