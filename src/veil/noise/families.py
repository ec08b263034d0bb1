"""The noise families a measurement can use, as objects (OpenDP's privacy maps).

Each family says, for itself and nowhere else:

- ``norm``: the sensitivity it is calibrated to — ``"L1"`` (discrete Laplace), ``"L2^2"`` (the
  *square* of the L2 sensitivity, for the discrete Gaussian, so that it stays exact) or
  ``"score"`` (the per-group score sensitivity of the exponential mechanism);
- :meth:`NoiseFamily.sensitivity`: that sensitivity from the per-row bound b and the unit's
  :class:`veil.noise.reach.Reach` (b·total, b²·squares, b·R' per group);
- :meth:`NoiseFamily.scale`: the noise scale for a sensitivity and a share of the budget (the
  calibration), and :meth:`NoiseFamily.loss`: the privacy map back from scale to loss, as pure
  ε (None when the family has none) and as ρ-zCDP;
- :meth:`NoiseFamily.sample`, :meth:`NoiseFamily.halfwidth` (the error bar of one draw) and
  :meth:`NoiseFamily.threshold` (the partition-selection threshold of a noisy count) for the
  additive families.

Calibration (``veil.compile.measure``), the post-compile re-check (``veil.compile.verify``),
noise drawing (``veil.release.draw``), error bars and ``explain`` all call the same object,
found by :func:`family` with an exhaustive ``match``: a mechanism name that is not here is an
error, never silently "the other one".
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from fractions import Fraction
from typing import Literal, assert_never, get_args

import numpy as np
from numpy.typing import NDArray

from veil.errors import InternalError
from veil.noise.errorbars import gaussian_halfwidth, laplace_halfwidth
from veil.noise.reach import Reach
from veil.noise.samplers import discrete_gaussian, discrete_laplace
from veil.noise.selection import gaussian_threshold, laplace_threshold
from veil.random import RandomSource

__all__ = [
    "DISCRETE_GAUSSIAN",
    "DISCRETE_LAPLACE",
    "EXPONENTIAL",
    "MECHANISMS",
    "Mechanism",
    "NoiseFamily",
    "family",
    "mechanism_of",
]

Mechanism = Literal["discrete_laplace", "discrete_gaussian", "exponential"]
MECHANISMS: tuple[str, ...] = get_args(Mechanism)
Norm = Literal["L1", "L2^2", "score"]
Loss = tuple[Fraction | None, Fraction]
"""A privacy map's value: (pure ε, or None when the family has no pure-ε guarantee; ρ-zCDP)."""


class NoiseFamily(ABC):
    """One noise family: its sensitivity norm, calibration, privacy map and sampler."""

    name: Mechanism
    norm: Norm
    additive: bool = True  # integer noise added to an exact statistic

    @abstractmethod
    def sensitivity(self, bound: Fraction, reach: Reach) -> Fraction:
        """The sensitivity in :attr:`norm` when each row of one unit changes its group's
        statistic by at most ``bound`` and the unit's rows spread as ``reach`` says."""

    @abstractmethod
    def scale(self, sensitivity: Fraction, share: Fraction) -> Fraction:
        """The scale that spends ``share`` at ``sensitivity``: ε for the discrete Laplace
        (scale Δ/ε), ρ for the discrete Gaussian (σ² = Δ²/(2ρ)), the per-group ε for the
        exponential mechanism (temperature 2Δ/ε)."""

    @abstractmethod
    def loss(
        self, sensitivity: Fraction, scale: Fraction, reach: Reach
    ) -> tuple[Fraction | None, Fraction]:
        """The privacy map: (pure ε or None, ρ-zCDP) of one measurement at ``scale`` for a
        unit of ``reach`` (only the exponential mechanism composes per group here: the
        additive families' sensitivity already covers every group)."""

    def sample(self, scale: Fraction, size: int, source: RandomSource) -> list[int]:
        """``size`` independent draws of the noise (exact integers)."""
        return [int(x) for x in self.sample_array(scale, size, source)] if size else []

    def sample_array(self, scale: Fraction, size: int, source: RandomSource) -> NDArray[np.int64]:
        """The same draws as :meth:`sample` (the same values from the same ``source``), as an
        int64 array."""
        raise InternalError(f"the {self.name} mechanism is not additive noise")

    def halfwidth(self, scale: Fraction, level: float) -> float:
        """The smallest integer t with P(|noise| ≤ t) ≥ ``level``."""
        raise InternalError(f"the {self.name} mechanism has no additive error bar")

    def threshold(self, scale: Fraction, *, groups: int, rows: int, delta: Fraction) -> int:
        """The partition-selection threshold of a noisy count with this noise (see
        :mod:`veil.noise.selection`)."""
        raise InternalError(f"partition selection cannot threshold {self.name} noise")


