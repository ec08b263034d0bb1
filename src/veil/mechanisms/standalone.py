"""Differentially private mechanisms over exact noise.

Every additive mechanism returns a :class:`Release`: the noisy value(s) in the input's shape,
the distribution, its scale, the sensitivity it was calibrated to and the exact privacy loss
(a :class:`veil.Budget`). Parameters are read exactly (``epsilon=0.1`` is 1/10, see
:func:`veil.accounting.budget.exact`) and the loss reported is exactly the one the noise gives.
``epsilon=`` also takes a :class:`veil.Budget` (what ``even_split`` returns): a pure one for the
pure mechanisms, an (ε, δ) or zCDP one for the Gaussian. The loss lies in the range one query
may spend (:mod:`veil.accounting.limits`: ε in [1e-12, 1e4], ρ in [5e-25, 5e7], δ below 1/2),
and noise the exact samplers cannot draw, or whose outputs a double cannot hold, is refused —
all before anything is charged.

Every mechanism can be charged to a ledger, as :func:`veil.perturb` is: pass ``ledger=``,
``analyst=`` and ``dataset=`` and the loss is reserved for that analyst's grant before any noise
is drawn and committed when the release exists (:class:`veil.errors.BudgetExhaustedError`, and
nothing drawn, when it does not fit). Without a ledger nothing is charged and the caller
accounts for ``release.loss``. Privacy then rests on the caller's sensitivity claim.

Real-valued mechanisms (:func:`laplace`, :func:`gaussian`) work on the 2^k grid of
:mod:`veil.noise.grid`: the input is rounded exactly to the grid, integer noise in grid units is
added, calibrated to the sensitivity *plus the rounding* (``Δ/2^k + d`` grid units for L1,
``Δ/2^k + ⌈√d⌉`` for L2), so the set of outputs never depends on the input (Mironov 2012).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from veil.accounting.budget import Budget, exact
from veil.accounting.limits import check_spend
from veil.errors import InternalError, InvalidArgumentError
from veil.mechanisms.scores import read_scores
from veil.noise import samplers
from veil.noise._exact import (
    LazyUniform,
    draw_u32,
    exp_bounds,
    resolve_source,
    uniform_int,
)
from veil.noise.calibrate import sigma2_for_approx_dp
from veil.noise.choice import first_accepted, uniform_permutation
from veil.noise.errorbars import gaussian_halfwidth, laplace_halfwidth
from veil.noise.grid import MAX_EXPONENT, from_grid, grid_exponent, to_grid
from veil.random import RandomSource, is_private, refuse_replayable
from veil.sensitivity import ObservedSensitivity

if TYPE_CHECKING:
    from veil.accounting.ledger import Ledger
    from veil.accounting.reservation import Reservation
    from veil.accounting.scratch import ScratchLedger

__all__ = [
    "GaussianMechanism",
    "LaplaceMechanism",
    "Release",
    "check_representable",
    "discrete_gaussian",
    "discrete_laplace",
    "exponential",
    "gaussian",
    "laplace",
    "pure_epsilon",
    "randomized_response",
    "report_noisy_max",
]

Number = int | float | Fraction | Decimal | str
T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class Release:
    """A noisy release and what it cost (compared by identity: ``value`` may be an array).

    ``scale`` is the noise's scale in value units (Laplace: b of ``exp(-|x|/b)``; Gaussian: σ²
    is ``sigma2``, ``scale = σ``), ``grid`` is the output grid exponent (None for integer
    mechanisms), ``loss`` the exact privacy loss the mechanism satisfies. ``private`` is False
    when the noise came from a caller-supplied source (a seeded one, for tests): such a release
    can be replayed and protects nothing.
    """

    value: Any
    mechanism: str
    scale: Fraction | float | None
    sensitivity: Fraction
    loss: Budget
    grid: int | None = None
    noise_scale: Fraction | None = None  # in grid units: Laplace scale, or σ² for Gaussian
    private: bool = True  # False when drawn from a caller-supplied (replayable) source

    def error_bar(self, level: float = 0.95) -> float:
        """Half-width ``t`` (value units) with ``P(|value − true value| ≤ t) ≥ level``.

        Covers the noise exactly (discrete distributions) plus, on a grid, the input rounding
        ``2^(k−1)``.
        """
        if self.noise_scale is None:
            raise InvalidArgumentError(
                f"a {self.mechanism} release has no additive noise, so no error bar"
            )
        if self.mechanism in ("laplace", "discrete_laplace"):
            units = laplace_halfwidth(self.noise_scale, level)
        else:
            units = gaussian_halfwidth(self.noise_scale, level)
        if self.grid is None:
            return units
        step = math.ldexp(1.0, self.grid)
        return units * step + step / 2


# ------------------------------------------------------------------------------ validation


_CACHED = (int, float, Fraction)  # argument types read through a cache (hashable, exact keys)


def pure_epsilon(
    epsilon: Number | Budget, mechanism: str = "this mechanism", *, gaussian: bool = True
) -> Fraction:
    """ε of a pure mechanism — a number, or a pure :class:`Budget` (what ``even_split``
    returns) — within the range one release may spend (``veil.accounting.limits``).
    ``gaussian``: whether the refusal of an (ε, δ) or zCDP budget suggests the Gaussian
    mechanism instead.

    A plain int, float or Fraction (the common case) is read through a cache keyed by its
    type and value, so ``1`` and ``1.0`` are separate entries; a refusal is never cached.
    """
    if type(epsilon) in _CACHED:
        return _pure_epsilon_cached(epsilon, mechanism, gaussian)
    return _pure_epsilon(epsilon, mechanism, gaussian)


@lru_cache(maxsize=256, typed=True)
def _pure_epsilon_cached(
    epsilon: int | float | Fraction, mechanism: str, gaussian: bool
) -> Fraction:
    return _pure_epsilon(epsilon, mechanism, gaussian)


@lru_cache(maxsize=256)
def _pure_budget(eps: Fraction) -> Budget:
    """``Budget(epsilon=eps)``, built once per ε (a Budget is immutable)."""
    return Budget(epsilon=eps)


def _pure_epsilon(epsilon: Number | Budget, mechanism: str, gaussian: bool) -> Fraction:
    if isinstance(epsilon, Budget):
        if epsilon.kind == "approx":
            raise InvalidArgumentError(
                f"{mechanism} is pure ε-DP and spends no δ, but epsilon={epsilon!r} is an "
                "(ε, δ) budget; pass its ε alone (epsilon=budget.eps: δ stays unspent)"
                + (" or use gaussian, which spends δ" if gaussian else "")
            )
        if epsilon.kind == "zcdp":
            raise InvalidArgumentError(
                f"{mechanism} is pure ε-DP, but epsilon={epsilon!r} is a zCDP budget; pass a "
                "pure Budget(epsilon=…) or a number"
                + (", or use gaussian, which spends ρ" if gaussian else "")
            )
        e = epsilon.eps
    else:
        if isinstance(epsilon, float) and math.isnan(epsilon):
            raise InvalidArgumentError("epsilon must be a positive finite number, got nan")
        e = exact(epsilon, "epsilon")
    if e <= 0:
        raise InvalidArgumentError(
            f"epsilon must be > 0, got {epsilon!r}; pass e.g. epsilon=0.5 (smaller = more private)"
        )
    check_spend(_pure_budget(e), what="one release")
    return e


def _sensitivity(sensitivity: Any) -> Fraction:
    """The declared sensitivity, exactly (> 0); plain numbers through a cache as in
    :func:`pure_epsilon`."""
    if type(sensitivity) in _CACHED:
        return _sensitivity_cached(sensitivity)
    return _read_sensitivity(sensitivity)


@lru_cache(maxsize=256, typed=True)
def _sensitivity_cached(sensitivity: int | float | Fraction) -> Fraction:
    return _read_sensitivity(sensitivity)


def _read_sensitivity(sensitivity: Any) -> Fraction:
    if isinstance(sensitivity, ObservedSensitivity):
        raise InvalidArgumentError(
            f"sensitivity={sensitivity.lower_bound!r} was *observed* on example datasets by "
            "veil.sensitivity.probe; it is only a lower bound and cannot calibrate noise. "
            "Derive the sensitivity from declared bounds (e.g. 1 for a count, upper − lower for "
            "a bounded sum) and pass it as a number"
        )
    if isinstance(sensitivity, float) and math.isnan(sensitivity):
        raise InvalidArgumentError("sensitivity must be a positive finite number, got nan")
    s = exact(sensitivity, "sensitivity")
    if s <= 0:
        raise InvalidArgumentError(
            f"sensitivity must be > 0, got {sensitivity!r}; it is the most one privacy unit "
            "can change the result (1 for a count)"
        )
    return s


def _delta(delta: Number) -> Fraction:
    if isinstance(delta, float) and math.isnan(delta):
        raise InvalidArgumentError("delta must lie in (0, 1), got nan")
    d = exact(delta, "delta")
    if not 0 < d < 1:
        raise InvalidArgumentError(
            f"delta must lie in (0, 1), got {delta!r}; typically below 1/n, e.g. delta=1e-6"
        )
    return d


def _values(values: Any) -> tuple[NDArray[Any], tuple[int, ...], bool]:
    """The input as a flat numpy array, its shape, and whether it was a scalar."""
    if isinstance(values, bool | np.bool_):
        raise InvalidArgumentError(f"values must be numbers, got the boolean {values!r}")
    if isinstance(values, Fraction | Decimal):
        arr: NDArray[Any] = np.array([values], dtype=object)
    else:
        try:
            arr = np.asarray(values)
        except (ValueError, TypeError) as exc:
            raise InvalidArgumentError(
                f"values must be numbers or an array, got {values!r}"
            ) from exc
    scalar = isinstance(values, Fraction | Decimal) or arr.ndim == 0
    shape = arr.shape
    flat = arr.reshape(-1)
    kind = flat.dtype.kind
    if kind == "O":
        for v in flat:
            if isinstance(v, bool | np.bool_) or not isinstance(
                v, int | float | Fraction | Decimal | np.integer | np.floating
            ):
                raise InvalidArgumentError(
                    f"values must be numbers, got {v!r} of type {type(v).__name__}"
                )
            if isinstance(v, float | Decimal | np.floating) and not math.isfinite(v):
                raise InvalidArgumentError(
                    f"values must be finite, got {v!r}; drop or impute missing values first"
                )
    elif kind == "f":
        # a NaN propagates through max and min: no mask of every value when all are finite
        if flat.size and not (
            math.isfinite(float(flat.max())) and math.isfinite(float(flat.min()))
        ):
            bad = ~np.isfinite(flat)
            raise InvalidArgumentError(
                f"values must be finite, got {float(flat[bad][0])}; "
                "drop or impute missing values first"
            )
    elif kind not in "iu":
        raise InvalidArgumentError(
            f"values must be a numeric array (int or float), got dtype {flat.dtype}"
        )
    if flat.size == 0:
        raise InvalidArgumentError("values is empty; there is nothing to release")
    return flat, shape, scalar


def _plain_scalar(values: Any) -> int | float | None:
    """``values`` when it is a plain Python float (finite) or int (below 2^61 in magnitude,
    also as a double, the way :func:`_integers` measures it), else None. Such a value skips
    numpy on its way to and from the grid (:func:`_scalar_to_grid`, :func:`_scalar_from_grid`)
    with results identical to the array path's."""
    if type(values) is float:
        return values if math.isfinite(values) else None
    if type(values) is int and abs(values) < _INT_LIMIT and abs(float(values)) < _INT_LIMIT:
        return int(values)
    return None


