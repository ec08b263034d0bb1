"""Lowering: a compiled plan → sqlglot SQL trees, one module for every dialect.

The main statement computes, per group, every exact integer statistic the measurements need::

    WITH __rows AS (            -- rows: (__unit, __k0…, __x0…) after WHERE and the NULL rule
      SELECT unit AS __unit, key AS __k0, CAST(col AS DOUBLE) AS __x0 FROM t WHERE …),
    __bounded AS (              -- at most max_rows_per_group rows per (unit, group) and at most
      SELECT * FROM (           -- max_groups groups per unit, in a keyed-hash order
        SELECT *, ROW_NUMBER() OVER (PARTITION BY __unit     -- the unit's first G groups,
                    ORDER BY HASH(salt, __unit, __k0), __k0) -- ranked among the rows kept
                  AS __gr                                    -- per group (DENSE_RANK if R > 1)
        FROM (SELECT * FROM (
                SELECT *, ROW_NUMBER() OVER (PARTITION BY __unit, __k0
                            ORDER BY HASH(salt, …)) AS __rn FROM __rows)
              WHERE __rn <= R))
      WHERE __gr <= G)
                                -- with max_rows T < G·R, then the first T of those per unit:
                                -- ROW_NUMBER() OVER (PARTITION BY __unit ORDER BY HASH(…)) <= T
    SELECT __k0, COUNT(*) AS __n, SUM(<clamped fixed-point integer>) AS __m1, …
    FROM __bounded GROUP BY __k0

A declared domain of group keys is a condition of ``__rows``' WHERE: bounding chooses among the
rows it leaves. Without a privacy unit nothing is bounded, and a key that travels as it is is
kept by ``HAVING CASE WHEN COUNT(*) > 0 THEN __k0 END IN (…)`` instead — the same groups with
the same statistics, one test per group rather than per row (``_Lowering.having``).

Totality (DESIGN §1: whether the statement fails must not depend on one person's rows):

- the WHERE condition is made total (``TRY(…)``, or ``TRY_CAST`` / ``TRY_DIVIDE``… where the
  dialect has no ``TRY``): a row it cannot be evaluated on is left out;
- every per-row number is clamped *before* it is cast to an integer (``_integer``), so no
  value — ±inf, NaN, a huge magnitude — can make a cast fail;
- every numeric constant comes from ``veil.compile.constants.literal``: finite, read by the
  engine as exactly the double (or 64-bit integer) veil computed with;
- group keys travel in a lossless form chosen here (:func:`key_transport`): integers, strings,
  booleans and binary values as they are, everything else as text cast *before* grouping, bins
  (and public keys of the other types) as their index — so the groups Python sees are exactly
  the groups the engine formed, and decoding them never fails.

The keyed hash covers the secret per-query salt, the unit and every column
the aggregation uses, so the order depends only on the unit's own rows and ties are only
between rows that contribute identically. The group rank breaks hash ties by the keys, so
distinct groups never share a rank. It ranks the rows the row bound kept, not every row: each
group keeps its first row, so those rows hold all of the unit's groups, and no row is joined
back (the form before ranked the distinct (unit, group) pairs and joined every row to the kept
ones, which also dropped the rows of a NULL unit). DuckDB runs ``__rn <= 1`` as a hash
aggregation (``arg_min``), so with R = 1 the group rank sorts one row per (unit, group); where
nearly every row is a (unit, group) of its own and R > 1, nearly every row is ranked twice.
Quantile
measurements add one statement each: row counts per (group, bucket) over the same bounded rows
(same salt, same order, hence the same rows). What the Session runs is ``together``: the main
statement and every quantile's (group, bucket) counts in one statement, one scan of the
bounded rows grouped by ``GROUPING SETS ((keys), (keys, __q0), …)`` — the same rows and
counts as the separate statements (a conformance test compares them on every engine), without
a second bounding window. On DuckDB (``Dialect.cells_as_rows``) the per-group statistics
instead carry, per quantile of a fine grid, the list of its bounded rows' cells
(``ARRAY_AGG``, one aggregation of the rows: each group's list is read as its rows, of
which the draw sorts only a window around the target rank, ``veil.release.quantiles``),
sparing DuckDB a hash aggregation of every distinct cell and a second branch shipping each
row's cell; a coarse grid's counts per (group, cell) follow by ``UNION ALL``. A mode's counts
per (group, candidate) ride in the same statement as a coarse grid's do (its rows outside the
candidates with the cell −1, dropped when the output is split), so a MODE costs no second scan
either.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np
from sqlglot import exp
from sqlglot.errors import ErrorLevel

from veil.compile.constants import EXACT_INTEGER_LITERAL, literal, nearest_double
from veil.compile.dialect import Dialect
from veil.compile.statistics import bucket_sql, mode_bucket_sql, statistic_sql
from veil.compile.strata import group_bounds_key
from veil.errors import InternalError, UnsupportedQueryError
from veil.plan.nodes import (
    Aggregate,
    ColumnBounds,
    ColumnType,
    Filter,
    GroupKey,
    KeyValue,
    Measurement,
    Plan,
    Scan,
)

__all__ = [
    "BUCKET_COLUMN",
    "BUCKET_COUNT_COLUMN",
    "COUNT_COLUMN",
    "UNITS_COLUMN",
    "KeyTransport",
    "Lowered",
    "key_transport",
    "lower",
    "to_sql",
]

COUNT_COLUMN = "__n"
UNITS_COLUMN = "__u"
BUCKET_COLUMN = "__b"
BUCKET_COUNT_COLUMN = "__c"
ROWS_ABOVE = 1 << 16  # a quantile grid with more cells ships rows, not counts (``cells_as_rows``)


@dataclass(frozen=True)
class Lowered:
    """The SQL of one query: ``main`` (one row per group: keys, ``__n``, ``__u``, and one
    column per non-quantile measurement) and one statement per quantile measurement (rows:
    keys, ``__b`` bucket, ``__c`` count). ``keys`` names the key columns in order;
    ``columns`` maps a measurement name to its column in ``main``.

    ``together`` (when the query has quantiles or modes) is ``main`` and every quantile's and
    mode's cell counts in one statement over one scan of the bounded rows: ``GROUP BY GROUPING
    SETS ((keys), (keys, __q0), …)``. Its rows whose ``cells`` columns are all NULL are
    ``main``'s rows; the rows whose column ``__qi`` is not NULL are cells, with the cell's row
    count in ``__n`` (a quantile's cell is never NULL: the NULL rule left those rows out).
    ``cells`` maps each quantile or mode measurement to its column; those with the same cell
    expression (a column's MIN, MAX and MEDIAN on one grid) share one column, counted once. On a
    ``cells_as_rows`` dialect a cell may come in several rows, whose counts add up, and the
    columns ``listed`` (a subset of ``cells``' columns) are instead one list per ``main`` row:
    the cells of that group's bounded rows, one per row (NULL for no row), NULL in the other
    rows."""

    main: exp.Expression
    quantiles: tuple[tuple[str, exp.Expression], ...]
    keys: tuple[str, ...]
    columns: tuple[tuple[str, str], ...]
    together: exp.Expression | None = None
    cells: tuple[tuple[str, str], ...] = ()
    listed: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()
    """The ``cells`` columns of mode measurements (a row outside the candidates: cell −1)."""

    @property
    def separate(self) -> tuple[tuple[str, exp.Expression], ...]:
        """The statements to run beside ``together`` (or ``main``): the cell counts of the
        measurements ``together`` does not carry (none: it carries every quantile's and
        mode's), or all of ``quantiles`` when there is no ``together``."""
        inside = {name for name, _ in self.cells}
        return tuple((name, t) for name, t in self.quantiles if name not in inside)


def to_sql(tree: exp.Expression, dialect: str) -> str:
    """Generate SQL text; an unsupported construct raises instead of being dropped."""
    return tree.sql(dialect=dialect, unsupported_level=ErrorLevel.RAISE)


def _col(name: str, table: str | None = None) -> exp.Column:
    return exp.column(name, table=table, quoted=True)


@functools.lru_cache(maxsize=64)
def _data_type(name: str, dialect: str) -> exp.DataType:
    """The type ``name`` as ``dialect`` parses it, parsed once (a parse costs ~1 ms; callers
    insert a copy, never this tree)."""
    return exp.DataType.build(name, dialect=dialect)


def _as(expression: exp.Expr, name: str) -> exp.Expr:
    """``expression AS "name"``, in place (the lowering owns every tree it builds)."""
    return exp.alias_(expression, name, quoted=True, copy=False)


def _value(v: KeyValue) -> exp.Expr:
    if v is None:
        return exp.Null()
    if isinstance(v, bool):
        return exp.Boolean(this=v)
    if isinstance(v, str):
        return exp.Literal.string(v)
    return literal(v)


_RUN = 3
"""The shortest run of consecutive integers a domain lists as one ``BETWEEN``."""
_RANGES = 32
"""At most this many ``BETWEEN`` per key (beyond, the domain is one ``IN`` list)."""


def _members(col: exp.Expr, values: list[KeyValue], integer: bool) -> list[exp.Expr]:
    """The condition that ``col`` is one of ``values`` (none NULL), as at most one
    predicate: ``IN`` the values, except that on an integer column each run of ≥ 3
    consecutive integers is one ``BETWEEN lo AND hi`` — the same rows exactly (an integer x
    lies in [lo, hi] iff it is one of lo, lo + 1, …, hi; a NULL matches neither), and a
    million-key domain that is a range is one comparison instead of a million literals."""
    if not values:
        return []
    ints = [v for v in values if isinstance(v, int) and not isinstance(v, bool)]
    if not integer or len(ints) != len(values):
        return [exp.In(this=col.copy(), expressions=[_value(v) for v in values])]
    ranges: list[exp.Expr] = []
    single: list[exp.Expr] = []
    ordered, runs = _runs(ints)
    for lo, hi in runs:
        if hi - lo + 1 >= _RUN:
            ranges.append(exp.Between(this=col.copy(), low=literal(lo), high=literal(hi)))
        else:
            single.extend(literal(v) for v in range(lo, hi + 1))
    if len(ranges) > _RANGES:  # a domain of many short runs: one flat IN (no deep OR tree)
        return [exp.In(this=col.copy(), expressions=[literal(v) for v in ordered])]
    if single:
        ranges.append(exp.In(this=col.copy(), expressions=single))
    either = ranges[0]
    for r in ranges[1:]:
        either = exp.Or(this=either, expression=r)
    return [either if len(ranges) == 1 else exp.paren(either, copy=False)]


def _runs(ints: list[int]) -> tuple[list[int], list[tuple[int, int]]]:
    """The distinct ``ints`` in order, and their maximal runs of consecutive integers as
    (first, last) — found by numpy when every value fits in 64 bits (a million-key range in
    milliseconds), else in Python; the same runs either way."""
    try:
        arr = np.sort(np.asarray(ints, dtype=np.int64))
    except OverflowError:
        arr = None
    if arr is not None:
        if arr.size > 1:  # distinct: a sort and a comparison (np.unique hashes: slower here)
            arr = arr[np.concatenate(([True], arr[1:] != arr[:-1]))]
        # a break where the next value is not one more: a difference that wraps past 2^63
        # is b − a − 2^64 ≠ 1, so wrapping never joins two values that are not consecutive
        cuts = np.flatnonzero(np.diff(arr) != 1) + 1 if arr.size > 1 else np.array([], np.int64)
        firsts = np.concatenate(([0], cuts)).astype(np.int64)
        lasts = np.concatenate((cuts - 1, [arr.size - 1])).astype(np.int64)
        ordered: list[int] = arr.tolist()
        runs = [
            (ordered[a], ordered[b]) for a, b in zip(firsts.tolist(), lasts.tolist(), strict=True)
        ]
        return ordered, runs
    ordered = sorted(set(ints))
    runs = []
    start = 0
    for i in range(1, len(ordered) + 1):
        if i < len(ordered) and ordered[i] == ordered[i - 1] + 1:
            continue
        runs.append((ordered[start], ordered[i - 1]))
        start = i
    return ordered, runs


def _engine_double(v: Fraction | int | float) -> float | None:
    """The double an engine computes with where :func:`literal` writes ``v``: an exponent-form
    literal is exactly the nearest double; an integer literal is converted by the engine, known
    only when the integer is a double itself (None otherwise)."""
    x = nearest_double(v)
    integer = isinstance(v, int) or (isinstance(v, Fraction) and v.denominator == 1)
    if integer and abs(int(v)) < EXACT_INTEGER_LITERAL and Fraction(x) != v:
        return None  # written as the integer: the engine rounds it its own way
    return x


_CELL_TOP_MAX = 1 << 48  # past it, two roundings may move a scaled value by ≥ 1/8 of a cell


def cell_top(m: Measurement, upper: Fraction | float) -> float | Fraction | None:
    """The top u to clamp quantile ``m``'s column at (instead of ``upper``, the clamp's upper
    bound) so that no row's cell needs a clamp of its own; None where there is none.

    The engine's cell of a clamped value x is f(x) = floor(fl(fl(x − c)·s)) with the doubles
    c (the centre) and s (1/step) as :func:`literal` writes them; f is non-decreasing in x
    (each rounding to nearest keeps order). ``bucket_sql``'s formula is
    min(f(clamp(x, lo, upper)), limit − 1) (its lower clamp is dropped when ``above_centre``).

    - If the exact value (upper − c)·s is at most limit − 1/4 and f(upper) ≤ limit − 1, u is
      ``upper`` itself: every clamped x ≤ upper has f(x) ≤ f(upper) ≤ limit − 1, so the
      ``min`` never binds.
    - Otherwise u is the double nearest c + (limit − 1/2)/s, the middle of the last cell,
      provided it lies at most at ``upper``, its exact scaled value is within 1/4 of
      limit − 1/2 and f(u) = limit − 1 (Python's doubles are the engine's). For x ≤ u both
      forms give f(x) (≤ f(u) = limit − 1); for x above u the formula gives
      min(f(min(x, upper)), limit − 1) = limit − 1, as f(min(x, upper)) ≥ f(u), and the new
      form f(u) = limit − 1.

    The margins (1/4 of a cell) exceed the two roundings' error, at most 2^-51·limit ≤ 1/8
    below 2^48 cells: an engine rounding differently by an ulp still computes a cell in
    [0, limit − 1] at u, so the cast that follows stays total. A grid of one cell, more than
    2^48 cells, or a centre, step or bound the engine may read otherwise has no top (None).
    The caller also requires u ≥ the clamp's lower bound."""
    limit = m.limit
    c, s, hi = _engine_double(m.centre), _engine_double(1 / m.step), _engine_double(upper)
    if c is None or s is None or hi is None or not 1 < limit <= _CELL_TOP_MAX or s <= 0:
        return None

    def exact(x: float) -> Fraction:
        return (Fraction(x) - Fraction(c)) * Fraction(s)

    def computed(x: float) -> int:
        return math.floor((x - c) * s)

    if exact(hi) <= limit - Fraction(1, 4) and computed(hi) <= limit - 1:
        return upper
    u = nearest_double(Fraction(c) + (limit - Fraction(1, 2)) / Fraction(s))
    if (
        Fraction(u) > Fraction(hi)
        or abs(exact(u) - (limit - Fraction(1, 2))) > Fraction(1, 4)
        or computed(u) != limit - 1
    ):
        return None
    return u


def _least(a: exp.Expr, b: exp.Expr) -> exp.Expr:
    return exp.func("LEAST", a, b)


def _greatest(a: exp.Expr, b: exp.Expr) -> exp.Expr:
    return exp.func("GREATEST", a, b)


def _clamp(e: exp.Expr, lo: exp.Expr, hi: exp.Expr) -> exp.Expr:
    return _least(_greatest(e, lo), hi)


_RANKS = 1 << 62  # more rows than any unit can have: a larger limit bounds the same rows


def _bin_search(x: exp.Expr, e: Sequence[Fraction]) -> exp.Expr:
    """The index of the bin ``[e_i, e_{i+1})`` (the last one closed) of ``x``, a number
    already known to lie in ``[e0, e_n]``: a balanced tree of ``CASE WHEN x < e_mid``, so a
    row makes ⌈log2(bins)⌉ comparisons (a chain of one test per bin held a worker 28 s for
    2,500 edges on 200 k rows). Each edge is compared once on every path, with the same
    literal as the bounds, so the bins are exactly those of the chain."""

    def tree(lo: int, hi: int) -> exp.Expr:  # the bins lo … hi − 1
        if hi - lo == 1:
            return exp.Literal.number(lo)
        mid = (lo + hi) // 2
        below = exp.LT(this=x.copy(), expression=literal(e[mid]))
        return exp.Case(ifs=[exp.If(this=below, true=tree(lo, mid))], default=tree(mid, hi))

    return tree(0, len(e) - 1)


def _index_tree(index: exp.Expr, values: Sequence[exp.Expr]) -> exp.Expr:
    """``values[index]`` for an integer ``index`` in ``[0, len(values))``, as a balanced tree
    of ``CASE WHEN index < mid`` (⌈log2(n)⌉ comparisons a row; an index outside the range
    takes the nearest end's value, NULL the last's)."""

    def tree(lo: int, hi: int) -> exp.Expr:
        if hi - lo == 1:
            return values[lo].copy()
        mid = (lo + hi) // 2
        below = exp.LT(this=index.copy(), expression=exp.Literal.number(mid))
        return exp.Case(ifs=[exp.If(this=below, true=tree(lo, mid))], default=tree(mid, hi))

    return tree(0, len(values))


def _rank_limit(n: int) -> exp.Expr:
    """A contribution limit as the SQL bound on a row number or rank: ``n``, or 2^62 when it is
    larger (the same rows are kept: no partition has 2^62 rows), so that no engine has to
    read an integer literal beyond 64 bits."""
    return exp.Literal.number(min(n, _RANKS))


def _and(parts: Sequence[exp.Expr]) -> exp.Expr | None:
    if not parts:
        return None
    out = parts[0]
    for p in parts[1:]:
        out = exp.And(this=out, expression=p)
    return out


def _reading(node: exp.Expr) -> set[int]:
    """The ids of the nodes of ``node`` whose subtree holds a column: one pass, bottom up
    (``walk`` lists parents before children)."""
    reads: set[int] = set()
    for sub in reversed(list(node.walk())):
        if isinstance(sub, exp.Column) or any(id(c) in reads for c in sub.iter_expressions()):
            reads.add(id(sub))
    return reads


def _source(plan: Plan) -> tuple[Scan, exp.Expr | None]:
    predicate: exp.Expr | None = None
    node = plan
    while isinstance(node, Filter):
        mine = node.predicate.copy()
        for column in mine.find_all(exp.Column):  # names were checked exactly: quote them
            column.set("this", exp.to_identifier(column.name, quoted=True, copy=False))
            column.set("table", None)
        predicate = (
            mine
            if predicate is None
            else exp.And(this=exp.paren(mine), expression=exp.paren(predicate))
        )
        node = node.child
    if not isinstance(node, Scan):
        raise InternalError(f"the aggregation reads {type(node).__name__}, not a table scan")
    return node, predicate


_MAX_DOUBLE = Fraction(2**1024 - 2**971)  # the largest finite double
_SMALLEST_DOUBLE = Fraction(1, 2**1074)  # the smallest positive (subnormal) double
_TOP_GAP = Fraction(2**970)  # half the largest double's ulp


def _exact(x: Fraction) -> exp.Expr:
    """The exact decimal literal of a non-negative dyadic rational ``x`` (``n·5^k e-k`` for
    ``n / 2^k``): an arbitrary-precision NUMERIC reads exactly ``x``, a double column reads
    the nearest double (``x`` itself when it is one)."""
    k = x.denominator.bit_length() - 1
    if x < 0 or x.denominator != 1 << k:
        raise InternalError(f"{x} is not a non-negative dyadic rational")
    digits = str(x.numerator * 5**k)
    return exp.Literal.number(digits if k == 0 else f"{digits}e-{k}")


_PURE: tuple[type[exp.Expression], ...] = (
    exp.And,
    exp.Or,
    exp.Not,
    exp.Paren,
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.Is,
    exp.In,
    exp.Between,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Tuple,
    exp.Coalesce,
    exp.Nullif,
    exp.Greatest,
    exp.Least,
    exp.Lower,
    exp.Upper,
    exp.Length,
    exp.Like,
    exp.ILike,
    exp.StartsWith,
    exp.Case,
    exp.If,
)
"""Nodes a ``"pure"`` dialect evaluates on any value without raising (given the operand rule
of :meth:`_Lowering._pure`): comparisons, logic and string tests that never fail."""

_CONSTANT: tuple[type[exp.Expression], ...] = (
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Neg,
    exp.Paren,
    exp.Tuple,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.IntDiv,
    exp.Mod,
    exp.Cast,
    exp.DataType,
    exp.Interval,
    exp.Var,
)
"""Nodes allowed in a constant sub-tree (no column beneath) of a ``"pure"`` condition: the
engine evaluates such a tree while planning, so an error in it is raised by ``check`` — for
every table alike, before anything is charged — never by a row."""

_JOINS = (
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.In,
    exp.Between,
    exp.Coalesce,
    exp.Nullif,
    exp.Greatest,
    exp.Least,
)
"""Nodes that bring operands to one type: two columns of different types (or of real or
temporal types, whose implicit casts can fail on a value: NUMERIC → double, DATE →
TIMESTAMP) are refused in a ``"pure"`` condition."""


class _Lowering:
    def __init__(
        self, agg: Aggregate, dialect: Dialect, salt: int | None, exact_sums: bool
    ) -> None:
        self.agg = agg
        self.d = dialect
        self.salt = salt
        self.wide = dialect.exact_sum_type if exact_sums else dialect.wide_integer
        self.keys = tuple(f"__k{i}" for i in range(len(agg.keys)))
        read: list[str] = []  # every column an aggregate reads (the NULL rule applies to them)
        for a in agg.aggregates:
            # the privacy unit a unit-count reads is not a value: a NULL unit is one unit
            if a.column is not None and a.kind.column != "unit" and a.column not in read:
                read.append(a.column)
            if a.weights is not None and a.weights not in read:  # a row without a weight too
                read.append(a.weights)
        self.read = tuple(read)
        # the columns whose values are aggregated (carried through bounding as doubles); a
        # weighted sum's product is computed from its two columns (``_clamped``)
        # a MODE over listed candidates carries its candidate's index instead (any type)
        self.labels = {
            a.column: a.domain
            for a in agg.aggregates
            if a.function in ("mode", "top_k") and a.domain is not None and a.column is not None
        }
        cols = [
            c
            for c in read
            if any(m.column and c in agg.factors(m.column)
                   and not (m.statistic == "mode" and c in self.labels)
                   for m in agg.measurements)
        ]  # fmt: skip
        self.columns = tuple(cols)
        self.x = {c: f"__x{i}" for i, c in enumerate(cols)}
        self.candidates = {c: f"__d{i}" for i, c in enumerate(self.labels)}

    def clamp(self, e: exp.Expr, lo: exp.Expr | None, hi: exp.Expr) -> exp.Expr:
        """``e`` — a row's value, never NULL (the NULL rule removed the row), possibly NaN or
        ±inf — clamped into ``[lo, hi]`` (lo ≤ hi; ``lo`` None: ``e`` is known not to lie
        below the range, only its top is clamped): ``LEAST(GREATEST(e, lo), hi)``, or, where
        the dialect says so (``case_clamps``) and ``e`` is a column, by comparisons, which give
        the same double: for a number both are the nearest point of ``[lo, hi]``, and NaN,
        which sorts above every number in the engines, is ``hi`` in both. (A computed ``e``
        keeps the functions: its three copies in the comparisons cost DuckDB more to plan
        than the comparisons save on a small table.)"""
        if not self.d.case_clamps or not isinstance(e, exp.Column):
            return _least(e if lo is None else _greatest(e, lo), hi)
        ifs = [] if lo is None else [exp.If(this=exp.LT(this=e.copy(), expression=lo), true=lo)]
        ifs.append(exp.If(this=exp.GT(this=e.copy(), expression=hi), true=hi))
        return exp.Case(ifs=ifs, default=e)

    def above_centre(self, m: Measurement) -> bool:
        """Whether every bound a row of ``m``'s column is clamped to is at least ``m.centre``
        (a quantile's: its grid starts at the lower bound), so that the scaled value
        (clamp(x) − c)/step is never negative: the clamped double is ≥ the double of c (both
        literals rounded to nearest, which keeps their order), so the difference is ≥ 0 as
        computed (a zero's sign aside), and so is its product with the positive 1/step."""
        b = self.agg.bounds_of(m.column) if m.column is not None else None
        if b is None:
            return False
        return b.lower >= m.centre and all(lo >= m.centre for _, lo, _ in b.groups)

    def cast(self, e: exp.Expr, to: str) -> exp.Expr:
        return exp.Cast(this=e, to=_data_type(to, self.d.name).copy())

    def _real(self, column: str) -> exp.Expr:
        """Column ``column`` as a double, total: for a dialect whose cast can fail on a value
        (``real_cast_may_fail``), every value is mapped by comparisons in the column's own
        type, before any cast, to the double the cast gives where it gives one, and otherwise
        to the double it rounds to — NaN, ±inf beyond the double range, ±0 below it.

        PostgreSQL's NUMERIC → double precision cast (``strtod``, rounding to nearest) refuses
        exactly the magnitudes that round to ±inf (|v| ≥ 2^1024 − 2^970, the midpoint above
        the largest double) and to ±0 (0 < |v| ≤ 2^-1075, half the smallest subnormal);
        subnormals are accepted. Every constant is an exact NUMERIC literal of a double (or a
        power of two) — read as that very double by a ``double precision`` or ``real``
        column, so one expression serves every column type; the midpoints are reached by an
        exact subtraction or doubling inside the rare branch, never by a literal that a double
        column would fail to read."""
        col = _col(column)
        if not self.d.real_cast_may_fail or self.agg.child.field(column).type != "real":
            return self.cast(col, self.d.real_type)

        def special(text: str) -> exp.Expr:
            return self.cast(exp.Literal.string(text), self.d.real_type)

        def x() -> exp.Expr:
            return col.copy()

        top, tiny, gap = _exact(_MAX_DOUBLE), _exact(_SMALLEST_DOUBLE), _exact(_TOP_GAP)
        cast = self.cast(x(), self.d.real_type)
        # x > MAX: the cast gives MAX while x − MAX < 2^970 (half MAX's ulp), else fails
        above = (
            exp.Case()
            .when(exp.LT(this=exp.Sub(this=x(), expression=top.copy()), expression=gap.copy()),
                  cast.copy())
            .else_(special("Infinity"))
        )  # fmt: skip
        below = (
            exp.Case()
            .when(exp.LT(this=exp.Sub(this=exp.Neg(this=x()), expression=top.copy()),
                         expression=gap.copy()), cast.copy())
            .else_(special("-Infinity"))
        )  # fmt: skip
        # 0 < |x| < 2^-1074: the cast gives ±2^-1074 where 2|x| passes it, else fails (±0)
        doubled = exp.Add(this=x(), expression=x())
        tiny_case = (
            exp.Case()
            .when(exp.GT(this=doubled.copy(), expression=tiny.copy()), cast.copy())
            .when(exp.LT(this=doubled, expression=exp.Neg(this=tiny.copy())), cast.copy())
            .when(exp.GT(this=x(), expression=exp.Literal.number(0)), special("0"))
            .else_(special("-0"))
        )
        is_tiny = exp.and_(
            exp.GT(this=x(), expression=exp.Neg(this=tiny.copy())),
            exp.LT(this=x(), expression=tiny.copy()),
            exp.NEQ(this=x(), expression=exp.Literal.number(0)),
        )
        return (
            exp.Case()
            .when(exp.EQ(this=x(), expression=exp.Literal.string("NaN")), special("NaN"))
            .when(exp.GT(this=x(), expression=top.copy()), above)
            .when(exp.LT(this=x(), expression=exp.Neg(this=top.copy())), below)
            .when(is_tiny, tiny_case)
            .else_(cast)
        )

    def _is_nan(self, x: exp.Expr) -> exp.Expr:
        if self.d.nan_function is not None:
            return exp.func(self.d.nan_function, x)
        # NaN equals itself in this dialect (PostgreSQL): compare with the NaN literal
        nan = self.cast(exp.Literal.string("NaN"), self.d.real_type)
        return exp.EQ(this=x, expression=nan)

    def _total(self, predicate: exp.Expr) -> exp.Expr:
        """The row condition made total: a row on which it cannot be evaluated (a failed cast,
        an overflow, a division by zero, a bad pattern) is excluded as if it were false, so
        that whether the query fails never depends on private values. A ``"pure"`` dialect
        has no NULL-on-error forms: a condition that could raise on some value is refused
        here (``UnsupportedQueryError``, before anything is charged). ``predicate`` is the
        caller's own copy (:func:`_source`'s), rewritten in place: a long IN list is copied
        once per lowering, not three times."""
        if self.d.conditions == "try":
            return exp.Try(this=predicate)
        if self.d.conditions == "pure":
            self._pure(predicate)
            return exp.paren(predicate)
        functions = dict(self.d.try_functions)

        def fix(node: exp.Expr) -> exp.Expr:
            if type(node) is exp.Cast:
                return exp.TryCast(this=node.this, to=node.args["to"], safe=True)
            if isinstance(node, exp.Div):
                return exp.SafeDivide(this=node.this, expression=node.expression)
            name = functions.get(node.key)
            if name is not None:
                return exp.Anonymous(this=name, expressions=[node.this, node.expression])
            return node

        return exp.paren(predicate.transform(fix, copy=False))

    def _pure(self, node: exp.Expr) -> None:
        """Refuse a condition that could raise on some row (see :data:`Conditions`). One
        pass over the tree, without recursion: a chain of thousands of terms is as deep as it
        is long, and which subtrees read a column is found once, bottom up."""

        def refuse(what: str) -> UnsupportedQueryError:
            return UnsupportedQueryError(
                f"{what} in WHERE could fail on some rows on {self.d.name}, which has no "
                "NULL-on-error evaluation (whether the query fails would depend on private "
                "values); compare columns with literals (=, <, IN, BETWEEN, IS NULL, LIKE), or "
                "compute the value in a view of the table and query the view"
            )

        reads = _reading(node)
        stack = [node]
        while stack:
            sub = stack.pop()
            if id(sub) not in reads:
                for inner in sub.walk():
                    if not isinstance(inner, _CONSTANT):
                        raise refuse(f"{inner.key.upper()} ({inner.sql(dialect=self.d.name)[:40]})")
                continue
            if isinstance(sub, exp.Column):
                continue
            if isinstance(sub, exp.Cast) and sub.to.is_type(*exp.DataType.TEXT_TYPES):
                stack.append(sub.this)  # every value has a text form: the cast cannot fail
                continue
            if not isinstance(sub, _PURE):
                raise refuse(f"{sub.key.upper()} ({sub.sql(dialect=self.d.name)[:40]})")
            if isinstance(sub, exp.Like | exp.ILike):
                pattern = sub.expression
                escape = sub.args.get("escape")
                trailing = len(pattern.name) - len(pattern.name.rstrip("\\"))
                if not pattern.is_string or escape is not None or trailing % 2 == 1:
                    raise refuse(f"the pattern {pattern.sql(dialect=self.d.name)}")
            if isinstance(sub, exp.Case | exp.If):
                results = [sub.args.get("default"), sub.args.get("true"), sub.args.get("false")]
                results += [w.args.get("true") for w in sub.args.get("ifs") or ()]
                if any(r is not None and id(r) in reads for r in results):
                    raise refuse("a CASE whose result reads a column")
            if isinstance(sub, _JOINS):
                kinds = {
                    self.agg.child.field(c.name).type
                    for operand in sub.iter_expressions()
                    for c in operand.find_all(exp.Column)
                }
                mixed = sum(1 for operand in sub.iter_expressions() if id(operand) in reads)
                if mixed > 1 and (
                    len(kinds) > 1 or kinds & {"real", "temporal", "binary", "other"}
                ):
                    raise refuse(f"comparing two columns ({sub.sql(dialect=self.d.name)[:40]})")
            stack.extend(reversed(list(sub.iter_expressions())))  # left to right, as written

    # rows: (__unit, __k…, __x…) ---------------------------------------------------------------
    def rows(self) -> exp.Select:
        scan, predicate = _source(self.agg.child)
        select: list[exp.Expr] = []
        where: list[exp.Expr] = [] if predicate is None else [self._total(predicate)]
        if self.agg.privacy_unit is not None:
            select.append(_as(_col(self.agg.privacy_unit), "__unit"))
        for key, name in zip(self.agg.keys, self.keys, strict=True):
            select.append(_as(self._key(key, where), name))
        for c in self.columns:
            x = self._real(c)
            select.append(_as(x, self.x[c]))
        for c, name in self.candidates.items():
            select.append(_as(self._candidate(c), name))
        for c in self.read:
            # NULL rule: a row whose aggregated value is NULL or NaN leaves the aggregation
            where.append(exp.Not(this=exp.Is(this=_col(c), expression=exp.Null())))
            if self.agg.child.field(c).type == "real":
                where.append(exp.Not(this=self._is_nan(self._real(c))))
        if not select:  # COUNT(*) with row-level privacy reads no column
            select.append(_as(exp.Literal.number(1), "__one"))
        q = exp.select(*select, copy=False).from_(
            exp.Table(this=exp.to_identifier(scan.table, quoted=True, copy=False)), copy=False
        )
        cond = _and(where)
        return q.where(cond, copy=False) if cond is not None else q

    def _candidate(self, column: str) -> exp.Expr:
        """The index of the listed candidate a row's value equals, else NULL (total: ``=``
        against literals of the column's type, checked by the compiler)."""
        index = exp.Case()
        for i, v in enumerate(self.labels[column]):
            index = index.when(
                exp.EQ(this=_col(column), expression=_value(v)), exp.Literal.number(i)
            )
        return index

    def _key(self, key: GroupKey, where: list[exp.Expr]) -> exp.Expr:
        """The key as it travels to Python (see :func:`key_transport`)."""
        col = _col(key.column)
        if key.per_unit and key.edges is not None:
            return self._per_unit_bin(key.edges, key.within, key.distinct)
        if key.edges is not None:
            x = self._real(key.column)
            e = key.edges
            where.append(exp.Between(this=x.copy(), low=literal(e[0]), high=literal(e[-1])))
            where.append(exp.Not(this=self._is_nan(x.copy())))
            return _bin_search(x, e)
        if key.domain is not None:
            if self._kept_after_grouping(key):
                return col  # its domain is kept by ``having`` (see there)
            where.append(self._in_domain(key, col))
            if key_transport(self.agg.child.field(key.column).type) == "native":
                return col  # exact as it is: mapped to its index in Python
            index = exp.Case()
            for i, v in enumerate(key.domain):  # the first listed key a value equals wins
                equal: exp.Expr = (
                    exp.Is(this=col.copy(), expression=exp.Null())
                    if v is None
                    else exp.EQ(this=col.copy(), expression=_value(v))
                )
                index = index.when(equal, exp.Literal.number(i))
            return index
        if key_transport(self.agg.child.field(key.column).type) == "text":
            return self.cast(col, self.d.text_type)
        return col

    def _in_domain(self, key: GroupKey, col: exp.Expr) -> exp.Expr:
        """The condition that ``col`` (the key's column, or its native value as grouped) is one
        of the key's declared values (NULL too if the domain lists NULL)."""
        if key.domain is None:
            raise InternalError(f"key {key.column!r} has no declared domain")
        integer = self.agg.child.field(key.column).type == "integer"
        values: list[KeyValue] = [v for v in key.domain if v is not None]
        parts: list[exp.Expr] = _members(col, values, integer)
        if any(v is None for v in key.domain):
            parts.append(exp.Is(this=col.copy(), expression=exp.Null()))
        either = parts[0] if len(parts) == 1 else exp.Or(this=parts[0], expression=parts[1])
        return exp.paren(either)

    def _kept_after_grouping(self, key: GroupKey) -> bool:
        """Whether ``key``'s declared domain is kept after the grouping (``having``) rather
        than before it (``rows``' WHERE). Without a privacy unit nothing is bounded: each
        group's statistics are of its own rows alone, so dropping the groups outside the
        domain after grouping leaves the same groups with the same statistics as dropping
        their rows before — and the engine then tests each *group's* key against the domain
        instead of each row's. Only for keys that travel as they are (their grouped value is the
        column's own); with a unit the domain must come first, as bounding chooses among the
        rows it leaves."""
        return (
            self.agg.privacy_unit is None
            and key.domain is not None
            and key.edges is None
            and not key.per_unit
            and key_transport(self.agg.child.field(key.column).type) == "native"
        )

    def having(self) -> exp.Expr | None:
        """The declared domains kept after the grouping (:meth:`_kept_after_grouping`), on the
        grouped key columns; None when every domain is kept before it. Each key is read as
        ``CASE WHEN COUNT(*) > 0 THEN key END`` — the key itself, since every group has a row —
        so that no optimizer moves the test below the grouping, onto every row (DuckDB, Spark
        and PostgreSQL all push a condition on a grouped column down: it then cost as much as
        the ``WHERE``)."""
        some = exp.GT(this=exp.Count(this=exp.Star()), expression=exp.Literal.number(0))
        parts = [
            self._in_domain(key, exp.Case().when(some.copy(), _col(name)))
            for key, name in zip(self.agg.keys, self.keys, strict=True)
            if self._kept_after_grouping(key)
        ]
        return _and(parts)

    def _grouped(self, q: exp.Select, *by: exp.Expr) -> exp.Select:
        """``q`` grouped by ``by``, with :meth:`having`'s condition on the groups."""
        q = q.group_by(*by, copy=False)
        kept = self.having()
        return q if kept is None else q.having(kept, copy=False)

    def _per_unit_bin(
        self, e: Sequence[Fraction], within: Sequence[str] = (), distinct: bool = False
    ) -> exp.Expr:
        """The bin of the row's unit's row count (``COUNT(*) OVER (PARTITION BY unit)`` over the
        rows after WHERE and the NULL rule), clamped into ``[e0, e_n]`` first, so every row
        falls in exactly one bin (total: a count is a 64-bit integer, the edges finite).

        With ``within`` and ``distinct``: the number of distinct ``within`` tuples of the unit
        (its groups, NULL a value): ``DENSE_RANK`` ascending (NULLS FIRST) plus ``DENSE_RANK``
        in the exact reverse order (descending, NULLS LAST) minus 1, the same on every engine
        (no ``COUNT(DISTINCT …) OVER``, which PostgreSQL lacks). With ``within`` alone: the
        unit's mean rows per group, ``⌊rows / groups⌋``, binned in integers (``rows < e·groups``,
        no division; the inner edges are at most a few thousand, so no overflow). Either is a
        function of the unit's own rows."""
        if self.agg.privacy_unit is None:
            raise InternalError("a per-unit key without a privacy unit at lowering")
        unit = _col(self.agg.privacy_unit)
        rows = exp.Window(this=exp.Count(this=exp.Star()), partition_by=[unit.copy()])
        if not within:
            return self._binned(_clamp(rows, literal(e[0]), literal(e[-1])), e)

        def rank(desc: bool) -> exp.Expr:
            order = [exp.Ordered(this=_col(c), desc=desc, nulls_first=not desc) for c in within]
            return exp.Window(
                this=exp.Anonymous(this="DENSE_RANK", expressions=[]),
                partition_by=[unit.copy()],
                order=exp.Order(expressions=order),
            )

        groups = exp.paren(
            exp.Sub(
                this=exp.paren(exp.Add(this=rank(False), expression=rank(True))),
                expression=exp.Literal.number(1),
            )
        )
        if distinct:
            return self._binned(_clamp(groups, literal(e[0]), literal(e[-1])), e)
        case = exp.Case()  # mean rows per group ≥ 1 = e0: only the inner edges are compared
        for i in range(len(e) - 2):
            bound = exp.Mul(this=literal(e[i + 1]), expression=groups.copy())
            case = case.when(exp.LT(this=rows.copy(), expression=bound), exp.Literal.number(i))
        return case.else_(exp.Literal.number(len(e) - 2), copy=False)

    @staticmethod
    def _binned(n: exp.Expr, e: Sequence[Fraction]) -> exp.Expr:
        """The index of the bin of ``n`` (already clamped into ``[e0, e_n]``)."""
        case = exp.Case()
        for i in range(len(e) - 2):
            case = case.when(
                exp.LT(this=n.copy(), expression=literal(e[i + 1])),
                exp.Literal.number(i),
                copy=False,
            )
        return case.else_(exp.Literal.number(len(e) - 2), copy=False)

    # bounded rows ------------------------------------------------------------------------------
    def _hash(self, columns: Sequence[str]) -> exp.Expr:
        """The keyed 64-bit hash of ``columns`` (see :data:`veil.compile.dialect.HashStyle`)."""
        key: exp.Expr = (
            exp.Placeholder(this="salt") if self.salt is None else exp.Literal.number(self.salt)
        )
        if self.d.hash_style == "text":
            # one seeded hash of the row's record text, which is injective for a fixed list
            # of typed columns (NULL is an empty field; separators and quotes are quoted)
            row = exp.Anonymous(this="ROW", expressions=[_col(c) for c in columns])
            text = self.cast(row, self.d.text_type)
            return exp.Anonymous(this=self.d.hash_function, expressions=[text, key])
        inner = exp.Anonymous(
            this=self.d.hash_function, expressions=[key, *(_col(c) for c in columns)]
        )
        # hashed a second time with the salt: DuckDB's multi-argument HASH combines the
        # arguments' hashes weakly (two salts kept the same row of a 5-row unit 25 % of the
        # time instead of 20 %); the outer hash mixes the salt into the whole row hash
        return exp.Anonymous(this=self.d.hash_function, expressions=[key.copy(), inner])

    def bounded(self) -> exp.Select | None:
        """None when there is no privacy unit (each row is a unit: nothing to bound)."""
        if self.agg.privacy_unit is None:
            return None
        g = self.agg.contribution.max_groups
        r = self.agg.contribution.max_rows_per_group
        t = self.agg.contribution.max_rows
        one = g == 1 and r == 1  # one row per unit: at most one group and one row in it
        # the total bound T binds unless G·R ≤ T; where it binds, R ≥ T (G ≥ T) makes the
        # per-group row (group) bound redundant: T rows are at most T in a group (T groups)
        total = t is not None and not one and t < min(g, self._possible_groups()) * r
        row_hash = self._hash(["__unit", *self.keys, *self.x.values(), *self.candidates.values()])
        part = [_col("__unit")] if one else [_col("__unit"), *(_col(k) for k in self.keys)]
        rn = exp.Window(
            this=exp.RowNumber(),
            partition_by=part,
            order=exp.Order(expressions=[exp.Ordered(this=row_hash)]),
        )
        ranked = exp.select(exp.Star(), _as(rn, "__rn"), copy=False).from_(
            exp.Table(this=exp.to_identifier("__rows")), copy=False
        )
        kept = exp.select(exp.Star(), copy=False).from_(
            ranked.subquery("__ranked", copy=False), copy=False
        )
        per_group = not (total and t is not None and r >= t)
        if per_group:
            kept = kept.where(exp.LTE(this=_col("__rn"), expression=_rank_limit(r)), copy=False)
        # rows: (__unit, __k…, __x…, __rn) — with G = R = 1 each unit's first row, otherwise its
        # first R rows (every row when R ≥ T binds) of each group it is in; __rn, the row's rank
        # in its group, is also what count_units reads
        if not one and self.keys and g < self._possible_groups() and not (total and g >= (t or 0)):
            kept = self._in_first_groups(kept, g, single=per_group and r == 1)
            # rows: of those, the rows of each unit's first G groups
        if not total or t is None:
            return kept
        # then at most T of the kept rows per unit, the first T in the same keyed-hash order (a
        # uniformly random choice given the salt), ties broken by __rn: a group's first row
        # precedes its others, so a unit with a row kept in a group keeps its __rn = 1 row
        tn = exp.Window(
            this=exp.RowNumber(),
            partition_by=[_col("__unit")],
            order=exp.Order(
                expressions=[exp.Ordered(this=row_hash.copy()), exp.Ordered(this=_col("__rn"))]
            ),
        )
        totalled = exp.select(exp.Star(), _as(tn, "__tn"), copy=False).from_(
            kept.subquery("__kept", copy=False), copy=False
        )
        within = exp.LTE(this=_col("__tn"), expression=_rank_limit(t))
        return (
            exp.select(exp.Star(), copy=False)
            .from_(totalled.subquery("__totalled", copy=False), copy=False)
            .where(within, copy=False)
        )

    def _in_first_groups(self, kept: exp.Select, g: int, single: bool) -> exp.Select:
        """Of the rows ``kept`` (each unit's first rows of every group it is in), those of the
        unit's first ``g`` groups in the keyed-hash order of its (unit, group) pairs, ties
        broken by the keys. Every group of a unit keeps its first row, so ranking the kept rows
        ranks all of the unit's groups: ``DENSE_RANK`` gives the rows of a group its rank, as
        they are peers (one hash, equal keys — NULL keys are peers in an ``ORDER BY``) and
        distinct groups never are (their keys differ); with one row per (unit, group)
        (``single``: the row bound R = 1 applied) it is ``ROW_NUMBER``. A NULL unit is one
        partition, hence one unit, as in the row bound.

        One window over at most R rows per (unit, group), after the row bound (which DuckDB
        runs as a hash aggregation), instead of ranking the distinct (unit, group) pairs and
        joining every row back to the kept pairs: no row is joined, and where units have several
        rows per group few rows are ranked (``tests/system/test_max_groups.py`` checks the rows
        kept against the definition, hash ties between groups included)."""
        group_hash = self._hash(["__unit", *self.keys])
        order = [exp.Ordered(this=group_hash), *(exp.Ordered(this=_col(k)) for k in self.keys)]
        rank = exp.RowNumber() if single else exp.Anonymous(this="DENSE_RANK", expressions=[])
        gr = exp.Window(
            this=rank, partition_by=[_col("__unit")], order=exp.Order(expressions=order)
        )
        ranked = exp.select(exp.Star(), _as(gr, "__gr"), copy=False).from_(
            kept.subquery("__group_rows", copy=False), copy=False
        )
        return (
            exp.select(exp.Star(), copy=False)
            .from_(ranked.subquery("__groups_ranked", copy=False), copy=False)
            .where(exp.LTE(this=_col("__gr"), expression=_rank_limit(g)), copy=False)
        )

    def _possible_groups(self) -> int | float:
        n = 1
        for k in self.agg.keys:
            if not k.is_public:
                return float("inf")
            n *= len(k.labels())
        return n

    # per-row fixed-point integers ---------------------------------------------------------------
    def _clamped(
        self, m: Measurement, tops: dict[Fraction, float | Fraction] | None = None
    ) -> exp.Expr:
        """``m``'s column clamped to its bounds (per group where it has per-group bounds); with
        ``tops``, each upper bound replaced by its value there (:meth:`cell`)."""
        if m.column is None:
            raise InternalError(f"measurement {m.name!r} has no column")
        b = self.agg.bounds_of(m.column)
        if b is None:
            raise InternalError(f"no bounds for {m.column!r} at lowering")
        factors = self.agg.factors(m.column)
        if len(factors) == 2:
            # a weighted sum's product clamp(x)·clamp(w): both factors clamped to finite
            # bounds first (no inf·0, no NaN: the NULL rule left those rows out), the double
            # product then clamped to the products' range (it can round past an end)
            x, w = (self._factor(c) for c in factors)
            return self.clamp(exp.Mul(this=x, expression=w), literal(b.lower), literal(b.upper))
        tops = tops or {}
        top = tops.get(Fraction(b.upper), b.upper)
        clamped = self.clamp(_col(self.x[m.column]), literal(b.lower), literal(top))
        if b.groups:
            return self._group_clamped(m.column, b, clamped, tops)
        return clamped

    def _group_clamped(
        self,
        column: str,
        b: ColumnBounds,
        clamped: exp.Expr,
        tops: dict[Fraction, float | Fraction] | None = None,
    ) -> exp.Expr:
        """Per-group bounds (``veil.compile.strata``): each row clamped to its group's bounds,
        chosen by the key *as it travels to Python* (its bin or domain index, or a native value
        compared with the listed literal), so a row's bounds are those of the group it is
        released in; a row of no listed group (none passes the key's WHERE) keeps ``clamped``."""
        key = group_bounds_key(self.agg, column)
        if key is None:
            raise InternalError(f"per-group bounds of {column!r} name no key at lowering")
        k = self.agg.keys[key]
        given = {(type(g).__name__, g): (lo, hi) for g, lo, hi in b.groups}
        native = k.edges is None and key_transport(self.agg.child.field(k.column).type) == "native"
        case = exp.Case()
        for i, label in enumerate(k.labels()):
            lo, hi = given[(type(label).__name__, label)]
            travelled = _col(self.keys[key])
            cond: exp.Expr
            if not native:
                cond = exp.EQ(this=travelled, expression=exp.Literal.number(i))
            elif label is None:
                cond = exp.Is(this=travelled, expression=exp.Null())
            else:
                cond = exp.EQ(this=travelled, expression=_value(label))
            x = _col(self.x[column])
            top = (tops or {}).get(Fraction(hi), hi)
            case = case.when(cond, self.clamp(x, literal(lo), literal(top)))
        return case.else_(clamped)

    def by_stratum(
        self, m: Measurement, values: Sequence[exp.Expr], otherwise: exp.Expr
    ) -> exp.Expr:
        """``values[i]`` for a row of stratum i of ``m`` (its bin, or its group of the key its
        per-group bounds name, as the key travels to Python: the same choice as
        :meth:`_group_clamped`), ``otherwise`` for a row of none."""
        key = m.stratum_key
        if key is None or len(values) != len(self.agg.keys[key].labels()):
            raise InternalError(f"the strata of {m.name!r} do not match its key at lowering")
        k = self.agg.keys[key]
        travelled = _col(self.keys[key])
        native = k.edges is None and key_transport(self.agg.child.field(k.column).type) == "native"
        if not native:  # an index 0 … n − 1 (NULL: a row of no listed group)
            tree = _index_tree(travelled, values)
            none = exp.Is(this=travelled.copy(), expression=exp.Null())
            return exp.Case(ifs=[exp.If(this=none, true=otherwise)], default=tree)
        case = exp.Case()
        for label, value in zip(k.labels(), values, strict=True):
            cond: exp.Expr = (
                exp.Is(this=travelled.copy(), expression=exp.Null())
                if label is None
                else exp.EQ(this=travelled.copy(), expression=_value(label))
            )
            case = case.when(cond, value, copy=False)
        return case.else_(otherwise, copy=False)

    def _factor(self, column: str) -> exp.Expr:
        """One factor of a product, clamped; where a double product that rounds to zero
        raises (``float_underflow_raises``), a factor below 1e-150 in magnitude is written as
        0, so a non-zero product is at least 1e-300 (no underflow), and the product's clamp
        keeps the row inside its range whatever the factor."""
        b = self.agg.bounds_of(column)
        if b is None:
            raise InternalError(f"no bounds for {column!r} at lowering")
        clamped = self.clamp(_col(self.x[column]), literal(b.lower), literal(b.upper))
        if not self.d.float_underflow_raises:
            return clamped
        tiny = exp.LT(this=exp.func("ABS", clamped.copy()), expression=literal(1e-150))
        return exp.paren(exp.Case().when(tiny, exp.Literal.number(0)).else_(clamped))

    def integer(self, e: exp.Expr, lo: int, hi: int) -> exp.Expr:
        """``e`` (a double) as an integer in ``[lo, hi]``, total: clamped *before* the cast, so
        no value — ±inf, NaN (which sorts above every number in both engines), a huge product
        — can make the cast fail; rounding a double in ``[lo, hi]`` stays in ``[lo, hi]``."""
        clamped = self.clamp(exp.func("ROUND", e), literal(lo), literal(hi))
        return self.cast(clamped, self.d.integer_type)

    def cell(self, m: Measurement) -> exp.Expr | None:
        """Quantile ``m``'s cell of a row as ``FLOOR((clamp(x) − c)/step)`` with no clamp of
        its own, where the column's clamps make it one: each upper bound u (the column's, and
        each group's) replaced by :func:`cell_top` of it, so the floor lies in
        ``[0, limit − 1]`` for every row (``above_centre``: never below 0; ≤ the floor at the
        top). The same cell as ``bucket_sql``'s clamped formula for every value (proof at
        :func:`cell_top`); a ``LEAST`` fewer per row. None where some bound has
        no such top (a weighted column, a grid of one cell or beyond 2^48 cells, a bound the
        engine may read otherwise, a group's lower bound above its top): the clamped formula
        then."""
        if m.column is None or not self.above_centre(m):
            return None
        b = self.agg.bounds_of(m.column)
        if b is None or len(self.agg.factors(m.column)) != 1:
            return None
        tops: dict[Fraction, float | Fraction] = {}
        for lo, hi in ((b.lower, b.upper), *((lo, hi) for _, lo, hi in b.groups)):
            top = cell_top(m, hi)
            if top is None or Fraction(top) < Fraction(lo):
                return None
            tops[Fraction(hi)] = top
        return exp.func("FLOOR", self.scaled(m, tops))

    def scaled(
        self, m: Measurement, tops: dict[Fraction, float | Fraction] | None = None
    ) -> exp.Expr:
        """(clamp(x) − c)·2^-e: exact scaling by a power of two, |·| ≤ limit up to rounding.

        Where a double product that rounds to zero raises (``float_underflow_raises``), a
        centred value below half a grid step is written as 0 instead of being multiplied:
        every use rounds or floors it to 0 anyway (|scaled| < 1/2; buckets are offsets ≥ 0),
        so the integers are the same as the plain product's, and no product, square or
        quotient of the statement can underflow (every non-zero |scaled| is ≥ 1/2)."""
        centred = exp.Sub(this=self._clamped(m, tops), expression=literal(m.centre))
        scaled: exp.Expr = exp.Mul(this=exp.paren(centred), expression=literal(1 / m.step))
        if not self.d.float_underflow_raises:
            return scaled
        # the threshold: the largest double ≤ step/2 (exactly step/2 for a sum's power-of-two
        # step; a quantile's step span/buckets need not be a double). Below it a value rounds
        # (sums) or floors (buckets, whose offsets are ≥ 0) to 0 as the product would; at or
        # above it, the product is ≥ threshold/step, far from underflow.
        half = m.step / 2
        threshold = float(half)
        if Fraction(threshold) > half:
            threshold = math.nextafter(threshold, 0.0)
        if threshold == 0 or not math.isfinite(threshold):
            raise UnsupportedQueryError(
                f"the bounds of {m.column!r} are too narrow for {self.d.name}'s doubles "
                f"(a grid step of {float(m.step):g}); widen them"
            )
        small = exp.LT(this=exp.func("ABS", centred.copy()), expression=literal(threshold))
        return exp.paren(exp.Case().when(small, exp.Literal.number(0)).else_(scaled))

    @property
    def integer_type(self) -> str:
        return self.d.integer_type

    @property
    def one_row_per_unit(self) -> bool:
        """Whether the bounded rows hold at most one row per unit (a row count is a unit
        count)."""
        c = self.agg.contribution
        one = (c.max_groups == 1 and c.max_rows_per_group == 1) or c.max_rows == 1
        return self.agg.privacy_unit is None or one

    # statements ------------------------------------------------------------------------------
    def _from_bounded(self, select: exp.Select) -> exp.Select:
        rows = self.rows()
        bounded = self.bounded()
        source = "__rows" if bounded is None else "__bounded"
        q = select.from_(exp.Table(this=exp.to_identifier(source)), copy=False)
        q = q.with_("__rows", as_=rows, copy=False)
        if bounded is not None:
            q = q.with_("__bounded", as_=bounded, copy=False)
        return q

    def main(self) -> tuple[exp.Select, tuple[tuple[str, str], ...]]:
        outs: list[exp.Expr] = [_col(k) for k in self.keys]
        outs.append(_as(exp.Count(this=exp.Star()), COUNT_COLUMN))
        columns: list[tuple[str, str]] = []
        for i, m in enumerate(self.agg.measurements):
            if m.statistic in ("quantile", "mode"):
                continue
            name = COUNT_COLUMN if m.statistic == "count" else f"__m{i}"
            if m.statistic == "count_units":
                name = UNITS_COLUMN
            if name != COUNT_COLUMN:
                outs.append(_as(statistic_sql(m, self), name))
            columns.append((m.name, name))
        q = self._from_bounded(exp.select(*outs, copy=False))
        if self.keys:
            q = self._grouped(q, *(_col(k) for k in self.keys))
        return q, tuple(columns)

    def quantile(self, m: Measurement) -> exp.Select:
        outs: list[exp.Expr] = [_col(k) for k in self.keys]
        outs.append(_as(bucket_sql(m, self), BUCKET_COLUMN))
        outs.append(_as(exp.Count(this=exp.Star()), BUCKET_COUNT_COLUMN))
        q = self._from_bounded(exp.select(*outs, copy=False))
        position = exp.Literal.number(len(self.keys) + 1)
        return self._grouped(q, *(_col(k) for k in self.keys), position)

    def together(
        self, quantiles: Sequence[Measurement]
    ) -> tuple[exp.Select | exp.Union, tuple[str, ...], tuple[str, ...]]:
        """``main`` and the cell counts of ``quantiles`` (quantile and mode measurements) in
        one statement, each one's cell column (those with the same cells share one) and the
        columns ``listed`` (see
        :class:`Lowered`): the bounded rows are scanned once and grouped by every grouping set
        at once; the other statistics are computed at the cell level too (and ignored)."""
        main, _ = self.main()

        def key(m: Measurement) -> tuple[str, int]:
            if m.statistic == "mode":  # (a row outside the candidates: the cell −1, see below)
                return f"mode {self._mode_candidate(m).sql()}", m.limit
            return bucket_sql(m, self).sql(), m.limit

        # quantiles whose cells are the same expression (a column's MIN, MAX and MEDIAN on one
        # grid) share one cell column: computed, grouped and listed once
        column_of: dict[tuple[str, int], str] = {}
        same = [key(m) for m in quantiles]
        for k in same:
            column_of.setdefault(k, f"__q{len(column_of)}")
        names = tuple(column_of[k] for k in same)
        distinct = tuple(dict.fromkeys(names))
        first = [names.index(n) for n in distinct]  # a quantile measured in each column
        # rows: the bounded rows with each quantile's cell (computed once per row, below the
        # grouping, so every engine groups a column, not an expression)
        source = "__rows" if self.agg.privacy_unit is None else "__bounded"
        listed: tuple[str, ...] = ()
        if self.d.cells_as_rows:
            listed = tuple(n for n, i in zip(distinct, first, strict=True)
                           if quantiles[i].statistic == "quantile"
                           and quantiles[i].limit > ROWS_ABOVE)  # fmt: skip

        def cell(m: Measurement, name: str) -> exp.Expr:
            if m.statistic == "mode":
                # a row outside the candidates counts for none: its cell is −1 (a candidate is
                # ≥ 0), which ``split_together`` drops, as the mode's own statement leaves the
                # row out — a grouping set cannot filter its rows, and a NULL cell would read
                # as a row of ``main``
                return exp.func("COALESCE", self._mode_candidate(m), exp.Literal.number(-1))
            # a listed grid of at most 2^32 cells lists them as 32-bit unsigned integers:
            # every cell is an integer in [0, limit − 1] already (clamped before its cast),
            # so the cast is exact and total, and DuckDB builds and exports half the bytes
            # (bench_peers' 1 M cells: 6 % less engine CPU); cast once, from the double
            small = name in listed and m.limit <= 1 << 32
            return bucket_sql(m, self, "UINTEGER" if small else None)

        celled = exp.select(
            exp.Star(),
            *(_as(cell(quantiles[i], n), n) for n, i in zip(distinct, first, strict=True)),
            copy=False,
        ).from_(exp.Table(this=exp.to_identifier(source)), copy=False)
        if self.d.cells_as_rows:
            return self._together_rows(main, celled, distinct, listed), names, listed
        main.set("group", None)
        main = main.with_("__celled", as_=celled, copy=False)
        main.set("from_", exp.From(this=exp.Table(this=exp.to_identifier("__celled"))))
        keys = [_col(k) for k in self.keys]
        sets = [exp.Tuple(expressions=[k.copy() for k in keys])]
        sets += [exp.Tuple(expressions=[*(k.copy() for k in keys), _col(n)]) for n in distinct]
        main.set("group", exp.Group(grouping_sets=[exp.GroupingSets(expressions=sets)]))
        main.select(*(_col(n) for n in distinct), copy=False)
        return main, names, ()

    def _together_rows(
        self,
        main: exp.Select,
        celled: exp.Select,
        names: Sequence[str],
        listed: Sequence[str],
    ) -> exp.Select | exp.Union:
        """``together`` as ``main`` with, per quantile of a fine grid (``listed``: more than
        ``ROWS_ABOVE`` cells, nearly every bounded row in a cell of its own), the list of its
        group's bounded rows' cells, and its other cell columns NULL; then ``UNION ALL`` one
        part per coarser quantile: its rows counted per (group, cell) in the engine (rows:
        keys, ``__n``, statistics…, ``__q0``…; a cell's count is the sum of its rows')."""
        null_cell = exp.cast(exp.Null(), self.d.integer_type)
        outputs = [e.alias_or_name for e in main.expressions]
        main.select(
            *(
                _as(exp.ArrayAgg(this=_col(n)) if n in listed else null_cell.copy(), n)
                for n in names
            ),
            copy=False,
        )
        if listed:  # the lists aggregate the cells: main's rows come from __celled
            main.set("from_", exp.From(this=exp.Table(this=exp.to_identifier("__celled"))))
        ctes = main.args.pop("with_")
        parts: list[exp.Select] = [main]
        for name in names:
            if name in listed:
                continue
            row: list[exp.Expr] = [_col(k) for k in self.keys]
            row.append(_as(exp.Count(this=exp.Star()), COUNT_COLUMN))
            row += [_as(exp.Null(), o) for o in outputs[len(self.keys) + 1 :]]
            row += [
                _col(n) if n == name else _as(exp.Null() if n in listed else null_cell.copy(), n)
                for n in names
            ]
            part = exp.select(*row, copy=False).from_("__celled", copy=False)
            part = self._grouped(part, *(_col(k) for k in self.keys), _col(name))
            parts.append(part)
        union: exp.Select | exp.Union = parts[0]
        for part in parts[1:]:
            union = exp.union(union, part, distinct=False, copy=False)
        union.set("with_", ctes)
        return union.with_("__celled", as_=celled, copy=False)

    def _mode_candidate(self, m: Measurement) -> exp.Expr:
        """A bounded row's candidate for mode measurement ``m``: its index among the listed
        candidates, or its integer offset from the candidates' start (NULL: none)."""
        if m.column is None:
            raise InternalError(f"measurement {m.name!r} has no column")
        if m.column in self.candidates:
            return _col(self.candidates[m.column])
        return mode_bucket_sql(m, _col(self.x[m.column]), self)

    def mode(self, m: Measurement) -> exp.Select:
        """Row counts per (group, candidate) of mode measurement ``m`` over the bounded rows;
        rows outside the candidates are left out (rows: keys, ``__b``, ``__c``)."""
        candidate = self._mode_candidate(m)
        outs: list[exp.Expr] = [_col(k) for k in self.keys]
        outs.append(_as(candidate, BUCKET_COLUMN))
        outs.append(_as(exp.Count(this=exp.Star()), BUCKET_COUNT_COLUMN))
        q = self._from_bounded(exp.select(*outs, copy=False))
        q = q.where(exp.Not(this=exp.Is(this=candidate.copy(), expression=exp.Null())), copy=False)
        position = exp.Literal.number(len(self.keys) + 1)
        return self._grouped(q, *(_col(k) for k in self.keys), position)


def lower(
    agg: Aggregate, dialect: Dialect, *, salt: int | None, exact_sums: bool = False
) -> Lowered:
    """The SQL trees computing ``agg``'s exact statistics (see the module docstring).

    Precondition: ``agg`` is compiled (its measurements are built) and passed the rules'
    number checks. ``salt`` is the secret per-query key of the bounding order
    (0 ≤ salt < 2^63); ``None`` writes a ``salt`` placeholder instead (SQL to show, never to
    run: ``explain``). ``exact_sums`` accumulates the fixed-point sums in the dialect's
    ``exact_sum_type`` (for an engine whose 64-bit sums wrap, when a group is too large to
    certify them: same values, slower).
    """
    if not agg.measurements:
        raise InternalError("lowering an aggregation whose measurements are not built")
    if salt is not None and not 0 <= salt < 2**63:
        raise InternalError("the bounding salt must be a 63-bit non-negative integer")
    low = _Lowering(agg, dialect, salt, exact_sums)
    main, columns = low.main()
    quantiles = tuple(
        (m.name, low.quantile(m)) for m in agg.measurements if m.statistic == "quantile"
    ) + tuple((m.name, low.mode(m)) for m in agg.measurements if m.statistic == "mode")
    inside = [m for m in agg.measurements if m.statistic == "quantile"]
    inside += [m for m in agg.measurements if m.statistic == "mode"]
    if not inside:
        return Lowered(main=main, quantiles=quantiles, keys=low.keys, columns=columns)
    together, names, listed = low.together(inside)
    cells = tuple((m.name, n) for m, n in zip(inside, names, strict=True))
    modes = tuple(dict.fromkeys(n for m, n in zip(inside, names, strict=True)
                                if m.statistic == "mode"))  # fmt: skip
    return Lowered(
        main, quantiles, low.keys, columns, together=together, cells=cells, listed=listed,
        modes=modes,
    )  # fmt: skip


KeyTransport = Literal["native", "bytes", "text"]


def key_transport(kind: ColumnType) -> KeyTransport:
    """How a group key of an unknown domain travels from the engine to Python, losslessly.

    Integers (any width Arrow holds in 64 bits), strings and booleans arrive as they are
    (``"native"``) and convert to Python exactly — a string that is not UTF-8 (Spark never
    checks, nor does DuckDB reading Arrow) included, see :mod:`veil.release.keys`. Binary
    values arrive as they are too (``"bytes"``: Arrow ``binary`` on every engine), and Python
    writes them as text — a cast in SQL would not do: Spark's text of a BINARY is its raw
    bytes, which need not be UTF-8. Every other type — floating point, DECIMAL and 128-bit
    integers (Arrow's ``decimal128(38, 0)`` cannot hold every HUGEINT), dates and times
    (Python's cannot hold years beyond 9999 or before 1, or nanoseconds), intervals, UUIDs,
    enums and nested values — is cast to text *in SQL, before grouping* (``"text"``), so the
    engine groups by that text: each row's group is a function of its own value (−0.0 and 0.0
    are two groups, every NaN one), and no group is ever merged, split or failed in Python.
    Histogram bins, and public-domain keys of the other types, travel as the integer index of
    their bin or key instead (a ``CASE``, the first listed key a value equals); public-domain
    keys of the native types travel as they are and Python maps them to their index.
    """
    if kind in ("integer", "string", "boolean"):
        return "native"
    return "bytes" if kind == "binary" else "text"