class _DiscreteLaplace(NoiseFamily):
    """P(z) ∝ exp(−|z|/b): ε = Δ₁/b-DP (Ghosh et al. 2009), hence ε²/2-zCDP."""

    name: Mechanism = "discrete_laplace"
    norm: Norm = "L1"

    def sensitivity(self, bound: Fraction, reach: Reach) -> Fraction:
        return reach.total * bound

    def scale(self, sensitivity: Fraction, share: Fraction) -> Fraction:
        return sensitivity / share

    def loss(
        self, sensitivity: Fraction, scale: Fraction, reach: Reach
    ) -> tuple[Fraction | None, Fraction]:
        eps = sensitivity / scale
        return eps, eps * eps / 2

    def sample_array(self, scale: Fraction, size: int, source: RandomSource) -> NDArray[np.int64]:
        if not size:
            return np.zeros(0, dtype=np.int64)
        return np.asarray(discrete_laplace(scale, size, source=source), dtype=np.int64)

    def halfwidth(self, scale: Fraction, level: float) -> float:
        return laplace_halfwidth(scale, level)

    def threshold(self, scale: Fraction, *, groups: int, rows: int, delta: Fraction) -> int:
        return laplace_threshold(scale, groups=groups, rows=rows, delta=delta)


class _DiscreteGaussian(NoiseFamily):
    """P(z) ∝ exp(−z²/(2σ²)): Δ₂²/(2σ²)-zCDP (Canonne, Kamath, Steinke 2020); no pure ε."""

    name: Mechanism = "discrete_gaussian"
    norm: Norm = "L2^2"

    def sensitivity(self, bound: Fraction, reach: Reach) -> Fraction:
        return reach.squares * bound * bound

    def scale(self, sensitivity: Fraction, share: Fraction) -> Fraction:
        return sensitivity / (2 * share)

    def loss(
        self, sensitivity: Fraction, scale: Fraction, reach: Reach
    ) -> tuple[Fraction | None, Fraction]:
        return None, sensitivity / (2 * scale)

    def sample_array(self, scale: Fraction, size: int, source: RandomSource) -> NDArray[np.int64]:
        if not size:
            return np.zeros(0, dtype=np.int64)
        return np.asarray(discrete_gaussian(scale, size, source=source), dtype=np.int64)

    def halfwidth(self, scale: Fraction, level: float) -> float:
        return gaussian_halfwidth(scale, level)

    def threshold(self, scale: Fraction, *, groups: int, rows: int, delta: Fraction) -> int:
        return gaussian_threshold(scale, groups=groups, rows=rows, delta=delta)


class _Exponential(NoiseFamily):
    """Weights exp(score/T) with temperature T = 2Δ/ε_g: ε_g-DP per group (McSherry & Talwar
    2007) and ε_g²/8-zCDP (bounded range; Cesar & Rogers 2021, Lemma 3.2). A unit with c_g of
    the R' rows Δ is calibrated to in group g moves its scores by c_g/R'·Δ, so that group costs
    ε_g·c_g/R' (and is ε_g·c_g/R'-bounded-range); the groups compose to ε_g·spread and
    (ε_g²/8)·spread_squared (:class:`veil.noise.reach.Reach`; G·ε_g and G·ε_g²/8 without a
    total-rows bound)."""

    name: Mechanism = "exponential"
    norm: Norm = "score"
    additive = False

    def sensitivity(self, bound: Fraction, reach: Reach) -> Fraction:
        return reach.rows * bound

    def scale(self, sensitivity: Fraction, share: Fraction) -> Fraction:
        return 2 * sensitivity / share if sensitivity > 0 else Fraction(1)

    def loss(
        self, sensitivity: Fraction, scale: Fraction, reach: Reach
    ) -> tuple[Fraction | None, Fraction]:
        eps_g = 2 * sensitivity / scale
        return reach.spread * eps_g, reach.spread_squared * eps_g * eps_g / 8


def mechanism_of(name: object) -> Mechanism:
    """``name`` as a mechanism; ``InternalError`` for any other value."""
    for m in get_args(Mechanism):
        if name == m:
            return m  # type: ignore[no-any-return]
    raise InternalError(f"no noise family {name!r}; veil has {', '.join(MECHANISMS)}")


DISCRETE_LAPLACE: NoiseFamily = _DiscreteLaplace()
DISCRETE_GAUSSIAN: NoiseFamily = _DiscreteGaussian()
EXPONENTIAL: NoiseFamily = _Exponential()


def family(mechanism: Mechanism) -> NoiseFamily:
    """The family object of ``mechanism`` (exhaustive: a new family must be added here, and
    mypy reports every ``match`` on a mechanism that does not handle it). Names from outside
    the type (JSON) are checked with :func:`mechanism_of` first."""
    match mechanism:
        case "discrete_laplace":
            return DISCRETE_LAPLACE
        case "discrete_gaussian":
            return DISCRETE_GAUSSIAN
        case "exponential":
            return EXPONENTIAL
        case _:
            assert_never(mechanism)