def _scalar_to_grid(value: int | float, k: int) -> int:
    """``to_grid`` of one plain value: the same IEEE product and round-half-even for a float
    (``|k| ≤ 1000``: ``2^-k`` is a normal double), the same shifts for an int; anything near
    the grid's range goes through :func:`veil.noise.grid.to_grid` itself (same refusal)."""
    if type(value) is float:
        if abs(k) <= 1000:
            scaled = value * math.ldexp(1.0, -k)
            if abs(scaled) < _INT_LIMIT:
                return round(scaled)
    elif k <= 0:
        if abs(value) < _INT_LIMIT >> -k:
            return int(value) << -k
    else:
        q = int(value) >> k
        r = int(value) - (q << k)
        half = 1 << (k - 1)
        return q + int(r > half or (r == half and q & 1 == 1))
    return int(to_grid(np.array([value]), k)[0])


def _scalar_from_grid(m: int, k: int) -> float:
    """``from_grid`` of one grid integer (``|m| < 2^62``): ``float(m)·2^k``, one rounding of
    ``m`` to a double and an exact scaling, as the array path does."""
    if abs(k) <= 1000:
        return float(m) * math.ldexp(1.0, k)
    return float(from_grid(np.array([m], dtype=np.int64), k)[0])


def _scalar_noise(noise: NDArray[np.int64]) -> int:
    """The one sample of ``noise``, checked below 2^61 as :func:`_add_noise` checks."""
    z = int(noise[0])
    if abs(z) >= _INT_LIMIT:
        raise InternalError("a noise sample reached 2^61 (probability below e^-8192)")
    return z


