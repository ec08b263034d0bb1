"""Privacy losses in exact arithmetic.

A :class:`Budget` is one of three kinds of privacy loss:

- pure ε-DP: ``Budget(epsilon=e)``;
- approximate (ε, δ)-DP: ``Budget(epsilon=e, delta=d)`` with 0 < d < 1;
- ρ-zCDP: ``Budget(rho=r)``.

Every number is held as a :class:`fractions.Fraction`. A float argument is read as the decimal
it prints as (``0.1`` is exactly 1/10): the noise is calibrated from that same fraction, so the
loss charged is exactly the loss of the mechanism built from it, and ten charges of 0.1 add up to
exactly 1.

>>> sum([Budget(epsilon=0.1)] * 10, Budget.zero("pure")) == Budget(epsilon=1)
True
>>> Budget(epsilon=1).to_zcdp()
Budget(rho=0.5)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Literal

from veil.errors import InvalidArgumentError

__all__ = ["Budget", "Kind", "Number", "exact", "show"]

Kind = Literal["pure", "approx", "zcdp"]
Number = int | float | Fraction | Decimal | str


def exact(value: Number, name: str) -> Fraction:
    """``value`` as an exact, finite Fraction; floats are read as the decimal they print as."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be a number, not the boolean {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidArgumentError(f"{name} must be finite, got {value!r}")
        return Fraction(float.__repr__(value))  # numpy.float64's own repr names its type
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


def _show(value: Fraction) -> str:
    """A fraction as a short exact literal: ``0.1`` when its decimal is short, else ``'1/3'``."""
    den = value.denominator
    twos = fives = 0
    while den % 2 == 0:
        den //= 2
        twos += 1
    while den % 5 == 0:
        den //= 5
        fives += 1
    if den == 1 and max(twos, fives) <= 17:
        text = format(Decimal(value.numerator) / Decimal(value.denominator), "f")
        if "." in text:
            text = text.rstrip("0").rstrip(".")
        # unquoted only if it reads back exactly: a float literal is read as the decimal its
        # repr prints (0.50000762939453125 would come back as 0.5000076293945312)
        try:
            if Fraction(repr(float(text))) == value:
                return text
        except (ValueError, OverflowError):  # beyond the double range: quote it
            pass
        return f"'{text}'"
    return f"'{value}'"


