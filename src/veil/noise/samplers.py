"""Exact, vectorised samplers: geometric, discrete Laplace, discrete Gaussian.

Small and moderate scales use *exact inversion*: a uniform ``W`` (a 32- or 31-bit word,
refined lazily, see the proof note of :mod:`veil.noise._exact`) is compared with the survival
function ``S(m) = P(X ≥ m)``, bracketed in integers, so ``X = max{m : W < S(m)}`` exactly. A
float computation only *guesses* ``m``; the guess is verified against the integer table
``lo[m] ≤ 2^w·S(m) ≤ hi[m]`` and anything unverified is decided exactly (by table counts, or by
refining ``W`` with more bits). Values past the table use memorylessness: for a geometric
``X``, ``X - T | X ≥ T`` is the same geometric. Large scales split ``G = R + 2^m·Q`` (a low
part by exact rejection from the uniform, a high part by inversion); the discrete Gaussian is
Canonne–Kamath–Steinke's rejection from a discrete Laplace with exact acceptance.

Supported range: every scale ``> 0`` up to ``MAX_SCALE = 2^48`` (and σ up to 2^48); samples
are int64. Larger parameters raise :class:`veil.InvalidArgumentError`; an int64 overflow of a
sample (probability below ``exp(-2^14)``) raises :class:`veil.InternalError`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from fractions import Fraction
from functools import cached_property, lru_cache, partial

import numpy as np
from numpy.typing import NDArray

from veil.errors import InternalError, InvalidArgumentError
from veil.noise._exact import (
    LazyUniform,
    check_size,
    draw_u32,
    draw_u64,
    exp_bounds,
    exp_neg_bounds,
    resolve_source,
)
from veil.random import RandomSource

__all__ = [
    "MAX_SCALE",
    "discrete_gaussian",
    "discrete_gaussian_chunks",
    "discrete_laplace",
    "discrete_laplace_chunks",
    "geometric",
]

MAX_SCALE = Fraction(2**48)
_TABLE = 4096  # entries per inversion table for batches of 1024 draws or more
_BIG_TABLE = 1 << 16  # a larger direct table, built only for batches big enough to repay it
_PREC = 128  # fixed-point bits used to build tables
_INT64_MAX = (1 << 63) - 1

SBounds = Callable[[int, int], tuple[int, int]]  # (m, prec) -> bounds of 2^prec·S(m)


def _positive(value: Fraction | int, name: str, limit: Fraction = MAX_SCALE) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, Fraction | int):
        raise InvalidArgumentError(
            f"{name} must be an int or a fractions.Fraction, got {value!r}; "
            "use veil.accounting.budget.exact(x, name) to convert a float exactly"
        )
    q = Fraction(value)
    if q <= 0:
        raise InvalidArgumentError(f"{name} must be > 0, got {q}")
    if q > limit:
        raise InvalidArgumentError(
            f"{name}={float(q):.6g} exceeds the supported maximum {float(limit):.6g} "
            "(samples must fit in int64); rescale the query"
        )
    return q


def _inverse(scale: Fraction | int) -> Fraction:
    """``1/scale`` of a scale checked by :func:`_positive` (cached for Fractions and ints:
    the mechanisms pass the same calibrated scale on every call)."""
    if type(scale) in (Fraction, int):
        return _inverse_cached(scale.numerator, scale.denominator)
    return 1 / _positive(scale, "scale")


# The caches of a scalar release's path are keyed by a rational's numerator and denominator,
# not by the Fraction: a Fraction's hash is a modular inverse of its denominator, computed
# afresh at every lookup (~1 µs, 5 lookups a call); two integers hash in nanoseconds. The
# same rational gives the same key (a Fraction is kept in lowest terms, an int's denominator
# is 1), and a miss rebuilds the Fraction from it.


@lru_cache(maxsize=64)
def _inverse_cached(numerator: int, denominator: int) -> Fraction:
    return 1 / _positive(Fraction(numerator, denominator), "scale")


class _Inverter:
    """Exact inversion of ``X ≥ 0`` with survival ``S`` tabulated on ``0..size``.

    ``lo/hi[m]`` bracket ``2^bits·S(m)`` for ``m = 0..size`` (``S(0) = 1``). ``X > size-1`` is
    the tail: ``tail(n)`` draws ``X - size`` given ``X ≥ size`` (None when ``S(size) = 0``).
    """

    def __init__(
        self,
        lo: list[int],
        hi: list[int],
        bits: int,
        guess: tuple[float, float],
        sbounds: SBounds,
        tail: Callable[[int, RandomSource], NDArray[np.int64]] | None,
    ) -> None:
        self.size = len(lo) - 1
        # S decreases, so lo[m] may be raised to max(lo[m:]) and hi[m] lowered to min(hi[:m+1])
        # (still valid bounds); monotone tables make the certain/possible sets prefixes.
        self.lo = np.maximum.accumulate(np.array(lo, dtype=np.int64)[::-1])[::-1].copy()
        self.hi = np.minimum.accumulate(np.array(hi, dtype=np.int64))
        # Decreasing sequences, reversed for searchsorted.
        self.lo_rev = self.lo[::-1].copy()
        self.hi_rev = self.hi[::-1].copy()
        self.hi_next = np.append(self.hi[1:], 0)  # hi_next[m] = hi[m + 1]
        # the float guess of X is (c − ln W)/x = (c + bits·ln 2 − ln(v + 1/2))·inv_x
        self.guess_c = np.float32(guess[0] + bits * math.log(2.0))
        self.guess_inv_x = np.float32(guess[1])
        self.bits, self.sbounds, self.tail = bits, sbounds, tail

    def invert(
        self, v: NDArray[np.uint32] | NDArray[np.int64], source: RandomSource
    ) -> NDArray[np.int64]:
        """``X`` for uniform ``bits``-bit words ``v``: exactly ``max{m : W < S(m)}``."""
        size = self.size
        g = v.astype(np.float32)
        g += np.float32(0.5)
        np.log(g, out=g)
        np.subtract(self.guess_c, g, out=g)
        g *= self.guess_inv_x  # finite: 0 < W < 1, so the guess is a finite multiple of −ln W
        np.clip(g, 0, size - 1, out=g)
        m = g.astype(np.int64)
        # certain: W < S(m) (v+1 ≤ lo[m]) and W ≥ S(m+1) (v ≥ hi[m+1])
        ok = v < self.lo[m]
        ok &= v >= self.hi_next[m]
        if ok.all():
            return m
        bad = np.flatnonzero(~ok)
        vb = v[bad]
        # counts of m ≥ 1 with certain / possible W < S(m)
        certain = size + 1 - np.searchsorted(self.lo_rev, vb, side="right")
        possible = size + 1 - np.searchsorted(self.hi_rev, vb, side="right")
        res = certain - 1
        for j in np.flatnonzero(certain != possible):
            res[j] = self._resolve(int(vb[j]), int(certain[j]), int(possible[j]), source)
        m[bad] = res
        if self.tail is not None:
            in_tail = np.flatnonzero(m >= size)
            if in_tail.size:
                extra = self.tail(in_tail.size, source)
                if int(extra.max()) > _INT64_MAX - size:
                    raise InternalError("a sample overflowed int64")
                m[in_tail] = size + extra
        return m

    def _bounds_at(self, m: int, prec: int) -> tuple[int, int]:
        return self.sbounds(m, prec)

    def _resolve(self, v: int, certain: int, possible: int, source: RandomSource) -> int:
        """Exact ``max{m : W < S(m)}`` when the 32-bit word leaves ``m`` ambiguous."""
        w = LazyUniform(v, self.bits, source)
        count = certain  # W < S(m) holds for m < certain
        for m in range(certain, possible):
            if not w.below(partial(self._bounds_at, m)):
                break
            count = m + 1
        return count - 1


_FEW_WORDS = 8
"""Words a :class:`_LazyInverter` decides entry by entry; a larger batch reads the table."""


class _LazyInverter:
    """An :class:`_Inverter`'s answers for a few words, computing only the table entries each
    word's guess needs: a small batch at a new scale (a scalar release) builds no table.

    ``entries(k)`` gives ``(lo[k], hi[k])`` of the inverter ``full()`` would build — the same
    integers, its tables being monotone already (see the callers) — or None when it cannot
    tell without the table. A word ``v`` whose guess ``m`` (in ``[0, size)``) has ``v <
    lo[m]`` and ``v ≥ hi[m + 1]`` is ``max{m : W < S(m)}``, exactly what the inverter answers,
    and it draws nothing more for it (its searches find the same ``m``, certain). When some
    word is not decided so, the whole batch goes to the inverter itself: the same words, the
    same values, the same bytes drawn.

    Before any entry is computed, ``survival(k)`` — a double within relative ``2^-32`` of
    ``2^bits·S(k)`` (None: no such estimate) — screens the word: every entry lies within 2 of
    ``2^bits·S(k)`` (the callers' proof notes), so ``v + 1 ≤ survival(m)·(1 − 2^-24) − 3`` and
    ``v ≥ survival(m + 1)·(1 + 2^-24) + 3`` imply ``v < lo[m]`` and ``v ≥ hi[m + 1]``: the
    same answer, decided without the entries (all but ~10^-7 of the words).
    """

    def __init__(
        self,
        size: int,
        bits: int,
        guess: tuple[float, float],
        entries: Callable[[int], tuple[int, int] | None],
        full: Callable[[], _Inverter],
        survival: Callable[[int], float] | None = None,
    ) -> None:
        self.size, self.bits = size, bits
        self._c, self._inv_x = guess[0] + bits * math.log(2.0), guess[1]
        self._entries, self._full, self._survival = entries, full, survival
        self._held: dict[int, tuple[int, int]] = {}

    @cached_property
    def table(self) -> _Inverter:
        return self._full()

    @property
    def lo(self) -> NDArray[np.int64]:
        return self.table.lo

    @property
    def hi(self) -> NDArray[np.int64]:
        return self.table.hi

    def entry(self, k: int) -> tuple[int, int]:
        """``(lo[k], hi[k])`` of the table, computed (and remembered) or read from it."""
        held = self._held.get(k)
        if held is None:
            made = self._entries(k)
            if made is None:
                made = int(self.table.lo[k]), int(self.table.hi[k])
            held = self._held[k] = made
        return held

    def _screened(self, word: int, m: int) -> bool:
        """Whether the estimate alone shows ``lo[m] > word ≥ hi[m + 1]`` (class docstring)."""
        survival = self._survival
        if survival is None:
            return False
        below = survival(m) * (1.0 - _SCREEN) - 3.0
        above = survival(m + 1) * (1.0 + _SCREEN) + 3.0
        return word + 1 <= below and word >= above

    def invert(
        self, v: NDArray[np.uint32] | NDArray[np.int64], source: RandomSource
    ) -> NDArray[np.int64]:
        if v.size > _FEW_WORDS:
            return self.table.invert(v, source)
        last = self.size - 1
        out = []
        for word in v.tolist():
            guess = (self._c - math.log(word + 0.5)) * self._inv_x
            m = min(int(guess), last) if guess > 0 else 0
            if not (
                self._screened(word, m)
                or (word < self.entry(m)[0] and word >= self.entry(m + 1)[1])
            ):
                return self.table.invert(v, source)
            out.append(m)
        return np.array(out, dtype=np.int64)


_SCREEN = 2.0**-24
"""The relative margin of a :class:`_LazyInverter`'s screen: far above its estimates' error
(``2^-32``), far below a word's spacing (``2^-31`` of the range)."""
_SCREEN_REACH = 2.0**20
"""The largest ``x·k`` a screen's estimate is made for: ``x``'s rounding to a double moves
``exp(−x·k)`` by at most ``x·k·2^-53`` relative, below ``2^-32`` up to here (``math.exp`` is
within an ulp of ``exp``; the few products and quotients add a few ``2^-53``)."""


def _screen_x(x: Fraction, size: int) -> float | None:
    """``x`` as a double when the screen's estimates hold for ``k ≤ size`` (else None)."""
    if x.numerator >= x.denominator << 20:  # x ≥ 2^20: no estimate (nor a need: S ≈ 0)
        return None
    xf = float(x)
    return xf if xf > 2.0**-1000 and xf * (size + 1) <= _SCREEN_REACH else None


def _recurrence_entries(x: Fraction, size: int) -> Callable[[int], tuple[int, int] | None]:
    """Entry ``k ≤ size`` of :func:`_exp_table_32` ``(x, size + 1)`` from the powers of its
    base brackets (:func:`_decided_lower`, :func:`_decided_upper`), None when undecided. The
    recurrence's lower entries never increase, nor its upper ones (``b_hi ≤ 2^P``:
    :func:`exp_neg_bounds` caps it), so the inverter's monotone tables are these entries."""

    @lru_cache(maxsize=1)
    def powers() -> tuple[_Powers, _Powers]:  # (made at the first entry a screen leaves)
        base_lo, base_hi = exp_neg_bounds(x, _PREC)
        width = size.bit_length()
        return _Powers(base_lo, width), _Powers(base_hi, width)

    def entries(k: int) -> tuple[int, int] | None:
        lower, upper = powers()
        lo, hi = _decided_lower(lower, k), _decided_upper(upper, k)
        return None if lo is None or hi is None else (lo, hi)

    return entries


Proposal = Callable[[int], tuple[NDArray[np.int64], NDArray[np.bool_]]]


def _fill(n: int, propose: Proposal) -> NDArray[np.int64]:
    """Rejection sampling over arrays: ``propose(k)`` gives k candidates and acceptances;
    rejected slots are re-proposed (independently) until every slot holds an accepted value."""
    out, accept = propose(n)
    if accept.all():  # (nothing to re-propose: the common case of a small batch)
        return out
    pending = np.flatnonzero(~accept)
    while pending.size:
        values, accept = propose(pending.size)
        out[pending[accept]] = values[accept]
        pending = pending[~accept]
    return out


def _exp_table_32(x: Fraction, count: int) -> tuple[list[int], list[int]]:
    """Brackets of ``2^32·exp(-x·m)`` for m = 0..count-1: the brackets ``e_lo[m] ≤
    2^_PREC·exp(-x·m) ≤ e_hi[m]`` by interval multiplication (``e_lo[m+1] = ⌊e_lo[m]·b_lo /
    2^_PREC⌋``, ``e_hi[m+1] = ⌈e_hi[m]·b_hi / 2^_PREC⌉``, ``b`` the brackets of
    ``2^_PREC·e^{-x}``, ``e[0] = 2^_PREC``), each entry rounded to 32 bits as it is made
    (lower brackets down, upper brackets up): exactly ``[lo >> s for lo in e_lo]`` and
    ``[-((-hi) >> s) for hi in e_hi]`` with ``s = _PREC - 32``."""
    base_lo, base_hi = exp_neg_bounds(x, _PREC)
    prec, shift = _PREC, _PREC - 32
    lo, neg_hi = 1 << prec, -(1 << prec)  # the upper bracket kept negated: floors round it up
    out_lo, out_hi = [lo >> shift], [-(neg_hi >> shift)]
    add_lo, add_hi = out_lo.append, out_hi.append  # (bound once: half the loop's time)
    for _ in itertools.repeat(None, count - 1):
        lo = (lo * base_lo) >> prec
        neg_hi = (neg_hi * base_hi) >> prec
        add_lo(lo >> shift)
        add_hi(-(neg_hi >> shift))
    return out_lo, out_hi


def _scaled(num_lo: int, num_hi: int, den_lo: int, den_hi: int, bits: int) -> tuple[int, int]:
    """Brackets of ``2^bits·N/D`` from brackets of N and D (all ≥ 0, D > 0)."""
    lo = (num_lo << bits) // den_hi
    hi = -((-(num_hi << bits)) // den_lo) if den_lo > 0 else 1 << bits
    return lo, min(hi, 1 << bits)


# ---------------------------------------------------------------------------- geometric


_SMALL_BATCH = 1024  # below this many draws, small tables (cheap to build) are used
_SMALL_TABLE = 256
_CHUNK = 1 << 18
"""Draws made in one pass: a larger batch is drawn chunk after chunk, so that each pass's
arrays stay in the processor's caches. Each chunk is ``_CHUNK`` independent
draws of the same law, so the whole is ``n`` independent draws: the law is the same, the bytes
go to other draws."""


def _in_chunks(draw: Callable[[int], NDArray[np.int64]], n: int) -> NDArray[np.int64]:
    """``draw(n)``, made as ``draw(_CHUNK)`` after ``draw(_CHUNK)`` (then the rest) into one
    array when ``n`` is larger than a chunk."""
    if n <= _CHUNK:
        return draw(n)
    out = np.empty(n, dtype=np.int64)
    for start, chunk in _chunks(draw, n):
        out[start : start + chunk.size] = chunk
    return out


def _chunks(
    draw: Callable[[int], NDArray[np.int64]], n: int
) -> Iterator[tuple[int, NDArray[np.int64]]]:
    """The chunks :func:`_in_chunks` joins, each with its offset, one after the other (the
    same draws in the same order: a caller adding each into its own array allocates no array
    of ``n`` samples)."""
    for start in range(0, n, _CHUNK):
        yield start, draw(min(start + _CHUNK, n) - start)


def _base_table(n: int) -> int:
    return _SMALL_TABLE if n < _SMALL_BATCH else _TABLE


def _direct_size(x: Fraction, n: int) -> int | None:
    """:func:`_table_size` for the batch sizes that matter to it: every ``n`` below
    ``_SMALL_BATCH`` behaves alike. (Computed each time: a few integer products cost less
    than hashing ``x`` for a cache.)"""
    return _table_size(x, 1 if n < _SMALL_BATCH else n)


def _table_size(x: Fraction, n: int) -> int | None:
    """Entries of a direct table for scale ``1/x`` and ``n`` draws, or None (split sampling).

    A table of T entries serves scales up to T/16 (tail mass e^-16 per pass); large batches
    may get up to 2^16 entries, small batches only 256 so a new scale stays cheap.
    """
    base = _base_table(n)
    num, den = x.numerator, x.denominator  # (integers: a Fraction's arithmetic costs µs)
    if num * (base // 16) >= den:
        return base
    # need = 16/x entries: at most _BIG_TABLE, and n at least 16·need
    if n >= _SMALL_BATCH and 16 * den <= _BIG_TABLE * num and n * num >= 256 * den:
        return 1 << max(12, math.ceil(math.log2(16 / x)))
    return None


@lru_cache(maxsize=16)
def _geometric_direct(x: Fraction, size: int = _TABLE) -> _Inverter:
    """``P(G = g) ∝ exp(-x·g)``: survival ``S(m) = exp(-x·m)``, one table plus its tail."""
    bits = 32
    lo, hi = _exp_table_32(x, size + 1)
    inv_x = 1.0 / float(x) if x < 2**100 else 0.0  # G ≈ −ln(W)/x

    def sbounds(m: int, prec: int) -> tuple[int, int]:
        return exp_neg_bounds(x * m, prec)

    def tail(n: int, source: RandomSource) -> NDArray[np.int64]:
        return _geometric(x, n, source)

    return _Inverter(lo, hi, bits, (0.0, inv_x), sbounds, tail)


_SPLIT_BITS = 12  # log2 of the bins of the low part's acceptance table


@lru_cache(maxsize=16)
def _low_part_table(x: Fraction, m: int, bits: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """32-bit brackets of ``exp(-x·r)`` over bins ``r ∈ [b·w, (b+1)·w]`` of ``[0, 2^m)``.

    ``exp(-x·r)`` decreases in ``r``: the bin's bracket is (lower bound at its right end,
    upper bound at its left end). ``2^min(m, bits)`` bins of width ``w``.
    """
    nbins = 1 << min(m, bits)
    w = (1 << m) // nbins
    e_lo, e_hi = _exp_table_32(x * w, nbins + 1)
    lo = np.array(e_lo[1:], dtype=np.int64)
    hi = np.array(e_hi[:-1], dtype=np.int64)
    return lo, hi


_GUARD = 64  # bits beyond _PREC kept by _Powers' products


class _Powers:
    """Integers ``lo ≤ 2^P·(base/2^P)^k ≤ hi`` (``P = _PREC``, ``0 ≤ base ≤ 2^P``) for
    ``0 ≤ k < 2^bits``: products of the squarings ``base^(2^j)``, made once, on ``P + 64``
    bits, each product rounded down for ``lo`` and up for ``hi`` (every factor is non-negative,
    so each rounding keeps its side)."""

    def __init__(self, base: int, bits: int) -> None:
        q = _PREC + _GUARD
        down = up = base << _GUARD
        self.down, self.up = [down], [up]
        for _ in range(bits):
            down = (down * down) >> q
            up = -((-up * up) >> q)
            self.down.append(down)
            self.up.append(up)

    def bounds(self, k: int) -> tuple[int, int]:
        q = _PREC + _GUARD
        lo = hi = 1 << q
        j = 0
        while k:
            if k & 1:
                lo = (lo * self.down[j]) >> q
                hi = -((-hi * self.up[j]) >> q)
            k >>= 1
            j += 1
        return lo >> _GUARD, -((-hi) >> _GUARD)


_FEW_BINS = 16  # bins whose brackets cost about what the whole 257-entry table costs
_LEAST_FLOOR = exp_neg_bounds(Fraction(1, 16), 32)[0] - 1
"""At most every 32-bit lower bracket of a low part with ``x·2^m ≤ 1/16`` (``_LowBins``)."""


def _decided_lower(powers: _Powers, k: int) -> int | None:
    """``e_lo[k] >> s`` of :func:`_exp_table_32`'s recurrence (``s = _PREC − 32``) when
    ``powers`` (of its lower base bracket) decides it, else None (proof note of
    :class:`_LowBins`: ``e_lo[k] ∈ (A_k − k, A_k]``, and ``e_lo[k] ≥ 0``, a floor of
    non-negative integers)."""
    shift = _PREC - 32
    lo, hi = powers.bounds(k)
    return hi >> shift if max(lo - k, 0) >> shift == hi >> shift else None


def _decided_upper(powers: _Powers, k: int) -> int | None:
    """``⌈e_hi[k] / 2^s⌉`` of the recurrence when ``powers`` (of its upper base bracket)
    decides it, else None (``e_hi[k] ∈ [H_k, H_k + k)``, and ``e_hi[k] ≥ 1``: a ceiling of
    positive integers, the base's upper bracket being at least 1)."""
    shift = _PREC - 32
    lo, hi = powers.bounds(k)
    ceil_lo, ceil_hi = -((-max(lo, 1)) >> shift), -((-(hi + k)) >> shift)
    return ceil_lo if ceil_lo == ceil_hi else None


class _LowBins:
    """The bins' brackets of :func:`_low_part_table`, the same integers, computed only for the
    bins a proposal needs — the 32-bit words below every bin's lower bracket (about 94 % of
    them: ``x·2^m ≤ 1/16``) accept whatever their bin.

    Proof note. :func:`_exp_table_32`'s recurrence at ``P = _PREC`` bits, base brackets
    ``b_lo ≤ b_hi ≤ 2^P`` (:func:`exp_neg_bounds`), gives ``e_lo[k] ∈ (A_k − k, A_k]`` with
    ``A_k = 2^P·(b_lo/2^P)^k`` (each floor loses less than 1, and a loss is then multiplied by
    factors ≤ 1), and likewise ``e_hi[k] ∈ [H_k, H_k + k)`` with ``H_k = 2^P·(b_hi/2^P)^k``.
    With :class:`_Powers`' integers around ``A_k`` and ``H_k``, the 32-bit entries
    ``e_lo[k] >> s`` and ``⌈e_hi[k] / 2^s⌉`` (``s = P − 32``) are decided when both ends of
    the range shift to the same integer — all but a ~k·2^-96 fraction of the entries; the
    others are read from the table itself. The lower brackets never increase (``b_lo <
    2^P``), so the last bin's lower bracket is the least of all.
    """

    def __init__(self, x: Fraction, m: int, bits: int) -> None:
        self.x, self.m, self.bits = x, m, bits
        self.nbins = 1 << min(m, bits)
        # each bin's brackets once made (the plan is remembered per scale: a release at the
        # same ε reads the same few bins again); at most 2^bits + 1 integers each
        self._lowers: dict[int, int] = {}
        self._uppers: dict[int, int] = {}

    @cached_property
    def lower_powers(self) -> _Powers:
        return self._powers[0]

    @cached_property
    def upper_powers(self) -> _Powers:
        return self._powers[1]

    @cached_property
    def _powers(self) -> tuple[_Powers, _Powers]:
        """The powers of the recurrence's base brackets (made when first needed: a batch
        that reads the table never needs them)."""
        base_lo, base_hi = exp_neg_bounds(self.x * ((1 << self.m) // self.nbins), _PREC)
        width = self.nbins.bit_length()  # k ≤ nbins < 2^width
        return _Powers(base_lo, width), _Powers(base_hi, width)

    @cached_property
    def least(self) -> int:
        """The last bin's lower bracket: the least of all."""
        return self._lower(self.nbins)

    @cached_property
    def below_least(self) -> int:
        """A lower bound of :attr:`least` made without any bracket: ``_LEAST_FLOOR`` when
        ``x·2^m ≤ 1/16`` (the split's low parts), else 0.

        Proof note. ``b_lo ≥ 2^P·e^{-xw} − 2`` (:func:`exp_neg_bounds`' brackets are at most 2
        wide), so ``A_N = 2^P·(b_lo/2^P)^N ≥ 2^P·e^{-x·2^m} − 2N`` for ``N = nbins``, ``N·w =
        2^m`` (``(a − d)^N ≥ a^N − N·d`` for ``0 ≤ d ≤ a ≤ 1``), and ``e_lo[N] > A_N − N ≥
        2^P·e^{-1/16} − 3N``; shifted by ``P − 32`` bits (``3N < 2^96``) that is at least
        ``⌊2^32·e^{-1/16}⌋ − 1 ≥ _LEAST_FLOOR``."""
        if self.x.numerator << (self.m + 4) <= self.x.denominator:  # 16·x·2^m ≤ 1
            return _LEAST_FLOOR
        return 0

    def _lower(self, k: int) -> int:
        """``e_lo[k] >> s`` of the recurrence (a bin's lower bracket is ``e_lo[b + 1]``)."""
        held = self._lowers.get(k)
        if held is None:
            held = self._lowers[k] = self._make_lower(k)
        return held

    def _upper(self, k: int) -> int:
        """``⌈e_hi[k] / 2^s⌉`` of the recurrence (a bin's upper bracket is ``e_hi[b]``)."""
        held = self._uppers.get(k)
        if held is None:
            held = self._uppers[k] = self._make_upper(k)
        return held

    def _make_lower(self, k: int) -> int:
        decided = _decided_lower(self.lower_powers, k)
        if decided is not None:
            return decided
        return int(_low_part_table(self.x, self.m, self.bits)[0][k - 1])

    def _make_upper(self, k: int) -> int:
        decided = _decided_upper(self.upper_powers, k)
        if decided is not None:
            return decided
        return int(_low_part_table(self.x, self.m, self.bits)[1][k])

    def brackets(self, b: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """:func:`_low_part_table`'s ``(lo[b], hi[b])`` for the bins ``b``: read from the table
        itself when they are more than ``_FEW_BINS`` (it is then cheaper to build)."""
        if b.size > _FEW_BINS:
            table_lo, table_hi = _low_part_table(self.x, self.m, self.bits)
            return table_lo[b], table_hi[b]
        lo = np.empty(b.size, dtype=np.int64)
        hi = np.empty(b.size, dtype=np.int64)
        for i, j in enumerate(b.tolist()):
            lo[i] = self._lower(j + 1)
            hi[i] = self._upper(j)
        return lo, hi


def _low_part(
    x: Fraction,
    m: int,
    n: int,
    source: RandomSource,
    table: tuple[NDArray[np.int64], NDArray[np.int64]] | _LowBins | None = None,
) -> NDArray[np.int64]:
    """``n`` draws of ``R`` on ``[0, 2^m)`` with ``P(R = r) ∝ exp(-x·r)`` (``x·2^m ≤ 1/16``).

    Rejection from the uniform: ``r`` is accepted with probability ``exp(-x·r) ≥ e^{-1/16}``,
    decided exactly (bin brackets, the rare undecided word refined one by one). ``table`` is
    :func:`_low_part_table` for this ``n`` when the caller holds it already, or the same
    brackets computed bin by bin (:class:`_LowBins`: the same decisions, the same draws).
    """
    bits = _SPLIT_BITS if n >= _SMALL_BATCH else 8
    bins = table if table is not None else _low_part_table(x, m, bits)
    if isinstance(bins, _LowBins) and n > _FEW_BINS * 16:  # ~6 % of the words read a bin
        bins = _low_part_table(x, m, bits)

    def propose(k: int) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
        if m <= 32:
            r = draw_u32(source, k).astype(np.int64)
            r >>= 32 - m
        else:
            r = (draw_u64(source, k) >> np.uint64(64 - m)).astype(np.int64)
        u = draw_u32(source, k)
        b = r >> (m - min(m, bits))
        if isinstance(bins, _LowBins):
            # below every bin's lower bracket: first below a bound of the least one that
            # needs no bracket (~94 % of single proposals), then the least itself
            accept = u < bins.below_least
            if accept.all():
                return r, accept
            accept = u < bins.least
            if accept.all():
                return r, accept
            rest = np.flatnonzero(~accept)
            lo, hi = bins.brackets(b[rest])
            ur = u[rest]
            accept[rest] = ur < lo
            undecided = rest[(ur >= lo) & (ur < hi)]
        else:
            lo, hi = bins
            accept = u < lo[b]
            undecided = np.flatnonzero(~accept & (u < hi[b]))
        for j in undecided:
            accept[j] = LazyUniform(int(u[j]), 32, source).below(exp_bounds(x * int(r[j])))
        return r, accept

    return _fill(n, propose)


def _split(x: Fraction, c: int) -> tuple[int, Fraction]:
    """The largest ``m`` with ``x·2^m ≤ 1/c`` and the high part's ``x·2^m``: its scale
    ``1/(x·2^m)`` lands in ``[c, 2c)``, covered by a direct table."""
    num, den = x.numerator, x.denominator
    m = math.floor(math.log2(den) - math.log2(c * num))
    while m > 0 and c * num << m > den:  # x·2^m > 1/c (the estimate may be a step off)
        m -= 1
    while c * num << (m + 1) <= den:
        m += 1
    return m, x * (1 << m)


def _lazy_geometric(x: Fraction, size: int) -> _LazyInverter:
    """:func:`_geometric_direct` ``(x, size)`` for small batches, its entries made as needed.

    Proof note (the screen's "within 2"). With ``b_lo ≥ 2^P·e^{-x} − 2`` and ``b_hi ≤
    min(2^P, 2^P·e^{-x} + 2)`` (:func:`exp_neg_bounds`), ``(a − d)^k ≥ a^k − k·d`` and ``(a +
    d)^k ≤ a^k + k·d`` (``0 ≤ a ± d ≤ 1``) give ``e_lo[k] > 2^P·e^{-xk} − 3k`` and ``e_hi[k] <
    2^P·e^{-xk} + 3k`` (:class:`_LowBins`' ranges); shifted to 32 bits (``3k < 2^96``), ``lo[k] ≥
    2^32·e^{-xk} − 2`` and ``hi[k] ≤ 2^32·e^{-xk} + 2`` (and ``lo[k] ≥ 0`` when ``e^{-x}`` is
    below ``2^{1−P}``)."""
    inv_x = 1.0 / float(x) if x < 2**100 else 0.0
    full = partial(_geometric_direct, x, size)
    xf = _screen_x(x, size)
    screen = None if xf is None else partial(_exp_survival, xf)
    return _LazyInverter(size, 32, (0.0, inv_x), _recurrence_entries(x, size), full, screen)


def _exp_survival(xf: float, k: int) -> float:
    """The estimate ``2^32·e^{-xk}`` of a geometric table's entry ``k``."""
    return 4294967296.0 * math.exp(-xf * k)


def _laplace_survival(xf: float, k: int) -> float:
    """The estimate ``2^31·S(k)`` of a discrete Laplace magnitude table's entry ``k``:
    ``2^31`` at 0, ``2^31·2e^{-xk}/(1 + e^{-x})`` after."""
    if k == 0:
        return 2147483648.0
    return 4294967296.0 * math.exp(-xf * k) / (1.0 + math.exp(-xf))


_Direct = _Inverter | _LazyInverter
_SplitPlan = tuple[int, tuple[NDArray[np.int64], NDArray[np.int64]] | _LowBins, _Direct]


def _geometric_plan(x: Fraction, n: int) -> _Direct | _SplitPlan:
    """How :func:`_geometric` draws ``n`` values: one direct table, or the split
    ``G = R + 2^m·Q`` as (``m``, the low part's acceptance table, the high part's table). A
    small batch reads few entries of each table: they are computed as needed."""
    direct = _geometric_direct if n >= _SMALL_BATCH else _lazy_geometric
    size = _direct_size(x, n)
    if size is not None:
        return direct(x, size)
    m, xq = _split(x, 256 if n >= _SMALL_BATCH else 16)
    table = _low_part_table(x, m, _SPLIT_BITS) if n >= _SMALL_BATCH else _LowBins(x, m, 8)
    return m, table, direct(xq, _direct_size(xq, n) or _base_table(n))


def _small_geometric_plan(x: Fraction) -> _Direct | _SplitPlan:
    """:func:`_geometric_plan` for every batch below ``_SMALL_BATCH`` (they all plan alike),
    so a scalar release looks its scale up once (by numerator and denominator)."""
    return _small_geometric_plan_of(x.numerator, x.denominator)


@lru_cache(maxsize=64)
def _small_geometric_plan_of(numerator: int, denominator: int) -> _Direct | _SplitPlan:
    return _geometric_plan(Fraction(numerator, denominator), 1)


def _geometric(x: Fraction, n: int, source: RandomSource) -> NDArray[np.int64]:
    """``n`` exact draws of ``G`` with ``P(G = g) ∝ exp(-x·g)``, ``x > 0`` rational.

    For small scales one table (:func:`_geometric_direct`). Otherwise ``G = R + 2^m·Q`` with
    ``2^m ≤ 1/(256x)`` (``1/(16x)`` for small batches): ``R`` on ``[0, 2^m)`` with
    ``P ∝ exp(-x·r)`` (:func:`_low_part`) and ``Q`` geometric with ``x·2^m`` (a table),
    independent because
    ``exp(-x(r + 2^m q)) = exp(-x·r)·exp(-x·2^m·q)``.
    """
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    plan = _small_geometric_plan(x) if n < _SMALL_BATCH else _geometric_plan(x, n)
    if not isinstance(plan, tuple):
        return plan.invert(draw_u32(source, n), source)
    m, table, high = plan
    out = _low_part(x, m, n, source, table)
    q = high.invert(draw_u32(source, n).astype(np.int64), source)
    if q.any():
        if int(q.max()) > (_INT64_MAX - (1 << m)) >> m:
            raise InternalError("a sample overflowed int64")
        q <<= m
        out += q
    return out


def geometric(
    scale: Fraction | int, size: int, *, source: RandomSource | None = None
) -> NDArray[np.int64]:
    """``size`` exact draws with ``P(G = g) = (1 - e^{-1/scale})·e^{-g/scale}``, ``g ≥ 0``.

    Contract: exact for every rational ``0 < scale ≤ MAX_SCALE`` (module proof note).
    """
    x, src = 1 / _positive(scale, "scale"), resolve_source(source)
    return _in_chunks(lambda k: _geometric(x, k, src), check_size(size))


# ------------------------------------------------------------------------ discrete Laplace


def _laplace_table(x: Fraction, size: int, bits: int) -> tuple[list[int], list[int]]:
    """Brackets ``lo[m] ≤ 2^bits·S(m) ≤ hi[m]`` of the discrete Laplace magnitude's survival
    ``S(m) = 2e^{-xm}/(1 + e^{-x})`` (``S(0) = 1``) for ``m = 0..size``: ``2^bits·2e^{-xm}``
    over ``1 + e^{-x}``, each bracketed by :func:`_exp_table_32`'s recurrence at ``_PREC`` bits,
    rounded outward.

    Once an entry is ``(0, 1)`` every later one is, and they are written without computing
    them (a scale near 1 reaches it within ~25 entries of a 4096-entry table). Proof: the
    recurrence's lower brackets never increase (``e_lo[m+1] = ⌊e_lo[m]·b_lo/2^P⌋`` with
    ``b_lo ≤ 2^P·e^{-x} < 2^P``), so a floor that reached 0 stays 0; the upper ones are
    ``e_hi[m+1] = ⌈e_hi[m]·b_hi/2^P⌉ ≥ 1``, so every upper entry is at least 1, and they never
    increase when ``b_hi ≤ 2^P`` — when ``b_hi > 2^P`` instead, ``e_hi[m] ≥ 2^P`` for every m,
    every upper entry is at least ``2^bits/2 > 1`` and no entry is ``(0, 1)``."""
    base_lo, base_hi = exp_neg_bounds(x, _PREC)
    one = 1 << _PREC
    den_lo, den_hi = one + base_lo, one + base_hi  # 2^P·(1 + e^{-x}), bracketed
    lo, hi = [1 << bits], [1 << bits]
    e_lo, e_hi = one, one
    for m in range(1, size + 1):
        e_lo = (e_lo * base_lo) >> _PREC
        e_hi = -((-e_hi * base_hi) >> _PREC)
        a, b = _scaled(2 * e_lo, 2 * e_hi, den_lo, den_hi, bits)
        lo.append(a)
        hi.append(b)
        if a == 0 and b == 1:  # and so is every later entry (see above)
            lo.extend([0] * (size - m))
            hi.extend([1] * (size - m))
            break
    return lo, hi


@lru_cache(maxsize=16)
def _laplace_magnitude(x: Fraction, size: int = _TABLE) -> _Inverter:
    """``|X|`` of a discrete Laplace, ``P(|X| = m) ∝ (2 - [m = 0])·e^{-x·m}``.

    Survival ``S(m) = 2e^{-xm}/(1 + e^{-x})`` for ``m ≥ 1``; 31 bits (the 32nd is the sign).
    """
    bits = 31
    lo, hi = _laplace_table(x, size, bits)
    xf = float(x)
    const = math.log(2.0) - math.log1p(math.exp(-xf))  # |X| ≈ (ln(2/(1+p)) − ln W)/x
    inv_x = 1.0 / xf if xf < 1e30 else 0.0

    def sbounds(m: int, prec: int) -> tuple[int, int]:
        if m == 0:
            return 1 << prec, 1 << prec
        p = prec + 8
        a_lo, a_hi = exp_neg_bounds(x * m, p)
        b_lo, b_hi = exp_neg_bounds(x, p)
        return _scaled(2 * a_lo, 2 * a_hi, (1 << p) + b_lo, (1 << p) + b_hi, prec)

    def tail(n: int, source: RandomSource) -> NDArray[np.int64]:
        return _geometric(x, n, source)  # |X| - T | |X| ≥ T is geometric (T ≥ 1)

    return _Inverter(lo, hi, bits, (const, inv_x), sbounds, tail)


def _laplace_entries(x: Fraction, size: int) -> Callable[[int], tuple[int, int] | None]:
    """Entry ``k ≤ size`` of :func:`_laplace_table` ``(x, size, 31)`` from the powers of the
    recurrence's base brackets, None when undecided.

    Proof note. Entry ``k ≥ 1`` is ``_scaled(2·e_lo[k], 2·e_hi[k], den_lo, den_hi, 31)``, the
    recurrence's ``e_lo[k] ∈ (A_k − k, A_k]`` and ``e_hi[k] ∈ [H_k, H_k + k)`` (the proof note
    of :class:`_LowBins`), and each of ``_scaled``'s two results is monotone in its numerator:
    when both ends of a range give the same integer, so does the entry. The entries past the
    first ``(0, 1)``, which the table writes without computing them, are ``(0, 1)`` computed
    (its proof note); lower entries never increase, nor upper ones, so the inverter's
    monotone tables are these entries."""
    one, top = 1 << _PREC, 1 << 31

    @lru_cache(maxsize=1)
    def powers() -> tuple[_Powers, _Powers, int, int]:  # (made at the first entry needed)
        base_lo, base_hi = exp_neg_bounds(x, _PREC)
        width = size.bit_length()
        return _Powers(base_lo, width), _Powers(base_hi, width), one + base_lo, one + base_hi

    def entries(k: int) -> tuple[int, int] | None:
        if k == 0:
            return top, top
        lower, upper, den_lo, den_hi = powers()
        least, most = lower.bounds(k)  # e_lo[k] ∈ [least − k + 1, most]
        lo = (2 * max(least - k + 1, 0) << 31) // den_hi
        if lo != (2 * most << 31) // den_hi:
            return None
        least, most = upper.bounds(k)  # e_hi[k] ∈ [max(least, 1), most + k − 1]
        hi = min(-((-(2 * max(least, 1) << 31)) // den_lo), top)
        if hi != min(-((-(2 * (most + k) << 31)) // den_lo), top):
            return None
        return lo, hi

    return entries


def _lazy_laplace(x: Fraction, size: int) -> _LazyInverter:
    """:func:`_laplace_magnitude` ``(x, size)`` for small batches, its entries made as
    needed (the same guess).

    Proof note (the screen's "within 2"). With ``e_lo[k] > 2^P·e^{-xk} − 3k`` and ``e_hi[k] <
    2^P·e^{-xk} + 3k`` (:func:`_lazy_geometric`'s note) and ``den`` within 2 of ``2^P·(1 +
    e^{-x})``, the entries ``⌊2·e_lo·2^31/den_hi⌋`` and ``⌈2·e_hi·2^31/den_lo⌉`` are within 2 of
    ``2^31·S(k)`` (the errors, relative ``2^{3−P}`` and absolute ``3k·2^{32−P}``, are far
    below 1); entry 0 is ``2^31`` exactly."""
    xf = float(x)
    const = math.log(2.0) - math.log1p(math.exp(-xf))
    inv_x = 1.0 / xf if xf < 1e30 else 0.0
    full = partial(_laplace_magnitude, x, size)
    screen_x = _screen_x(x, size)
    screen = None if screen_x is None else partial(_laplace_survival, screen_x)
    entries = _laplace_entries(x, size)
    return _LazyInverter(size, 31, (const, inv_x), entries, full, screen)


def _laplace_plan(x: Fraction, n: int) -> _Direct | None:
    """The magnitude table :func:`_discrete_laplace` inverts for ``n`` draws, or None (the
    sign-and-geometric construction); a small batch's entries are made as needed."""
    size = _direct_size(x, n)
    if size is None:
        return None
    return _laplace_magnitude(x, size) if n >= _SMALL_BATCH else _lazy_laplace(x, size)


def _small_laplace_plan(x: Fraction) -> _Direct | None:
    """:func:`_laplace_plan` for every batch below ``_SMALL_BATCH`` (remembered by numerator
    and denominator)."""
    return _small_laplace_plan_of(x.numerator, x.denominator)


@lru_cache(maxsize=64)
def _small_laplace_plan_of(numerator: int, denominator: int) -> _Direct | None:
    return _laplace_plan(Fraction(numerator, denominator), 1)


def _discrete_laplace(x: Fraction, n: int, source: RandomSource) -> NDArray[np.int64]:
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    magnitude = _small_laplace_plan(x) if n < _SMALL_BATCH else _laplace_plan(x, n)
    if magnitude is not None:
        words = draw_u32(source, n)
        mag = magnitude.invert(words >> np.uint32(1), source)
        # the low bit is the sign, independent of the 31-bit magnitude word; P(+m) = P(-m)
        mag *= np.where(words & np.uint32(1), -1, 1)
        return mag
    # large scales (CKS 2020 Algorithm 2, steps 5-6): X = ±G with G geometric and a fair
    # sign, rejecting (−, 0) so that 0 is not counted twice; P(reject) = (1 − p)/2 ≈ 0.

    def propose(k: int) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
        g = _geometric(x, k, source)
        words = draw_u32(source, (k + 31) // 32).view(np.uint8)[: (k + 7) // 8]
        negative = np.unpackbits(words, count=k).view(np.bool_)
        keep = ~(negative & (g == 0))
        np.negative(g, out=g, where=negative)
        return g, keep

    return _fill(n, propose)


def discrete_laplace(
    scale: Fraction | int, size: int, *, source: RandomSource | None = None
) -> NDArray[np.int64]:
    """``size`` exact draws with ``P(X = x) ∝ exp(-|x|/scale)`` on the integers.

    Contract: exact for every rational ``0 < scale ≤ MAX_SCALE``; adding it to an integer query
    of L1 sensitivity Δ with ``scale = Δ/ε`` is ε-DP (Canonne, Kamath, Steinke 2020, and Ghosh
    et al. 2009's geometric mechanism). Mean 0; variance ``2p/(1-p)²`` with ``p = e^{-1/scale}``.
    """
    x, src = _inverse(scale), resolve_source(source)
    return _in_chunks(lambda k: _discrete_laplace(x, k, src), check_size(size))


def discrete_laplace_chunks(
    scale: Fraction | int, size: int, *, source: RandomSource | None = None
) -> Iterator[tuple[int, NDArray[np.int64]]]:
    """:func:`discrete_laplace` ``(scale, size)`` as (offset, chunk) pairs, drawn one after the
    other when iterated: the same values from the same bytes, joined by the caller."""
    x, src = _inverse(scale), resolve_source(source)
    return _chunks(lambda k: _discrete_laplace(x, k, src), check_size(size))


# ----------------------------------------------------------------------- discrete Gaussian


@lru_cache(maxsize=32)
def _gauss_accept_table(
    sigma2: Fraction, t: int, bins: int
) -> tuple[int, NDArray[np.int64], NDArray[np.int64]]:
    """Bins of ``|Y|`` with 32-bit brackets of the acceptance ``exp(-(|Y| - σ²/t)²/(2σ²))``.

    Bin ``b`` holds ``|Y| ∈ [b·w, (b+1)·w)``; its bracket spans the acceptance at the bin's
    ends ``b·w`` and ``(b+1)·w`` (and 1 if ``σ²/t`` lies between: γ is monotone on each side
    of it), so a word ``u`` below ``lo`` accepts and at or above ``hi`` rejects, certainly; the
    rest (and ``|Y|`` past the last bin, probability ≈ e^-12) are decided exactly one by one.
    """
    c = sigma2 / t
    limit = 12 * t
    width = max(1, -(-limit // bins))
    nbins = -(-limit // width)
    ends = [exp_neg_bounds((b * width - c) ** 2 / (2 * sigma2), 32) for b in range(nbins + 1)]
    lo = np.zeros(nbins, dtype=np.int64)
    hi = np.zeros(nbins, dtype=np.int64)
    for b in range(nbins):
        if width == 1:  # one integer per bin: its own bracket
            lo[b], hi[b] = ends[b]
            continue
        a, z = b * width, (b + 1) * width
        lo[b] = min(ends[b][0], ends[b + 1][0])
        hi[b] = 1 << 32 if a <= c <= z else max(ends[b][1], ends[b + 1][1])
    return width, lo, hi


_MARGIN = 2.0**-24  # a double acceptance is trusted only this far from the word


@lru_cache(maxsize=64)
def _gauss_setup(sigma2: Fraction) -> tuple[int, Fraction, Fraction, tuple[float, float] | None]:
    """``t = ⌊σ⌋ + 1``, ``c = σ²/t``, the proposal's ``x = 1/t`` and, when σ² is a normal
    double far from its range's ends, ``(c, 2σ²)`` as doubles for the screen of
    :func:`_discrete_gaussian`."""
    t = math.isqrt(sigma2.numerator // sigma2.denominator) + 1  # ⌊σ⌋ + 1
    c = sigma2 / t
    normal = Fraction(1, 2**500) <= sigma2 <= 2**500
    return t, c, Fraction(1, t), (float(c), 2 * float(sigma2)) if normal else None


def _discrete_gaussian(
    sigma2: Fraction, n: int, source: RandomSource, *, screen: bool = True
) -> NDArray[np.int64]:
    """Canonne–Kamath–Steinke 2020, Algorithm 3, vectorised over the pending entries.

    An acceptance the table leaves undecided is compared with the double estimate of
    ``exp(-γ)``, ``γ = (|y| − c)²/(2σ²)``, when the word is more than ``2^-24`` from it (where
    ``γ ≤ 2^20`` and ``|y| < 2^50``: the estimate's error is below ``2^-30``, from ``c``'s and
    σ²'s roundings of relative ``2^-53`` — an absolute ``≤ σ·2^-53`` on ``|y| − c`` since
    ``c < σ`` — which move γ by less than ``(4γ + 2√(2γ))·2^-53``), else exactly on integer
    brackets. The exact comparison draws more bits only for words within ``2^-31`` of the
    threshold, which the screen never decides, so ``screen=False`` (every acceptance exact)
    draws the same bytes and returns the same samples.
    """
    t, c, x, doubles = _gauss_setup(sigma2)
    if n >= 512:
        bins = 1 << min(14, max(10, (n // 256).bit_length()))
        width, lo, hi = _gauss_accept_table(sigma2, t, bins)
    else:  # too few draws to pay for a table: decide every acceptance exactly one by one
        width, lo, hi = 1, np.zeros(1, dtype=np.int64), np.full(1, 1 << 32, dtype=np.int64)
    nbins = lo.size
    estimate = doubles if screen else None

    def propose(k: int) -> tuple[NDArray[np.int64], NDArray[np.bool_]]:
        y = _discrete_laplace(x, k, source)
        u = draw_u32(source, k)
        b = np.abs(y)
        if width > 1:
            b //= width
        inside = b < nbins
        np.minimum(b, nbins - 1, out=b)
        accept = u < lo[b]
        accept &= inside
        undecided = np.flatnonzero(~(accept | (inside & (u >= hi[b]))))
        if undecided.size and estimate is not None:
            c_f, two_s2 = estimate
            yf = np.abs(y[undecided]).astype(np.float64)
            g = (yf - c_f) ** 2 / two_s2
            e = np.exp(-g)
            uf = u[undecided].astype(np.float64)
            usable = (g <= 2.0**20) & (yf < 2.0**50)
            yes = usable & ((uf + 1) * 2.0**-32 <= e - _MARGIN)
            no = usable & (uf * 2.0**-32 >= e + _MARGIN)
            accept[undecided[yes]] = True
            undecided = undecided[~(yes | no)]
        for j in undecided:
            gamma = (abs(int(y[j])) - c) ** 2 / (2 * sigma2)
            accept[j] = LazyUniform(int(u[j]), 32, source).below(exp_bounds(gamma))
        return y, accept

    return _fill(n, propose)


def discrete_gaussian(
    sigma2: Fraction | int, size: int, *, source: RandomSource | None = None
) -> NDArray[np.int64]:
    """``size`` exact draws with ``P(X = x) ∝ exp(-x²/(2σ²))`` on the integers.

    Contract: exact for every rational ``0 < σ² ≤ MAX_SCALE²``; adding it to an integer vector
    query of L2 sensitivity Δ is ``Δ²/(2σ²)``-zCDP (Canonne, Kamath, Steinke 2020, Thm 14).
    Rejection from a discrete Laplace with scale ``t = ⌊σ⌋ + 1`` accepted with probability
    ``exp(-(|Y| - σ²/t)²/(2σ²))`` (their Algorithm 3), the Bernoulli decided exactly.
    """
    s2, src = _positive(sigma2, "sigma2", MAX_SCALE * MAX_SCALE), resolve_source(source)
    return _in_chunks(lambda k: _discrete_gaussian(s2, k, src), check_size(size))


def discrete_gaussian_chunks(
    sigma2: Fraction | int, size: int, *, source: RandomSource | None = None
) -> Iterator[tuple[int, NDArray[np.int64]]]:
    """:func:`discrete_gaussian` ``(sigma2, size)`` as (offset, chunk) pairs, drawn one after
    the other when iterated: the same values from the same bytes, joined by the caller."""
    s2, src = _positive(sigma2, "sigma2", MAX_SCALE * MAX_SCALE), resolve_source(source)
    return _chunks(lambda k: _discrete_gaussian(s2, k, src), check_size(size))