def _shape_out(flat: NDArray[Any], shape: tuple[int, ...], scalar: bool) -> Any:
    return flat[0].item() if scalar else flat.reshape(shape)


_INT_LIMIT = 1 << 61  # |value| and |noise| below this: their int64 sum cannot overflow


def _integers(flat: NDArray[Any], name: str) -> NDArray[np.int64]:
    """Integer values as int64, each of magnitude below 2^61."""
    kind = flat.dtype.kind
    if kind == "f" and not np.all(flat == np.rint(flat)):
        raise InvalidArgumentError(
            f"{name} adds integer noise and needs integer values (got e.g. "
            f"{float(flat[flat != np.rint(flat)][0])}); "
            "use veil.noise.mechanisms.laplace / gaussian for real values"
        )
    if kind in "iuf":
        top = float(np.max(np.abs(flat.astype(np.float64))))
        if top >= _INT_LIMIT:
            raise InvalidArgumentError(
                f"{name} supports integers of magnitude below 2^61, got {top:.6g}; "
                "clamp the data to tighter bounds"
            )
        return flat.astype(np.int64)
    out = []
    for v in flat:
        f = Fraction(v)
        if f.denominator != 1:
            raise InvalidArgumentError(
                f"{name} needs integer values, got {v!r}; use laplace / gaussian for real values"
            )
        if abs(f) >= _INT_LIMIT:
            raise InvalidArgumentError(
                f"{name} supports integers of magnitude below 2^61, got {v!r}; "
                "clamp the data to tighter bounds"
            )
        out.append(int(f))
    return np.array(out, dtype=np.int64)


def _add_noise(values: NDArray[np.int64], noise: NDArray[np.int64]) -> NDArray[np.int64]:
    """``values + noise`` with both below 2^61 in magnitude, so int64 cannot wrap; written
    over ``noise`` (a fresh draw the caller reads no more)."""
    _check_noise(noise)
    return np.add(values, noise, out=noise)


def _check_noise(noise: NDArray[np.int64]) -> None:
    if noise.size and max(int(noise.max()), -int(noise.min())) >= _INT_LIMIT:
        raise InternalError("a noise sample reached 2^61 (probability below e^-8192)")


def _add_drawn(units: NDArray[np.int64], chunks: Iterable[tuple[int, NDArray[np.int64]]]) -> None:
    """Add noise drawn chunk by chunk (``samplers.*_chunks``) into ``units`` (grid integers
    below 2^61, the caller's own array), each chunk checked as :func:`_add_noise` checks: the
    values of ``units + noise`` without an array of noise."""
    for start, chunk in chunks:
        _check_noise(chunk)
        units[start : start + chunk.size] += chunk


