"""Sensitivity diagnostics.

The seeds' ``calculate_sensitivity`` measures ``max ‖f(D) − f(D')‖`` over a few example pairs.
That is a *lower bound* on the true sensitivity (the worst pair may not be among the examples),
so calibrating noise to it can break the privacy guarantee. :func:`probe` keeps the
measurement for what it is — a diagnostic — and returns an :class:`ObservedSensitivity`, which
every mechanism refuses as a ``sensitivity=`` argument. Real sensitivities come from declared
bounds and contribution limits (DESIGN §1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from veil.errors import InvalidArgumentError

__all__ = ["ObservedSensitivity", "probe"]


@dataclass(frozen=True)
class ObservedSensitivity:
    """The largest change observed over example neighbouring pairs: a lower bound only.

    It is deliberately not a number: mechanisms raise when given one.
    """

    lower_bound: float
    norm: Literal["l1", "l2"]
    pairs: int

    def __str__(self) -> str:
        return (
            f"observed {self.norm} sensitivity ≥ {self.lower_bound:g} over {self.pairs} "
            "example pairs (a lower bound; not usable to calibrate noise)"
        )


def probe(
    query_fn: Callable[[Any], Any],
    dataset_pairs: Iterable[tuple[Any, Any]],
    *,
    norm: Literal["l1", "l2"] = "l1",
) -> ObservedSensitivity:
    """The largest ``‖query_fn(D) − query_fn(D')‖`` over the given pairs, as a lower bound.

    Use it to sanity-check a derived sensitivity (an observed value above the declared one
    means the declaration is wrong); never to calibrate noise.
    """
    if norm not in ("l1", "l2"):
        raise InvalidArgumentError(f"norm must be 'l1' or 'l2', got {norm!r}")
    worst, count = 0.0, 0
    for pair in dataset_pairs:
        try:
            d1, d2 = pair
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"dataset_pairs must yield (D, D') pairs of neighbouring datasets, got {pair!r}"
            ) from exc
        diff = np.asarray(query_fn(d1), dtype=np.float64) - np.asarray(
            query_fn(d2), dtype=np.float64
        )
        size = float(np.sum(np.abs(diff)) if norm == "l1" else np.sqrt(np.sum(diff * diff)))
        if not math.isfinite(size):
            raise InvalidArgumentError(f"query_fn returned a non-finite difference ({size})")
        worst = max(worst, size)
        count += 1
    if count == 0:
        raise InvalidArgumentError("dataset_pairs is empty; give at least one (D, D') pair")
    return ObservedSensitivity(lower_bound=worst, norm=norm, pairs=count)
