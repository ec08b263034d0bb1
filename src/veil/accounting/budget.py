"""Privacy losses in exact arithmetic.

A :class:`Budget` is one of three kinds of privacy loss:

- pure ε-DP: ``Budget(epsilon=e)``;
- approximate (ε, δ)-DP: ``Budget(epsilon=e, delta=d)`` with 0 < d < 1;
- ρ-zCDP: ``Budget(rho=r)``.

Every number is held as a :class:`fractions.Fraction`. A float argument is read as the decimal
it prints as (``0.1`` is exactly 1/10): the noise is calibrated from that same fraction, so the
loss charged is exactly the loss of the mechanism built from it, and ten charges of 0.1 add up to
exactly 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Literal

from veil.errors import InvalidArgumentError

__all__ = ["Budget", "Kind", "exact"]

Kind = Literal["pure", "approx", "zcdp"]
Number = int | float | Fraction | Decimal | str


def exact(value: Number, name: str) -> Fraction:
    """``value`` as an exact, finite Fraction; floats are read as the decimal they print as."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be a number, not the boolean {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgumentError(f"{name} must be finite, got {value!r}")
        return Fraction(repr(value))
    if isinstance(value, Fraction | int):
        return Fraction(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise InvalidArgumentError(f"{name} must be finite, got {value!r}")
        return Fraction(value)
    if isinstance(value, str):
        try:
            parsed = Fraction(value.strip())
        except (ValueError, ZeroDivisionError) as exc:
            raise InvalidArgumentError(
                f"{name} must be a number such as 0.5 or '1/3', got {value!r}"
            ) from exc
        return parsed
    raise InvalidArgumentError(f"{name} must be a number, got {value!r}")


@dataclass(frozen=True, init=False)
class Budget:
    """An exact privacy loss (or an allowance of one): pure ε, (ε, δ) or zCDP ρ."""

    kind: Kind
    epsilon: Fraction | None
    delta: Fraction
    rho: Fraction | None

    def __init__(
        self,
        *,
        epsilon: Number | None = None,
        delta: Number | None = None,
        rho: Number | None = None,
    ) -> None:
        if rho is not None:
            if epsilon is not None or delta is not None:
                raise InvalidArgumentError(
                    "a Budget is either Budget(rho=…) or Budget(epsilon=…, delta=…), "
                    f"not both (got epsilon={epsilon!r}, delta={delta!r}, rho={rho!r})"
                )
            r = exact(rho, "rho")
            if r < 0:
                raise InvalidArgumentError(f"rho must be ≥ 0, got {rho!r}")
            self._set("zcdp", None, Fraction(0), r)
            return
        if epsilon is None:
            raise InvalidArgumentError(
                "a Budget needs epsilon (pure or with delta) or rho; e.g. Budget(epsilon=1.0)"
            )
        e = exact(epsilon, "epsilon")
        if e < 0:
            raise InvalidArgumentError(f"epsilon must be ≥ 0, got {epsilon!r}")
        d = Fraction(0) if delta is None else exact(delta, "delta")
        if not 0 <= d < 1:
            raise InvalidArgumentError(
                f"delta must lie in [0, 1) (typically below 1/n), got {delta!r}"
            )
        self._set("pure" if d == 0 else "approx", e, d, None)

    def _set(
        self, kind: Kind, epsilon: Fraction | None, delta: Fraction, rho: Fraction | None
    ) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "rho", rho)

    def shortfall(self, remaining: Budget) -> str:
        """How much more than ``remaining`` this budget asks, in words (for error messages)."""
        if self.kind == "zcdp" and remaining.kind == "zcdp":
            return f"rho={float((self.rho or 0) - (remaining.rho or 0)):.6g}"
        parts = []
        if self.epsilon is not None and remaining.epsilon is not None:
            parts.append(f"epsilon={float(self.epsilon - remaining.epsilon):.6g}")
        if self.delta > remaining.delta:
            parts.append(f"delta={float(self.delta - remaining.delta):.3g}")
        return ", ".join(parts) or str(self)

    def __str__(self) -> str:
        if self.kind == "zcdp":
            assert self.rho is not None
            return f"ρ={float(self.rho):.6g}"
        assert self.epsilon is not None
        if self.kind == "pure":
            return f"ε={float(self.epsilon):.6g}"
        return f"(ε={float(self.epsilon):.6g}, δ={float(self.delta):.3g})"