def check_representable(
    mechanism: str, scale: Fraction, k: int | None = None, *, variance: bool = False
) -> None:
    """Refuse, before anything is charged, noise the exact samplers cannot draw — a scale
    (a Laplace scale, or σ² when ``variance``) above ``MAX_SCALE`` grid units (its square for
    σ²) — or, on the grid ``2^k``, outputs a double cannot hold: every grid integer is below
    2^62, so ``k ≤ MAX_EXPONENT`` keeps every output finite. ``mechanism`` names the caller in
    the message."""
    limit = samplers.MAX_SCALE**2 if variance else samplers.MAX_SCALE
    if scale > limit:
        what = "σ²" if variance else "scale"
        raise InvalidArgumentError(
            f"{mechanism}: noise of {what} {float(scale):.3g} grid steps is beyond the "
            f"{float(limit):.3g} the exact sampler draws; spend more (a larger epsilon or "
            "rho), lower the sensitivity, or release fewer values at once"
        )
    if k is not None and k > MAX_EXPONENT:
        raise InvalidArgumentError(
            f"{mechanism}: this sensitivity and loss need the output grid 2^{k}, on which a "
            "noisy value can exceed the largest double (≈1.8e308) and come out as ±inf (the "
            f"coarsest grid is 2^{MAX_EXPONENT}); rescale the values (e.g. divide them by "
            "1e100) so that the sensitivity is smaller"
        )


# ------------------------------------------------------------------------------- charging


def _reserve(
    ledger: Ledger | ScratchLedger | None,
    analyst: str | None,
    dataset: str | None,
    loss: Budget,
    *,
    mechanism: str,
    sensitivity: Fraction,
    size: int,
    source: RandomSource | None,
) -> Reservation | None:
    """Reserve ``loss`` on (``analyst``, ``dataset``) before noise is drawn (None: no ledger).

    Refuses, before anything is charged: analyst or dataset without a ledger (or a ledger
    without them), and a caller-supplied source with a persistent ledger (replayable noise).
    """
    if ledger is None:
        if analyst is not None or dataset is not None:
            raise InvalidArgumentError(
                "analyst= and dataset= name the grant to charge, which needs ledger= too: "
                "laplace(x, ..., ledger=ledger, analyst='alice', dataset='people')"
            )
        return None
    if not analyst or not dataset:
        raise InvalidArgumentError(
            "charging a mechanism needs the analyst and the dataset: "
            f"{mechanism}(..., ledger=ledger, analyst='alice', dataset='people')"
        )
    refuse_replayable(source, persistent=ledger.persistent, ledger=ledger.url)
    fingerprint, described = _charge_record(mechanism, loss, sensitivity, size)
    return ledger.reserve(analyst, dataset, loss, fingerprint=fingerprint, query=described)


@lru_cache(maxsize=256)
def _charge_record(
    mechanism: str, loss: Budget, sensitivity: Fraction, size: int
) -> tuple[str, str]:
    """The fingerprint and the description a charge of ``mechanism`` is recorded under (a
    pure function of its arguments, so built once per distinct release)."""
    text = json.dumps(
        {
            "operation": "mechanism",
            "mechanism": mechanism,
            "loss": loss.to_dict(),
            "sensitivity": str(sensitivity),
            "size": size,
        },
        sort_keys=True,
    )
    fingerprint = "mechanism:" + hashlib.sha256(text.encode()).hexdigest()
    return fingerprint, f"{mechanism} over {size} value(s), sensitivity {sensitivity}, loss {loss}"


def _drawn(reservation: Reservation | None, draw: Callable[[], T]) -> T:
    """Run ``draw`` (the noise) and commit the reservation; refund it if drawing fails (no
    value is released, and drawing reads no private data)."""
    try:
        out = draw()
    except BaseException:
        if reservation is not None:
            reservation.refund()
        raise
    if reservation is not None:
        reservation.commit(None)
    return out


def _ceil_sqrt(n: int) -> int:
    r = math.isqrt(n)
    return r if r * r == n else r + 1


# ------------------------------------------------------------------------------- Laplace


def _laplace_calibration(
    sens: Fraction, eps: Fraction, d: int
) -> tuple[int, Fraction, Fraction, Budget]:
    """The grid ``k``, the noise scale in grid units ``(Δ/2^k + d)/ε`` and in value units, and
    the loss ``Budget(epsilon=ε)``, for :func:`laplace` (refused by
    :func:`check_representable`; a refusal is not cached). Remembered by the rationals'
    numerators and denominators: a Fraction's hash is a modular inverse computed afresh at
    every lookup, ~1 µs each of a scalar release's few."""
    key = (sens.numerator, sens.denominator, eps.numerator, eps.denominator, d)
    return _laplace_calibrated(*key)


@lru_cache(maxsize=256)
def _laplace_calibrated(
    sn: int, sd: int, en: int, ed: int, d: int
) -> tuple[int, Fraction, Fraction, Budget]:
    sens, eps = Fraction(sn, sd), Fraction(en, ed)
    k = grid_exponent(min(sens, sens / eps), d)
    step = Fraction(2) ** k
    scale_units = (sens / step + d) / eps
    check_representable("laplace", scale_units, k)
    return k, scale_units, scale_units * step, _pure_budget(eps)


