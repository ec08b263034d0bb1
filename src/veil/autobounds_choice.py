"""The public grid and the selection of ``bounds="auto"`` (:mod:`veil.autobounds`, whose
docstring holds the design, the contract and the utility statement): pure functions of the
column's type, a declared range and the released noisy counts — post-processing only. And
what the choice gives, :class:`ChosenBounds`: values a service's client reads back too, so
this module imports neither the plan nor an engine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from veil.accounting.budget import Budget
from veil.errors import InternalError

if TYPE_CHECKING:
    from veil.plan.nodes import KeyValue

__all__ = [
    "BETA",
    "GROWTH",
    "HIGH",
    "LOW",
    "Choice",
    "ChosenBounds",
    "GroupBounds",
    "choose",
    "grid",
    "percent",
    "spanning",
    "threshold",
]

BETA = Fraction(1, 20)
"""β: the chance that an empty bin's noise alone passes the threshold (all bins together)."""
HIGH = 62
"""The grid's outermost edges are ±2^HIGH (values beyond fall outside every bin)."""
LOW = -16
"""A real column's finest power of two: ``[0, 2^LOW)`` is the bin of the values near 0."""


# -- the public grid ------------------------------------------------------------------------
def grid(integer: bool, outer: tuple[Fraction, Fraction] | None = None) -> tuple[Fraction, ...]:
    """The bin edges for a column: signed powers of two from ``2^0`` (integer) or ``2^LOW``
    (real) up to ``2^HIGH``, with 0; cut to ``outer`` = (lower, upper) when declared (its ends
    become the outermost edges). Public: a function of the type and the declared range."""
    low = 0 if integer else LOW
    powers = [Fraction(2) ** k for k in range(low, HIGH + 1)]
    edges = sorted({Fraction(0), *powers, *(-p for p in powers)})
    if outer is None:
        return tuple(edges)
    lo, hi = outer
    if lo >= hi:
        return (lo, hi)  # one point: nothing to find (refused before any step, see _steps)
    inside = [e for e in edges if lo < e < hi]
    return (lo, *inside, hi)


def threshold(scale: Fraction, bins: int) -> int:
    """τ = ⌈s·ln(B/β)⌉: an empty bin's discrete-Laplace noise (scale ``s``) reaches τ with
    probability ≤ e^{−τ/s} ≤ β/B, so all ``bins`` together with probability ≤ β."""
    if scale <= 0 or bins < 1:
        raise InternalError(f"a threshold needs scale > 0 and bins ≥ 1, got {scale}, {bins}")
    return max(1, math.ceil(float(scale) * math.log(bins / float(BETA))))


@dataclass(frozen=True)
class Choice:
    """The post-processed choice from one noisy histogram."""

    lower: Fraction
    upper: Fraction
    below: float  # noisy estimate of the share of counted rows below ``lower``
    above: float  # … above ``upper``
    bar: float  # ≈95 % half-width of below + above (normal approximation)
    rows: int  # the noisy total count (clipped at 0)
    occupied: int  # how many bins passed the threshold


def choose(
    edges: Sequence[Fraction], counts: Sequence[int], tau: int, scale: Fraction = Fraction(1)
) -> Choice:
    """The bounds from noisy ``counts`` of the bins between ``edges`` (post-processing only;
    total: any integers give a pair lower < upper); ``scale`` the counts' Laplace scale, for
    the bar of the clamped share (a normal approximation of the summed noise, 95 %)."""
    if len(edges) != len(counts) + 1 or not counts:
        raise InternalError(f"{len(counts)} counts for {len(edges)} edges")
    occupied = [i for i, c in enumerate(counts) if c >= tau]
    # the seed: the bin with the largest noisy count (the first of ties), occupied or not
    seed = max(range(len(counts)), key=lambda i: (counts[i], -i))
    first, last = _grow(edges, occupied, seed)
    first, last = _toward_zero(edges, first, last)
    return spanning(edges, counts, first, last, scale, len(occupied))


def spanning(
    edges: Sequence[Fraction],
    counts: Sequence[int],
    first: int,
    last: int,
    scale: Fraction,
    occupied: int = 0,
) -> Choice:
    """The choice of bins ``first..last`` with the clamped shares the noisy ``counts`` of the
    other bins estimate (post-processing only)."""
    if not 0 <= first <= last < len(counts):
        raise InternalError(f"bins {first}..{last} of {len(counts)}")
    total = sum(counts)
    below = sum(counts[:first])
    above = sum(counts[last + 1 :])
    share = (lambda part: min(1.0, max(0.0, part / total))) if total > 0 else (lambda _: 0.0)
    outside = first + len(counts) - 1 - last  # bins summed into the two estimates
    bar = 1.96 * math.sqrt(outside * _variance(scale)) / total if total > 0 and outside else 0.0
    return Choice(
        edges[first],
        edges[last + 1],
        share(below),
        share(above),
        min(1.0, bar),
        max(0, total),
        occupied,
    )


GROWTH = 4
"""Absorbing an occupied bin may widen the bounds at most this many times (see :func:`_grow`)."""


