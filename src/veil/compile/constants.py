"""The numbers the lowering may write into SQL, and the range veil supports (DESIGN §1).

Whether a query fails is released to the analyst, so every constant of the generated SQL must
be decided — finite, exactly what the engine will read, small enough that no per-row
expression can overflow — *before* the budget is reserved, from the plan alone. This module is
the one place that knows those rules:

- **One value per constant.** A bound, per-group bound or histogram edge is held in the
  plan as the double the engine compares with (``veil.plan.numbers.engine_number``, applied
  when the plan node is built), so the calibration reads the very number :func:`literal`
  writes; a stratified sum's rows are also clamped in SQL to their stratum's calibrated range
  (``veil.compile.statistics``).
- **The supported range.** Every clamping bound and histogram edge lies in
  ``[-MAX_MAGNITUDE, MAX_MAGNITUDE]`` (1e100) and a bounded column's width ``upper - lower`` is
  at least ``MIN_WIDTH`` (10^-100) *and* its two ends are distinct doubles. Inside that range
  every intermediate value of the per-row expressions (``clamp(x) - centre``, its square over
  the fixed-point grid, the released sums and their error bars) is a finite double, so no
  value can make the engine or the release fail. :func:`check_bounds` / :func:`check_edges`
  refuse anything else with a :class:`veil.errors.BoundsError` that names the value and the
  range, before anything is charged.
- **Exact fixed-point grids.** A summed column is converted to integers
  ``round((clamp(x) - c) · 2^-e)`` with a power-of-two step ``2^e`` (:func:`fixed_point`):
  multiplying a double by a power of two is exact, so the only rounding is the subtraction's.
  The centre ``c`` is itself a double (:func:`nearest_double`).
- **Quantile buckets.** A continuous quantile cuts its bounds into ``quantile_buckets``
  cells of width ``(upper - lower) / quantile_buckets`` (2^32 by default; an integer column
  with integer bounds may use up to four times as many integer candidates). The engine
  returns only the occupied cells and the release works on runs of equal score
  (``veil.release.quantiles``), so the cost grows with the rows, not the grid.
  :func:`check_quantile_buckets` holds the count to ``[1, MAX_QUANTILE_BUCKETS]`` (2^40):
  a cell index stays far below 2^53 (exact in a double, and in the engine's BIGINT: past
  2^63 a row at the upper bound failed the cast). Inside it, with bounds in the supported
  range, the width lies in ``[9e-113, 2e100]``, so every constant of a cell (its width's
  reciprocal, half a width, the last cell's index) is a finite, non-zero double and the
  candidates ``lower + j·width`` are finite: no cell count or width can make the query fail.
- **Literals.** :func:`literal` is the only way the lowering emits a number: an integer below
  10^38 in magnitude as an exact integer literal, anything else as the nearest double in
  exponent form
  (``0.1e0``), which DuckDB and Spark both read as exactly that DOUBLE (never a DECIMAL, a
  BIGNUM or an infinity). A non-finite value is an :class:`veil.errors.InternalError` (the
  checks above should have refused it: this is a bug).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

from sqlglot import exp

from veil.accounting.budget import show
from veil.errors import BoundsError, InternalError, InvalidArgumentError
from veil.plan.nodes import ColumnBounds, GroupKey
from veil.plan.numbers import MAX_MAGNITUDE, MIN_WIDTH

__all__ = [
    "DEFAULT_QUANTILE_BUCKETS",
    "EXACT_INTEGER_LITERAL",
    "MAX_MAGNITUDE",
    "MAX_QUANTILE_BUCKETS",
    "MIN_WIDTH",
    "check_bounds",
    "check_edges",
    "check_quantile_buckets",
    "fixed_point",
    "literal",
    "nearest_double",
    "show",
]


MAX_QUANTILE_BUCKETS = 2**40
"""The most cells a continuous quantile's grid may have (``quantile_buckets``)."""

DEFAULT_QUANTILE_BUCKETS = 2**32
"""The default grid of a continuous quantile: 2^32 cells (a width of (upper − lower)/2^32)."""

EXACT_INTEGER_LITERAL = 10**38  # read exactly by every dialect veil lowers to


def nearest_double(x: Fraction | int | float) -> float:
    """The double nearest ``x`` (ties to even); ``InternalError`` if it is not finite."""
    try:
        value = float(x)
    except OverflowError:
        raise InternalError(f"the constant {x} is beyond the double range") from None
    if not math.isfinite(value):
        raise InternalError(f"the constant {x} is not a finite double")
    return value