def laplace(
    values: Any,
    *,
    sensitivity: Number,
    epsilon: Number | Budget,
    source: RandomSource | None = None,
    ledger: Ledger | ScratchLedger | None = None,
    analyst: str | None = None,
    dataset: str | None = None,
) -> Release:
    """ε-DP Laplace mechanism for real values on the 2^k grid.

    Preconditions: ``sensitivity`` bounds the L1 distance of the query between neighbouring
    datasets (over all coordinates); ``epsilon > 0``.
    Postcondition: each output is ``2^k·(round(x/2^k) + N)`` with ``N`` exact discrete Laplace of
    scale ``(Δ/2^k + d)/ε`` grid units; the rounded query has L1 sensitivity ``≤ Δ/2^k + d``
    grid units, so the release is ε-DP (geometric mechanism, Ghosh et al. 2009; CKS 2020).
    ``k`` is :func:`veil.noise.grid.grid_exponent` of ``min(Δ, Δ/ε)`` and ``d``.
    """
    eps, sens = pure_epsilon(epsilon, "laplace"), _sensitivity(sensitivity)
    plain = _plain_scalar(values)
    if plain is None:
        flat, shape, scalar = _values(values)
    d = 1 if plain is not None else flat.size
    k, scale_units, scale, loss = _laplace_calibration(sens, eps, d)
    if plain is None:
        units = to_grid(flat, k)
    else:
        unit = _scalar_to_grid(plain, k)
    held = _reserve(
        ledger, analyst, dataset, loss, mechanism="laplace", sensitivity=sens, size=d,
        source=source,
    )  # fmt: skip
    if plain is None:
        _drawn(
            held,
            lambda: _add_drawn(
                units, samplers.discrete_laplace_chunks(scale_units, d, source=source)
            ),
        )
        value = _shape_out(from_grid(units, k, overwrite=True), shape, scalar)
    else:
        noise = _drawn(held, lambda: samplers.discrete_laplace(scale_units, d, source=source))
        value = _scalar_from_grid(unit + _scalar_noise(noise), k)
    return Release(
        value=value,
        mechanism="laplace",
        scale=scale,
        sensitivity=sens,
        loss=loss,
        grid=k,
        noise_scale=scale_units,
        private=is_private(source),
    )


@lru_cache(maxsize=256)
def _discrete_laplace_scale(sens: Fraction, eps: Fraction) -> Fraction:
    """``Δ/ε`` for :func:`discrete_laplace`, refused by :func:`check_representable`."""
    scale = sens / eps
    check_representable("discrete_laplace", scale)
    return scale


def discrete_laplace(
    values: Any,
    *,
    sensitivity: Number,
    epsilon: Number | Budget,
    source: RandomSource | None = None,
    ledger: Ledger | ScratchLedger | None = None,
    analyst: str | None = None,
    dataset: str | None = None,
) -> Release:
    """ε-DP discrete Laplace (geometric) mechanism for integer values.

    Preconditions: integer values; ``sensitivity`` bounds the L1 distance between neighbours.
    Postcondition: ``x + N`` with ``N`` exact discrete Laplace of scale ``Δ/ε``: ε-DP
    (Ghosh, Roughgarden, Sundararajan 2009; Canonne, Kamath, Steinke 2020).
    """
    eps, sens = pure_epsilon(epsilon, "discrete_laplace"), _sensitivity(sensitivity)
    plain = _plain_scalar(values) if type(values) is int else None
    if plain is None:
        flat, shape, scalar = _values(values)
        ints = _integers(flat, "discrete_laplace")
    d = 1 if plain is not None else ints.size
    scale = _discrete_laplace_scale(sens, eps)
    loss = _pure_budget(eps)
    held = _reserve(
        ledger, analyst, dataset, loss, mechanism="discrete_laplace", sensitivity=sens,
        size=d, source=source,
    )  # fmt: skip
    noise = _drawn(held, lambda: samplers.discrete_laplace(scale, d, source=source))
    if plain is None:
        value = _shape_out(_add_noise(ints, noise), shape, scalar)
    else:
        value = int(plain) + _scalar_noise(noise)
    return Release(
        value=value,
        mechanism="discrete_laplace",
        scale=scale,
        sensitivity=sens,
        loss=loss,
        noise_scale=scale,
        private=is_private(source),
    )


# ------------------------------------------------------------------------------ Gaussian


GaussianParams = tuple[Fraction, None, None] | tuple[None, Fraction, Fraction]


def _gaussian_params(
    rho: Number | None, epsilon: Number | Budget | None, delta: Number | None
) -> GaussianParams:
    """Validated ``(ρ, None, None)`` or ``(None, ε, δ)``; ``epsilon`` may be an (ε, δ) or a
    zCDP :class:`Budget` (what ``even_split`` returns), within the range one release may
    spend. Plain numbers (or None) are read through a cache as in :func:`pure_epsilon`."""
    if all(v is None or type(v) in _CACHED for v in (rho, epsilon, delta)):
        return _gaussian_params_cached(rho, epsilon, delta)
    return _read_gaussian_params(rho, epsilon, delta)


@lru_cache(maxsize=256, typed=True)
def _gaussian_params_cached(
    rho: int | float | Fraction | None,
    epsilon: int | float | Fraction | None,
    delta: int | float | Fraction | None,
) -> GaussianParams:
    return _read_gaussian_params(rho, epsilon, delta)