def _grow(edges: Sequence[Fraction], occupied: Sequence[int], seed: int) -> tuple[int, int]:
    """Bins ``first..last``: from ``seed``, absorb the nearest occupied bin on either side
    (the one that widens less first) while absorbing it makes the range at most
    :data:`GROWTH` times wider. A neighbouring bin always qualifies (on the log grid it at
    most triples the width), so data spread over adjacent bins is taken whole; an isolated
    far bin — the rare empty bin whose noise passed τ, or a handful of outliers — is not, so
    it cannot blow the bounds (and the noise) up by orders of magnitude."""
    first = last = seed
    while True:
        lower = [i for i in occupied if i < first]
        upper = [i for i in occupied if i > last]
        width = edges[last + 1] - edges[first]
        options = []
        if lower:
            options.append((edges[last + 1] - edges[lower[-1]], lower[-1], last))
        if upper:
            options.append((edges[upper[0] + 1] - edges[first], first, upper[0]))
        options = [o for o in options if o[0] <= GROWTH * width]
        if not options:
            return first, last
        _, first, last = min(options)


def _variance(scale: Fraction) -> float:
    """The variance 2a/(1 − a)² of discrete Laplace noise of scale ``s`` (a = e^{−1/s})."""
    a = math.exp(-1 / float(scale))
    return 2 * a / (1 - a) ** 2


def _toward_zero(edges: Sequence[Fraction], first: int, last: int) -> tuple[int, int]:
    """Bins ``first..last`` widened to reach 0 (or the grid's edge nearest 0 on their side)
    when that widens them by at most a third: on a log grid the sparse bins near 0 would be
    clamped otherwise, and closing that gap costs little noise (income: [8192, 65536] becomes
    [0, 65536]; a year's [1024, 2048] stays)."""
    lo, hi = edges[first], edges[last + 1]
    width = hi - lo
    if lo > 0:
        z = next(i for i, e in enumerate(edges) if e >= 0)
        if edges[z] < lo and (hi - edges[z]) * 3 <= width * 4:
            return z, last
    elif hi < 0:
        z = max(i for i, e in enumerate(edges) if e <= 0)  # an edge index: bins end at z − 1
        if edges[z] > hi and (edges[z] - lo) * 3 <= width * 4:
            return first, z - 1
    return first, last


def percent(share: float) -> str:
    """A share in [0, 1] as a percentage for people: ``0.25 %``, ``6.7 %``, ``100 %``."""
    value = 100 * share
    return f"{value:.0f} %" if value >= 10 else f"{value:.2g} %"


# -- what the choice gives ------------------------------------------------------------------
@dataclass(frozen=True)
class GroupBounds:
    """The bounds chosen for one group of a per-group request (see :class:`ChosenBounds`)."""

    label: KeyValue
    lower: Fraction
    upper: Fraction
    clamped_below: float
    clamped_above: float
    clamped_bar: float
    rows: int

    @property
    def clamped(self) -> float:
        return self.clamped_below + self.clamped_above

    @property
    def pair(self) -> tuple[Fraction, Fraction]:
        return (self.lower, self.upper)


@dataclass(frozen=True)
class ChosenBounds:
    """The bounds chosen for one column, and what finding them cost.

    ``loss`` is the bounds step's privacy loss and ``cost`` what it was charged now (zero when
    answered from the cache, ``cached``); ``clamped`` the noisy estimate of the share of the
    column's counted rows that fall outside ``[lower, upper]`` (``clamped_below`` and
    ``clamped_above`` the two sides, ``clamped_bar`` its ≈95 % half-width); ``outer`` the
    declared range it stayed within, if any; ``bins`` and ``threshold`` the grid's size and
    the occupied-bin threshold τ. Per group (``key`` the GROUP BY key's alias): ``groups``
    holds each group's choice in the key's order, ``lower``/``upper`` are their hull and the
    clamped shares are over all the groups' counted rows, each clamped to its own bounds."""

    column: str
    lower: Fraction
    upper: Fraction
    loss: Budget
    cost: Budget
    cached: bool
    clamped_below: float
    clamped_above: float
    clamped_bar: float
    rows: int
    bins: int
    threshold: int
    outer: tuple[Fraction, Fraction] | None = None
    key: str | None = None
    groups: tuple[GroupBounds, ...] = ()

    @property
    def clamped(self) -> float:
        return self.clamped_below + self.clamped_above

    @property
    def pair(self) -> tuple[Fraction, Fraction]:
        return (self.lower, self.upper)

    @property
    def value(self) -> tuple[Fraction, Fraction] | dict[KeyValue, tuple[Fraction, Fraction]]:
        """The bounds as a query takes them: the pair, or ``{group: (lower, upper), …}``."""
        if self.key is None:
            return self.pair
        return {g.label: g.pair for g in self.groups}

    def line(self) -> str:
        """One line for a result's notes."""
        state = "from the cache, free" if self.cached else f"charged {self.cost}"
        clamped = (
            f"≈{percent(self.clamped)} ± {percent(self.clamped_bar)} of its rows expected "
            f"clamped: {percent(self.clamped_below)} below, {percent(self.clamped_above)} above"
        )
        if self.key is None:
            ranges = f"[{float(self.lower):g}, {float(self.upper):g}]"
        else:
            shown = ", ".join(
                f"{g.label}: [{float(g.lower):g}, {float(g.upper):g}]" for g in self.groups[:16]
            )
            more = f", … ({len(self.groups)} groups)" if len(self.groups) > 16 else ""
            ranges = f"per group of {self.key!r} {{{shown}{more}}}"
        return f"auto bounds for {self.column!r}: {ranges} ({state}; {clamped})"
