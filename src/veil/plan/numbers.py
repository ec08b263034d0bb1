"""One value per constant (DESIGN §3): the exact number the engine computes with.

A bound, a histogram edge or a per-group bound is written into SQL as a literal and read by the
calibration as an exact number. If the two were different numbers — a decimal the analyst
wrote, and the double nearest it that the engine compares rows with — a row could land in a bin
(or past a clamp) that the noise was not calibrated for: bounds ``44 ± 2^-40`` and two edges
either side of ``44 + ulp(44)/2`` put every row of age 44.0 in a bin calibrated for two grid
steps, moving its sum by 2^21 of them. So every such number is taken *once*, when the plan
node is built, as the value the engine will use — the double nearest it (ties to even, as the
engines parse a literal) — and the plan, the calibration, the lowering and the cache key all
hold that one value. An integer of magnitude up to 2^53 is its own double; a larger integer
becomes the (integral) double nearest it, which :func:`veil.compile.constants.literal` then
writes as the exact integer it is, so an integer column and a double column compare with the
same number.

A number beyond ±:data:`MAX_MAGNITUDE` is kept as given: it has no double form every
per-row expression can use, and ``veil.compile.constants.check_bounds`` / ``check_edges``
refuse it before anything is reserved, naming the value as written.
"""

from __future__ import annotations

from fractions import Fraction

__all__ = ["MAX_MAGNITUDE", "MIN_WIDTH", "engine_number", "number_text"]

MAX_MAGNITUDE = Fraction(1e100)
"""The largest |bound| or |edge| veil accepts: 1e100, the double nearest 10^100 (which a
bound of 10^100, as written, becomes)."""

MIN_WIDTH = Fraction(1, 10**100)
"""The smallest width ``upper - lower`` of a bounded column veil accepts (10^-100)."""


def engine_number(value: Fraction) -> Fraction:
    """The exact value the engine computes with where the lowering writes ``value``.

    Contract: for ``|value| ≤ MAX_MAGNITUDE`` the result is a finite double (as an exact
    Fraction), the one nearest ``value`` (ties to even; ``value`` itself when it is a double),
    so ``Fraction(float(result)) == result`` and ``literal(result)`` is read by every engine as
    exactly ``result``. The map is monotone (``a ≤ b`` ⇒ ``f(a) ≤ f(b)``) and idempotent.
    Beyond that range ``value`` is returned unchanged (refused later, free).
    """
    if abs(value) > MAX_MAGNITUDE:
        return value
    # int / int true division is correctly rounded (to nearest, ties to even)
    return Fraction(value.numerator / value.denominator)


def number_text(value: Fraction) -> str:
    """The text an engine number is stored as (the catalog's bounds): an integer's digits, a
    double's shortest repr (``0.1`` for the double 0.1 — read back, :func:`engine_number`
    gives that double again), else ``p/q`` (a number beyond the supported range).

    Contract: ``engine_number(Fraction(number_text(x))) == x`` for every ``x`` that
    :func:`engine_number` returns."""
    if value.denominator == 1:
        return str(value.numerator)
    if abs(value) <= MAX_MAGNITUDE:
        double = value.numerator / value.denominator
        if Fraction(double) == value:
            return repr(double)
    return f"{value.numerator}/{value.denominator}"