def _read_gaussian_params(
    rho: Number | None, epsilon: Number | Budget | None, delta: Number | None
) -> GaussianParams:
    if isinstance(epsilon, Budget):
        if rho is not None or delta is not None:
            raise InvalidArgumentError(
                f"epsilon={epsilon!r} is a Budget, which carries its own delta (or rho); pass "
                "either epsilon=Budget(...) or rho= / epsilon= and delta= as numbers"
            )
        if epsilon.kind == "pure":
            raise InvalidArgumentError(
                f"the Gaussian mechanism cannot satisfy pure ε-DP, but epsilon={epsilon!r} is "
                "a pure budget; pass Budget(epsilon=…, delta=…) or Budget(rho=…), or use "
                "laplace for pure ε"
            )
        budget = epsilon
        if budget.kind == "zcdp":
            rho, epsilon = budget.rho, None
        else:
            epsilon, delta = budget.eps, budget.delta
    if rho is not None:
        if epsilon is not None or delta is not None:
            raise InvalidArgumentError(
                "pass either rho=… (zCDP) or epsilon=… and delta=…, not both "
                f"(got rho={rho!r}, epsilon={epsilon!r}, delta={delta!r})"
            )
        if isinstance(rho, float) and math.isnan(rho):
            raise InvalidArgumentError("rho must be a positive finite number, got nan")
        r = exact(rho, "rho")
        if r <= 0:
            raise InvalidArgumentError(f"rho must be > 0, got {rho!r}; e.g. rho=0.125")
        check_spend(Budget(rho=r), what="one release")
        return r, None, None
    if epsilon is None or delta is None:
        raise InvalidArgumentError(
            "the Gaussian mechanism needs rho=… (zCDP) or both epsilon=… and delta=…, "
            f"got epsilon={epsilon!r}, delta={delta!r}"
        )
    e, d = pure_epsilon(epsilon, "gaussian"), _delta(delta)
    check_spend(Budget(epsilon=e, delta=d), what="one release")
    return None, e, d


def _gaussian_loss(
    sens_units: Fraction, dimension: int, params: GaussianParams
) -> tuple[Fraction, Budget]:
    """σ² in the units of ``sens_units`` and the exact loss it satisfies."""
    r, eps, dlt = params
    if r is not None:
        return sens_units**2 / (2 * r), Budget(rho=r)
    if eps is None or dlt is None:
        raise InternalError("Gaussian parameters validated to neither rho nor (epsilon, delta)")
    return sigma2_for_approx_dp(sens_units, eps, dlt, dimension), Budget(epsilon=eps, delta=dlt)


def _nominal_sigma(sens: Fraction, params: GaussianParams) -> Fraction:
    """A rational stand-in for σ, used only to choose the grid (``Δ/√(2ρ) ≥ Δ/(2ρ + 1)``)."""
    r, eps, _ = params
    if r is not None:
        return sens / (2 * r + 1)
    return sens / ((eps or Fraction(0)) + 1)


@lru_cache(maxsize=256)
def _gaussian_calibration(
    sens: Fraction, params: GaussianParams, d: int
) -> tuple[int, Fraction, Budget, float]:
    """The grid ``k``, σ² in grid units, the exact loss and σ in value units for
    :func:`gaussian` (refused by :func:`check_representable`; a refusal is not cached)."""
    k = grid_exponent(min(sens, _nominal_sigma(sens, params)), d)
    step = Fraction(2) ** k
    sens_units = sens / step + _ceil_sqrt(d)
    sigma2, loss = _gaussian_loss(sens_units, d, params)
    check_representable("gaussian", sigma2, k, variance=True)
    return k, sigma2, loss, math.sqrt(sigma2) * float(step)


def gaussian(
    values: Any,
    *,
    sensitivity: Number,
    rho: Number | None = None,
    epsilon: Number | Budget | None = None,
    delta: Number | None = None,
    source: RandomSource | None = None,
    ledger: Ledger | ScratchLedger | None = None,
    analyst: str | None = None,
    dataset: str | None = None,
) -> Release:
    """Gaussian mechanism for real values on the 2^k grid (discrete Gaussian noise).

    Preconditions: ``sensitivity`` bounds the L2 distance between neighbours; either ``rho``
    or ``epsilon`` and ``delta``.
    Postcondition: ``2^k·(round(x/2^k) + N)``, ``N`` exact discrete Gaussian with σ² (grid
    units) = ``Δ_g²/(2ρ)`` exactly, where ``Δ_g = Δ/2^k + ⌈√d⌉`` (ρ-zCDP, CKS 2020 Thm 14);
    from (ε, δ) σ is the smallest found by bisection on the exact discrete-Gaussian privacy
    curve (CKS Thm 7, every integer shift ≤ Δ_g) for one value, or on the zCDP conversion
    (CKS Cor 13) for a vector — never the classic ``sqrt(2 ln(1.25/δ))/ε`` bound — rounded up.
    """
    sens = _sensitivity(sensitivity)
    params = _gaussian_params(rho, epsilon, delta)
    plain = _plain_scalar(values)
    if plain is None:
        flat, shape, scalar = _values(values)
    d = 1 if plain is not None else flat.size
    k, sigma2, loss, scale = _gaussian_calibration(sens, params, d)
    if plain is None:
        units = to_grid(flat, k)
    else:
        unit = _scalar_to_grid(plain, k)
    held = _reserve(
        ledger, analyst, dataset, loss, mechanism="gaussian", sensitivity=sens, size=d,
        source=source,
    )  # fmt: skip
    if plain is None:
        _drawn(
            held,
            lambda: _add_drawn(units, samplers.discrete_gaussian_chunks(sigma2, d, source=source)),
        )
        value = _shape_out(from_grid(units, k, overwrite=True), shape, scalar)
    else:
        noise = _drawn(held, lambda: samplers.discrete_gaussian(sigma2, d, source=source))
        value = _scalar_from_grid(unit + _scalar_noise(noise), k)
    return Release(
        value=value,
        mechanism="gaussian",
        scale=scale,
        sensitivity=sens,
        loss=loss,
        grid=k,
        noise_scale=sigma2,
        private=is_private(source),
    )


