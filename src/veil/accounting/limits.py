"""The privacy parameters one query or one release may spend, checked before anything is
charged.

ε lies in ``[1e-12, 1e4]`` (ρ in the matching ``[5e-25, 5e7]``) and δ below 1/2. Below the
range the noise is too large to sample exactly (a scale past the samplers' 2^48); above it the
noise is negligible and the answer protects no one; δ ≥ 1/2 allows releasing a person's row
outright. Sessions, :func:`veil.perturb` and the mechanisms of :mod:`veil.mechanisms`
all hold a loss to this one range.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from veil.accounting.budget import Budget, show
from veil.errors import InvalidArgumentError

__all__ = [
    "MAX_DELTA",
    "MAX_EPSILON",
    "MAX_RHO",
    "MIN_EPSILON",
    "MIN_RHO",
    "check_grant",
    "check_spend",
]

MIN_EPSILON = Fraction(1, 10**12)
MAX_EPSILON = Fraction(10**4)
MIN_RHO = MIN_EPSILON**2 / 2
MAX_RHO = MAX_EPSILON**2 / 2
MAX_DELTA = Fraction(1, 2)


def _outside(
    name: str, value: Fraction, low: Fraction, shown: str, what: str, written: str | None
) -> tuple[str, str]:
    """Why ``value`` is refused, for the side of its range (``shown``: ``"1e-12, 1e4"``, whose
    lower end is ``low``) it falls on: in Python's syntax and in the CLI's, the value as the
    caller ``written`` it when known."""
    lo, hi = shown.split(", ")
    if value < low:
        why = f"below {lo} the noise is too large to sample exactly"
    else:
        why = f"above {hi} the noise is negligible and the answer protects no one"
    rule = f"is outside the range {what} may spend, [{shown}]: {why}"
    text = written if written is not None else show(value)
    return f"{name}={text} {rule}", f"--{name} {text} {rule}"


def check_spend(
    budget: Budget, *, what: str = "one query", written: Mapping[str, str] | None = None
) -> None:
    """Refuse a loss outside the supported range (see the module docstring) with an
    :class:`InvalidArgumentError` that names the value, the side of the range it falls on and
    a value to pass instead (``cli`` carries it in the ``veil`` command's flags).
    ``what`` names the spender in the message ("one query", "one release"); ``written`` the
    parameters as the caller wrote them (``{"epsilon": "1e5"}``), quoted instead of the
    exact value's shortest form."""
    given = written or {}
    if budget.kind == "zcdp":
        rho = budget.rho or Fraction(0)
        if not MIN_RHO <= rho <= MAX_RHO:
            py, cli = _outside("rho", rho, MIN_RHO, "5e-25, 5e7", what, given.get("rho"))
            raise InvalidArgumentError(f"{py}; pass e.g. rho=0.05", cli=f"{cli}; e.g. --rho 0.05")
        return
    eps = budget.eps
    if eps <= 0:
        raise InvalidArgumentError(
            f"{what} needs epsilon > 0, got {budget}; pass epsilon=0.1 (for example)",
            cli=f"{what} needs --epsilon > 0, got {given.get('epsilon', show(eps))}; e.g. "
            "--epsilon 0.1",
        )
    if not MIN_EPSILON <= eps <= MAX_EPSILON:
        py, cli = _outside("epsilon", eps, MIN_EPSILON, "1e-12, 1e4", what, given.get("epsilon"))
        fix = "0.1" if eps < MIN_EPSILON else "1"
        raise InvalidArgumentError(
            f"{py}; pass e.g. epsilon={fix}", cli=f"{cli}; pass e.g. --epsilon {fix}"
        )
    if budget.delta >= MAX_DELTA:
        text = given.get("delta", show(budget.delta))
        rule = (
            " protects nothing (δ ≥ 1/2 allows releasing a person's row outright); pass a "
            "delta far below 1/n, e.g. "
        )
        raise InvalidArgumentError(
            f"delta={text}{rule}delta=1e-6", cli=f"--delta {text}{rule}--delta 1e-6"
        )


def check_grant(budget: Budget) -> None:
    """Refuse a grant no query could spend safely: δ ≥ 1/2 (queries are refused it too)."""
    if budget.delta >= MAX_DELTA:
        rule = (
            f"a grant of delta={show(budget.delta)} protects nothing (δ ≥ 1/2 allows releasing a "
            "person's row outright, and no query may spend it); grant a delta far below 1/n, "
            "e.g. "
        )
        raise InvalidArgumentError(
            f"{rule}Budget(epsilon=1, delta=1e-6)", cli=f"{rule}--delta 1e-6"
        )