def check_bounds(b: ColumnBounds) -> None:
    """Refuse bounds outside the supported range (see the module docstring).

    Raises ``BoundsError`` naming the column, its bounds and the rule. Decided from the plan
    alone, so it runs before anything is reserved.
    """
    lo, hi = b.lower, b.upper
    name = b.column
    given = f"bounds for {name!r} are ({show(lo)}, {show(hi)})"
    for end in (lo, hi):
        if abs(end) > MAX_MAGNITUDE:
            rule = f"{given}: veil supports bounds within ±1e100; rescale the column or narrow "
            raise BoundsError(
                f"{rule}the bounds, e.g. bounds={{{name!r}: (0, 1e6)}}",
                cli=f"{rule}the bounds, e.g. --bounds {name}=0:1000000",
            )
    if hi - lo < MIN_WIDTH or float(lo) >= float(hi):
        rule = (
            f"{given}: the upper bound must exceed the lower one by at least 1e-100 and be a "
            "different double; widen them, e.g. "
        )
        raise BoundsError(
            f"{rule}bounds={{{name!r}: ({show(lo)}, {show(lo + 1)})}}",
            cli=f"{rule}--bounds {name}={show(lo)}:{show(lo + 1)}",
        )


def check_quantile_buckets(buckets: object) -> int:
    """``buckets`` if it is an integer in ``[1, MAX_QUANTILE_BUCKETS]``; an
    ``InvalidArgumentError`` saying the range otherwise (in the CLI's syntax too). Decided from
    the argument alone, before anything is reserved."""
    if isinstance(buckets, int) and not isinstance(buckets, bool):
        if 1 <= buckets <= MAX_QUANTILE_BUCKETS:
            return buckets
        given = f"{buckets:.3g}" if abs(buckets) >= 10**9 else str(buckets)
    else:
        given = f"{type(buckets).__name__} {str(buckets)[:40]}"
    rule = (
        f"must be an integer from 1 to {MAX_QUANTILE_BUCKETS} (the candidates of a continuous "
        f"quantile), got {given}; e.g."
    )
    raise InvalidArgumentError(
        f"quantile_buckets {rule} quantile_buckets={DEFAULT_QUANTILE_BUCKETS}",
        cli=f"--quantile-buckets {rule} --quantile-buckets {DEFAULT_QUANTILE_BUCKETS}",
    )


def check_edges(key: GroupKey) -> None:
    """Refuse histogram edges outside ±1e100, or that are not distinct as doubles."""
    if key.edges is None:
        return
    for edge in key.edges:
        if abs(edge) > MAX_MAGNITUDE:
            raise BoundsError(
                f"histogram edge {show(edge)} of {key.column!r} is outside the supported range "
                "±1e100; use edges within it"
            )
    doubles = [float(e) for e in key.edges]
    for a, b in itertools.pairwise(doubles):
        if a >= b:
            raise BoundsError(
                f"histogram edges {a!r} and {b!r} of {key.column!r} are the same double; "
                "space the edges further apart"
            )


def fixed_point(width: Fraction, limit: int) -> tuple[Fraction, int]:
    """The grid of a summed column: ``(2^e, n)`` with ``e`` the smallest integer such that
    ``width / 2^e ≤ limit``, and ``n = ceil(width / 2^e) ≤ limit`` the largest integer a row
    can contribute.

    Precondition: ``MIN_WIDTH ≤ width ≤ 2·MAX_MAGNITUDE``, ``limit ≥ 1``. Postcondition:
    ``(n - 1)·2^e < width ≤ n·2^e``, so the per-row integers use the grid's full resolution
    and ``1/2^e`` is an exact double.
    """
    if width <= 0 or limit < 1:
        raise InternalError(f"no fixed-point grid for width {width} and limit {limit}")
    ratio = width / limit
    e = ratio.numerator.bit_length() - ratio.denominator.bit_length()
    # now 2^(e-1) < ratio < 2^(e+1): settle on the smallest e with ratio ≤ 2^e
    while Fraction(2) ** e < ratio:
        e += 1
    while Fraction(2) ** (e - 1) >= ratio:
        e -= 1
    step = Fraction(2) ** e
    n = math.ceil(width / step)
    return step, n


def literal(x: Fraction | int | float) -> exp.Expr:
    """The SQL literal of ``x``: integers below 10^38 in magnitude exactly, everything else as
    the nearest double in exponent form (read as DOUBLE by every dialect veil lowers to)."""
    if isinstance(x, bool):
        raise InternalError(f"a boolean {x!r} where a number was expected")
    if isinstance(x, int) or (isinstance(x, Fraction) and x.denominator == 1):
        n = int(x)
        if abs(n) < EXACT_INTEGER_LITERAL:
            # exact: DuckDB reads it as BIGINT or HUGEINT, Spark as BIGINT or DECIMAL(38, 0);
            # never rounded to a double, which would make an IN list match values it does not
            # hold (2^64 − 1000 equals the double nearest 2^64 − 1)
            lit = exp.Literal.number(abs(n))
            return exp.Neg(this=lit) if n < 0 else lit
    value = nearest_double(x)
    text = repr(abs(value))
    if "e" not in text and "E" not in text:
        text += "e0"
    lit = exp.Literal.number(text)
    return exp.Neg(this=lit) if math.copysign(1.0, value) < 0 else lit