def discrete_gaussian(
    values: Any,
    *,
    sensitivity: Number,
    rho: Number | None = None,
    epsilon: Number | Budget | None = None,
    delta: Number | None = None,
    source: RandomSource | None = None,
    ledger: Ledger | ScratchLedger | None = None,
    analyst: str | None = None,
    dataset: str | None = None,
) -> Release:
    """Discrete Gaussian mechanism for integer values (same calibration as :func:`gaussian`).

    Postcondition: ``x + N``, ``N ~ N_Z(0, σ²)`` exact; σ² = Δ²/(2ρ) gives ρ-zCDP (CKS 2020
    Thm 14); from (ε, δ) as in :func:`gaussian`.
    """
    sens = _sensitivity(sensitivity)
    params = _gaussian_params(rho, epsilon, delta)
    flat, shape, scalar = _values(values)
    ints = _integers(flat, "discrete_gaussian")
    sigma2, loss = _gaussian_loss(sens, ints.size, params)
    check_representable("discrete_gaussian", sigma2, variance=True)
    held = _reserve(
        ledger, analyst, dataset, loss, mechanism="discrete_gaussian", sensitivity=sens,
        size=ints.size, source=source,
    )  # fmt: skip
    noise = _drawn(held, lambda: samplers.discrete_gaussian(sigma2, ints.size, source=source))
    noisy = _add_noise(ints, noise)
    return Release(
        value=_shape_out(noisy, shape, scalar),
        mechanism="discrete_gaussian",
        scale=math.sqrt(sigma2),
        sensitivity=sens,
        loss=loss,
        noise_scale=sigma2,
        private=is_private(source),
    )


# --------------------------------------------------------------------------- selection


def exponential(
    scores: Any,
    *,
    sensitivity: Number,
    epsilon: Number | Budget,
    source: RandomSource | None = None,
    ledger: Ledger | ScratchLedger | None = None,
    analyst: str | None = None,
    dataset: str | None = None,
) -> Any:
    """The exponential mechanism: candidate ``i`` with probability ∝ ``exp(ε·score_i/(2Δ))``.

    Returns the index (or the key, when ``scores`` is a mapping) of the chosen candidate.
    Preconditions: each score has sensitivity ``Δ`` between neighbours; ``ε > 0``.
    Postcondition: ε-DP (McSherry & Talwar 2007). Sampled exactly by rejection: a uniformly
    proposed candidate is accepted with probability ``exp(-ε(max − score)/(2Δ))`` (an exact
    Bernoulli), so an accepted ``i`` has probability ∝ ``exp(ε·score_i/(2Δ))``. The best score
    gets the largest weight (the PHP seed's ``exp(ε(max − score)/2Δ)`` is inverted).
    Trials run in batches; the first accepted trial of the sequence is returned.
    """
    eps, sens = pure_epsilon(epsilon, "exponential"), _sensitivity(sensitivity)
    keys, n, weights = read_scores(scores, eps, sens)
    src = resolve_source(source)
    batch = max(64, min(4 * n, 1 << 16))

    def choose() -> int:
        while True:
            idx = uniform_int(n, batch, source=src)
            u = draw_u32(src, batch)
            chosen = first_accepted(idx, u, weights, src)
            if chosen is not None:
                return chosen

    held = _reserve(
        ledger, analyst, dataset, Budget(epsilon=eps), mechanism="exponential",
        sensitivity=sens, size=n, source=source,
    )  # fmt: skip
    chosen = _drawn(held, choose)
    return chosen if keys is None else keys[chosen]


def report_noisy_max(
    scores: Any,
    *,
    sensitivity: Number,
    epsilon: Number | Budget,
    source: RandomSource | None = None,
    ledger: Ledger | ScratchLedger | None = None,
    analyst: str | None = None,
    dataset: str | None = None,
) -> Any:
    """Report-noisy-max with exponential noise, sampled as permute-and-flip.

    Returns the index (or key) of the winner. Visits the candidates in a uniformly random
    order and stops at the first accepted, accepting ``i`` with probability
    ``exp(-ε(max − score_i)/(2Δ))`` (exact Bernoulli). Postcondition: ε-DP (McKenna & Sheldon
    2020); its output distribution equals report-noisy-max with Exponential(2Δ/ε) noise (Ding
    et al. 2021) and it is never worse than the exponential mechanism in expected score.
    """
    eps, sens = pure_epsilon(epsilon, "report_noisy_max"), _sensitivity(sensitivity)
    keys, n, weights = read_scores(scores, eps, sens)
    src = resolve_source(source)

    def choose() -> int:
        order = uniform_permutation(n, src)
        u = draw_u32(src, n)
        chosen = first_accepted(order, u, weights, src)
        if chosen is None:
            raise InternalError(
                "permute-and-flip rejected the best candidate, which has probability 1"
            )
        return chosen

    held = _reserve(
        ledger, analyst, dataset, Budget(epsilon=eps), mechanism="report_noisy_max",
        sensitivity=sens, size=n, source=source,
    )  # fmt: skip
    chosen = _drawn(held, choose)
    return chosen if keys is None else keys[chosen]