def show(x: Fraction) -> str:
    """``x`` as a person wrote it: an integer, the shortest decimal of a float (also when
    ``x`` is exactly a double, as bounds and edges are: ``veil.plan.numbers``), or ``p/q``."""
    if x.denominator == 1 and abs(x.numerator) < 10**17:
        return str(x.numerator)
    try:
        text = repr(float(x))
    except OverflowError:
        text = "inf"
    if text not in ("inf", "-inf") and (Fraction(text) == x or Fraction(float(text)) == x):
        return text  # what a float prints as (0.1, 1e+300, 5e-324), or the double x is
    if text in ("0.0", "-0.0"):  # below every double: show its order of magnitude
        digits = len(str(x.denominator // abs(x.numerator)))
        return f"{'-' if x < 0 else ''}≈1e-{digits - 1}"
    if text in ("inf", "-inf"):
        digits = len(str(abs(x.numerator) // x.denominator))
        return f"{'-' if x < 0 else ''}≈1e{digits - 1}"
    if x.denominator == 1 or len(str(x.denominator)) > 17:
        return f"≈{float(x):.6g}"
    return f"{x.numerator}/{x.denominator}"


def _precise(value: Fraction) -> str:
    """Enough digits to compare two nearby budgets: exact when the decimal is short, else
    17 significant digits (``0.9999997``, ``0.33333333333333331``)."""
    if value.denominator == 1 and abs(value.numerator) < 10**17:
        return str(value.numerator)
    try:
        shortest = repr(float(value))
    except OverflowError:
        shortest = ""
    if shortest and Fraction(shortest) == value:
        return shortest  # 0.9999997, 3e-07, 1e-06
    text = _show(value)
    return f"{float(value):.17g}" if text.startswith("'") else text


@dataclass(frozen=True, init=False)
class Budget:
    """An exact privacy loss (or an allowance of one): pure ε, (ε, δ) or zCDP ρ.

    Budgets add (sequential composition), scale by a non-negative number (``3 * b`` is three
    sequential copies), convert (:meth:`to_zcdp`, :meth:`to_approx`) and compare by implication:
    ``a <= b`` when every mechanism with loss ``a`` also has loss ``b``.
    """

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
                raise InvalidArgumentError(f"rho must be ≥ 0, got {show(r)}")
            self._set("zcdp", None, Fraction(0), r)
            return
        if epsilon is None:
            raise InvalidArgumentError(
                "a Budget needs epsilon (pure or with delta) or rho; e.g. Budget(epsilon=1.0)"
            )
        e = exact(epsilon, "epsilon")
        if e < 0:
            raise InvalidArgumentError(f"epsilon must be ≥ 0, got {show(e)}")
        d = Fraction(0) if delta is None else exact(delta, "delta")
        if not 0 <= d < 1:
            raise InvalidArgumentError(
                f"delta must lie in [0, 1) (typically far below 1/n), got {show(d)}"
            )
        self._set("pure" if d == 0 else "approx", e, d, None)

    def _set(
        self, kind: Kind, epsilon: Fraction | None, delta: Fraction, rho: Fraction | None
    ) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "rho", rho)

    # -- constructors and accessors -------------------------------------------------------

    @staticmethod
    def zero(kind: Kind = "pure") -> Budget:
        """No privacy loss, of the given kind (``"approx"`` gives ε = 0, δ = 0, i.e. pure)."""
        return Budget(rho=0) if kind == "zcdp" else Budget(epsilon=0)

    @property
    def eps(self) -> Fraction:
        """ε of a pure or approximate budget; a zCDP budget has none (use :meth:`to_approx`)."""
        if self.epsilon is None:
            raise InvalidArgumentError(
                f"{self} is a zCDP budget and has no epsilon; convert it with .to_approx(delta)"
            )
        return self.epsilon

    @property
    def rho_value(self) -> Fraction:
        """ρ of a zCDP budget; a pure budget gives ε²/2; an (ε, δ) budget has none."""
        return self.to_zcdp().rho or Fraction(0)

    def is_zero(self) -> bool:
        """Whether this is no loss at all."""
        return (self.rho or 0) == 0 and (self.epsilon or 0) == 0 and self.delta == 0

    def to_dict(self) -> dict[str, str]:
        """An exact, JSON-friendly form: ``{"kind": "pure", "epsilon": "1/10"}``."""
        if self.kind == "zcdp":
            return {"kind": "zcdp", "rho": str(self.rho)}
        out = {"kind": self.kind, "epsilon": str(self.epsilon)}
        if self.kind == "approx":
            out["delta"] = str(self.delta)
        return out

    @staticmethod
    def from_dict(data: Mapping[str, object]) -> Budget:
        """The inverse of :meth:`to_dict`."""
        kind = data.get("kind")

        def num(key: str) -> Number:
            value = data.get(key)
            if not isinstance(value, int | float | str | Fraction | Decimal):
                raise InvalidArgumentError(f"a {kind} budget needs {key!r}, got {dict(data)!r}")
            return value

        if kind == "zcdp":
            return Budget(rho=num("rho"))
        if kind == "pure":
            return Budget(epsilon=num("epsilon"))
        if kind == "approx":
            return Budget(epsilon=num("epsilon"), delta=num("delta"))
        raise InvalidArgumentError(
            f"budget kind must be 'pure', 'approx' or 'zcdp', got {kind!r} in {dict(data)!r}"
        )

    # -- conversions ----------------------------------------------------------------------

    def to_zcdp(self) -> Budget:
        """This loss as ρ-zCDP: pure ε gives ρ = ε²/2 (Bun & Steinke 2016, Prop. 1.4).

        An (ε, δ) loss with δ > 0 implies no zCDP guarantee and raises.
        """
        if self.kind == "zcdp":
            return self
        if self.kind == "approx":
            raise InvalidArgumentError(
                f"{self} cannot be expressed as zCDP (δ > 0 implies no ρ); "
                "keep it as (ε, δ) or use a zCDP mechanism"
            )
        e = self.eps
        return Budget(rho=e * e / 2)

    def to_approx(self, delta: Number) -> Budget:
        """This loss as (ε, δ)-DP with the given δ.

        Pure ε is (ε, δ) for every δ; ρ-zCDP uses the conversion of Canonne, Kamath & Steinke
        (2020, Prop. 12 / Cor. 13), tighter than Bun–Steinke's ρ + 2·sqrt(ρ·ln(1/δ)), with ε
        rounded *up* (see :func:`veil.accounting.conversions.zcdp_to_approx`). An (ε, δ')
        budget converts only to a δ ≥ δ'.
        """
        d = exact(delta, "delta")
        if not 0 < d < 1:
            raise InvalidArgumentError(f"delta must lie in (0, 1), got {delta!r}")
        if self.kind == "zcdp":
            from veil.accounting.conversions import zcdp_to_approx

            return zcdp_to_approx(self.rho or Fraction(0), d)
        if d < self.delta:
            raise InvalidArgumentError(
                f"{self} cannot be weakened to delta={delta!r}, which is smaller than its δ"
            )
        return Budget(epsilon=self.eps, delta=d)

    # -- arithmetic -----------------------------------------------------------------------

    def __add__(self, other: object) -> Budget:
        """Sequential composition of two losses (exact).

        pure + pure is pure; pure/approx + approx is approx (ε and δ add); zCDP + zCDP and
        pure + zCDP are zCDP (ρ adds, pure ε counts as ε²/2). An (ε, δ) loss and a zCDP loss
        have no exact common form: compose them with ``compose(..., delta=…)``.
        """
        if not isinstance(other, Budget):
            return NotImplemented
        if self.kind == "zcdp" or other.kind == "zcdp":
            if self.kind == "approx" or other.kind == "approx":
                raise InvalidArgumentError(
                    f"cannot add the (ε, δ) loss and the zCDP loss in {self} + {other} exactly; "
                    "use veil.accounting.compose([...], delta=…) to convert the zCDP part"
                )
            return Budget(rho=self.rho_value + other.rho_value)
        return Budget(epsilon=self.eps + other.eps, delta=self.delta + other.delta)

    def __radd__(self, other: object) -> Budget:
        if other == 0:  # so that sum(budgets) works
            return self
        if isinstance(other, Budget):
            return other.__add__(self)
        return NotImplemented

    def __mul__(self, factor: object) -> Budget:
        """Every component times a non-negative number: ``k * b`` is ``b`` composed k times."""
        if not isinstance(factor, int | float | Fraction | Decimal | str) or isinstance(
            factor, bool
        ):
            return NotImplemented
        f = exact(factor, "factor")
        if f < 0:
            raise InvalidArgumentError(
                f"a budget can only be scaled by a factor ≥ 0, got {factor!r}"
            )
        if self.kind == "zcdp":
            return Budget(rho=(self.rho or Fraction(0)) * f)
        return Budget(epsilon=self.eps * f, delta=self.delta * f)

    __rmul__ = __mul__

    def __truediv__(self, divisor: object) -> Budget:
        """Every component divided by a positive number: ``b / k`` is an even share of ``b``."""
        if not isinstance(divisor, int | float | Fraction | Decimal | str) or isinstance(
            divisor, bool
        ):
            return NotImplemented
        d = exact(divisor, "divisor")
        if d <= 0:
            raise InvalidArgumentError(
                f"a budget can only be divided by a number > 0, got {divisor!r}"
            )
        return self * (1 / d)

    # -- order: a <= b when a mechanism with loss a also has loss b ----------------------

    def __le__(self, other: object) -> bool:
        if not isinstance(other, Budget):
            return NotImplemented
        if other.kind == "zcdp":
            if self.kind == "approx":
                return self.eps == 0 and self.delta == 0
            return self.rho_value <= (other.rho or 0)
        if self.kind == "zcdp":
            if (self.rho or 0) == 0:
                return True
            if other.kind == "pure":
                return False
            return self.to_approx(other.delta).eps <= other.eps
        return self.eps <= other.eps and self.delta <= other.delta

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, Budget):
            return NotImplemented
        return other.__le__(self)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Budget):
            return NotImplemented
        return self.__le__(other) and self != other

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, Budget):
            return NotImplemented
        return other.__lt__(self)

    # -- formatting -----------------------------------------------------------------------

    def shortfall(self, remaining: Budget) -> str:
        """How much more than ``remaining`` this budget asks, in words (for error messages),
        with enough digits to explain a refusal by a hair."""
        if remaining.kind == "zcdp" and self.kind != "approx":
            return f"ρ={_precise(self.rho_value - (remaining.rho or 0))}"
        if self.kind == "zcdp":
            return (
                f"ρ={_precise(self.rho or Fraction(0))} against an (ε, δ) remainder of {remaining}"
            )
        parts = []
        if remaining.epsilon is not None and self.eps > remaining.epsilon:
            parts.append(f"ε={_precise(self.eps - remaining.epsilon)}")
        if self.delta > remaining.delta:
            parts.append(f"δ={_precise(self.delta - remaining.delta)}")
        return ", ".join(parts) or "nothing in ε or δ alone (the combination does not fit)"

    def precise(self) -> str:
        """Like ``str(budget)`` with every digit needed to compare it with a nearby budget."""
        if self.kind == "zcdp":
            return f"ρ={_precise(self.rho or Fraction(0))}"
        if self.kind == "pure":
            return f"ε={_precise(self.eps)}"
        return f"(ε={_precise(self.eps)}, δ={_precise(self.delta)})"

    def __repr__(self) -> str:
        if self.kind == "zcdp":
            return f"Budget(rho={_show(self.rho or Fraction(0))})"
        if self.kind == "pure":
            return f"Budget(epsilon={_show(self.eps)})"
        return f"Budget(epsilon={_show(self.eps)}, delta={_show(self.delta)})"

    def __str__(self) -> str:
        if self.kind == "zcdp":
            return f"ρ={float(self.rho or 0):.6g}"
        if self.kind == "pure":
            return f"ε={float(self.eps):.6g}"
        return f"(ε={float(self.eps):.6g}, δ={float(self.delta):.3g})"