def randomized_response(
    values: Any,
    *,
    categories: Sequence[Hashable],
    epsilon: Number | Budget,
    source: RandomSource | None = None,
    ledger: Ledger | ScratchLedger | None = None,
    analyst: str | None = None,
    dataset: str | None = None,
) -> Release:
    """k-ary randomized response: keep the true category with probability ``e^ε/(e^ε + k − 1)``,
    else report one of the other ``k − 1`` uniformly.

    Sampled exactly by rejection: propose a uniform category; accept it outright if it is the
    true one, else with probability ``e^{-ε}``. Postcondition: each report is ε-DP for its
    value (local DP; Warner 1965, Kairouz et al. 2016). ``value`` has the input's shape.
    """
    eps = pure_epsilon(epsilon, "randomized_response")
    cats = list(categories)
    if len(cats) < 2 or len(set(cats)) != len(cats):
        raise InvalidArgumentError(
            f"categories must list at least two distinct values, got {categories!r}"
        )
    index = {c: i for i, c in enumerate(cats)}
    arr = np.asarray(values, dtype=object)
    scalar = arr.ndim == 0
    flat = arr.reshape(-1)
    try:
        true = np.array([index[v] for v in flat], dtype=np.int64)
    except (KeyError, TypeError) as exc:
        raise InvalidArgumentError(
            f"value {exc.args[0]!r} is not one of the categories {cats!r}; "
            "map unknown values to a declared category first"
        ) from exc
    src = resolve_source(source)
    bounds = exp_bounds(eps)
    lo, hi = bounds(32)

    def respond() -> NDArray[np.int64]:
        out = np.empty(true.size, dtype=np.int64)
        pending = np.arange(true.size)
        while pending.size:
            prop = uniform_int(len(cats), pending.size, source=src)
            u = draw_u32(src, pending.size).astype(np.int64)
            accept = (prop == true[pending]) | (u < lo)
            for j in np.flatnonzero(~accept & (u >= lo) & (u < hi)):
                accept[j] = LazyUniform(int(u[j]), 32, src).below(bounds)
            out[pending[accept]] = prop[accept]
            pending = pending[~accept]
        return out

    held = _reserve(
        ledger, analyst, dataset, Budget(epsilon=eps), mechanism="randomized_response",
        sensitivity=Fraction(1), size=true.size, source=source,
    )  # fmt: skip
    out = _drawn(held, respond)
    reported = np.empty(true.size, dtype=object)
    reported[:] = [cats[i] for i in out]
    return Release(
        value=reported[0] if scalar else reported.reshape(arr.shape),
        mechanism="randomized_response",
        scale=None,
        sensitivity=Fraction(1),
        loss=Budget(epsilon=eps),
        private=is_private(source),
    )


# --------------------------------------------------------------------------- object form


@dataclass(frozen=True)
class LaplaceMechanism:
    """``LaplaceMechanism(epsilon=0.5, sensitivity=1).add_noise(x)`` — the seeds' object form.

    The sensitivity is required and never estimated from data (see
    :func:`veil.sensitivity.probe` for why an observed one cannot be used).
    """

    epsilon: Number | Budget
    sensitivity: Number

    def __post_init__(self) -> None:
        pure_epsilon(self.epsilon, "LaplaceMechanism")
        _sensitivity(self.sensitivity)

    def release(
        self,
        values: Any,
        *,
        source: RandomSource | None = None,
        ledger: Ledger | ScratchLedger | None = None,
        analyst: str | None = None,
        dataset: str | None = None,
    ) -> Release:
        """:func:`laplace` with this mechanism's parameters (charged like it)."""
        return laplace(
            values,
            sensitivity=self.sensitivity,
            epsilon=self.epsilon,
            source=source,
            ledger=ledger,
            analyst=analyst,
            dataset=dataset,
        )

    def add_noise(
        self,
        values: Any,
        *,
        source: RandomSource | None = None,
        ledger: Ledger | ScratchLedger | None = None,
        analyst: str | None = None,
        dataset: str | None = None,
    ) -> Any:
        """The noisy value(s) (``release(values).value``)."""
        return self.release(
            values, source=source, ledger=ledger, analyst=analyst, dataset=dataset
        ).value


@dataclass(frozen=True)
class GaussianMechanism:
    """``GaussianMechanism(sensitivity=1, rho=0.5).add_noise(x)`` (or epsilon= and delta=)."""

    sensitivity: Number
    rho: Number | None = None
    epsilon: Number | Budget | None = None
    delta: Number | None = None

    def __post_init__(self) -> None:
        _sensitivity(self.sensitivity)
        _gaussian_params(self.rho, self.epsilon, self.delta)

    def release(
        self,
        values: Any,
        *,
        source: RandomSource | None = None,
        ledger: Ledger | ScratchLedger | None = None,
        analyst: str | None = None,
        dataset: str | None = None,
    ) -> Release:
        """:func:`gaussian` with this mechanism's parameters (charged like it)."""
        return gaussian(
            values,
            sensitivity=self.sensitivity,
            rho=self.rho,
            epsilon=self.epsilon,
            delta=self.delta,
            source=source,
            ledger=ledger,
            analyst=analyst,
            dataset=dataset,
        )

    def add_noise(
        self,
        values: Any,
        *,
        source: RandomSource | None = None,
        ledger: Ledger | ScratchLedger | None = None,
        analyst: str | None = None,
        dataset: str | None = None,
    ) -> Any:
        """The noisy value(s) (``release(values).value``)."""
        return self.release(
            values, source=source, ledger=ledger, analyst=analyst, dataset=dataset
        ).value
