"""The nodes of the query plan: frozen dataclasses that validate themselves.

A plan is a chain, from the leaf up::

    Scan ─► [Filter] ─► Aggregate ─► [Having | Sort | Limit | Project]*

``Scan`` and ``Filter`` describe private rows; ``Aggregate`` is the one differential-privacy
boundary (everything above it reads only released, noisy values and is post-processing).
Every node checks its arguments on construction (unknown column → ``SchemaError``, a
post-processing node on private rows → ``UnsupportedQueryError``, bad numbers →
``InvalidArgumentError`` / ``BoundsError``) and states its output schema with
:meth:`Plan.schema`.

The compiled parts of an :class:`Aggregate` (``budget``, ``measurements``, ``selection``) are
empty in a plan built by the SQL front end or the builder; the rewrite rules in
``veil.compile`` fill them in.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Literal, TypeVar, get_args

from sqlglot import exp

from veil.accounting.budget import Budget
from veil.aggregates import AggregateKind, kind
from veil.aggregates import kinds as aggregate_kinds
from veil.aggregates.base import Call, Statistic
from veil.errors import (
    BoundsError,
    InvalidArgumentError,
    SchemaError,
    UnsupportedQueryError,
)
from veil.noise.families import MECHANISMS, Mechanism
from veil.plan.memo import ByIdentity
from veil.plan.numbers import engine_number
from veil.plan.weighting import check_weights, product_name

if TYPE_CHECKING:
    from veil.plan.visitor import PlanVisitor

__all__ = [
    "AGGREGATE_FUNCTIONS",
    "MAX_AGGREGATES",
    "MAX_BIN_EDGES",
    "MAX_PUBLIC_GROUPS",
    "Aggregate",
    "AggregateCall",
    "AggregateFunction",
    "ColumnBounds",
    "ColumnType",
    "Contribution",
    "Field",
    "Filter",
    "GroupKey",
    "Having",
    "KeyValue",
    "Limit",
    "Measurement",
    "Mechanism",
    "Plan",
    "Project",
    "Scan",
    "Selection",
    "Sort",
    "SortKey",
    "Statistic",
    "Stratum",
    "as_fraction",
    "check_public_groups",
    "declare_hint",
    "product_name",
]

T = TypeVar("T")

ColumnType = Literal["integer", "real", "string", "boolean", "temporal", "binary", "other"]
"""The coarse type of a column; enough to decide what an aggregate may read and how a group key
of the column travels from the engine (``veil.compile.lower.key_transport``)."""

NUMERIC_TYPES: frozenset[str] = frozenset({"integer", "real"})

AggregateFunction = str
"""The name of a registered aggregate kind (``veil.aggregates``): "count", "sum", "avg"…"""
AGGREGATE_FUNCTIONS: tuple[str, ...] = tuple(k.name for k in aggregate_kinds())

KeyValue = str | int | float | bool | None
"""A group-key value in a public domain (JSON-serialisable)."""


def as_fraction(value: object, name: str) -> Fraction:
    """``value`` as an exact finite Fraction (floats read as the decimal they print as)."""
    if isinstance(value, bool) or not isinstance(value, int | float | Fraction | Decimal | str):
        raise InvalidArgumentError(f"{name} must be a number, got {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BoundsError(f"{name} must be finite, got {value!r}")
        return Fraction(repr(value))
    if isinstance(value, Decimal) and not value.is_finite():
        raise BoundsError(f"{name} must be finite, got {value!r}")
    try:
        return Fraction(value)
    except (ValueError, ZeroDivisionError) as exc:
        raise InvalidArgumentError(f"{name} must be a number, got {value!r}") from exc


def declare_hint(
    column: str, kind: ColumnType, table: str = "<table>", *, declarable: bool = True
) -> str:
    """How to declare a text column's type, for errors about a text column used as a number
    (a CSV file's columns are text unless declared); empty for other types, and when the
    source takes no declarations (not ``declarable``: PostgreSQL tables carry their own types)."""
    if kind != "string" or not declarable:
        return ""
    return (
        f"; if it holds numbers as text (a CSV file's columns are text unless declared), "
        f"declare its type: schema={{{table!r}: {{{column!r}: 'DOUBLE'}}}} in Python, "
        f"--column {column}:DOUBLE in the CLI"
    )


def _hash_of(values: tuple[KeyValue, ...] | None) -> int:
    return hash(values)


_domain_hash = ByIdentity(_hash_of)
"""The hash of a public domain (a tuple, or None), remembered by the tuple's identity: hashing
a million values takes milliseconds, and a domain's tuple never changes."""


def _set(obj: object, name: str, value: object) -> None:
    object.__setattr__(obj, name, value)


def _check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"{what} must be a non-empty string, got {name!r}")
    return name


# ── small value types ─────────────────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Field:
    """A named, typed column of a node's output."""

    name: str
    type: ColumnType

    def __post_init__(self) -> None:
        _check_name(self.name, "a column name")
        if self.type not in _COLUMN_TYPES:
            raise InvalidArgumentError(
                f"column type of {self.name!r} must be one of {get_args(ColumnType)}, "
                f"got {self.type!r}"
            )


_COLUMN_TYPES = frozenset(get_args(ColumnType))


@dataclass(frozen=True)
class ColumnBounds:
    """Clamping bounds ``[lower, upper]`` for one numeric column, each the exact double the
    engine clamps to (``veil.plan.numbers.engine_number`` of the number given).

    ``groups``: per-group bounds ``(key label, lower, upper)`` for the groups of one public
    GROUP BY key (``veil.compile.strata``), each inside ``[lower, upper]``; a row of the group
    with that key is clamped to its group's bounds."""

    column: str
    lower: Fraction
    upper: Fraction
    groups: tuple[tuple[KeyValue, Fraction, Fraction], ...] = ()

    def __post_init__(self) -> None:
        _check_name(self.column, "a bounded column")
        lo = engine_number(as_fraction(self.lower, f"the lower bound of {self.column!r}"))
        hi = engine_number(as_fraction(self.upper, f"the upper bound of {self.column!r}"))
        if lo > hi:
            raise BoundsError(
                f"bounds for {self.column!r} are empty: lower {float(lo):g} > upper "
                f"{float(hi):g}; pass bounds={{{self.column!r}: ({float(hi):g}, {float(lo):g})}}"
            )
        _set(self, "lower", lo)
        _set(self, "upper", hi)
        groups = []
        for label, g_lo, g_hi in tuple(self.groups):
            what = f"the bounds of {self.column!r} in group {label!r}"
            a, b = engine_number(as_fraction(g_lo, what)), engine_number(as_fraction(g_hi, what))
            if not lo <= a <= b <= hi:
                raise BoundsError(
                    f"{what}, ({float(a):g}, {float(b):g}), must be a non-empty interval inside "
                    f"the column's bounds ({float(lo):g}, {float(hi):g}); narrow them"
                )
            groups.append((label, a, b))
        if len({(type(k), k) for k, _, _ in groups}) != len(groups):
            raise BoundsError(f"per-group bounds of {self.column!r} name a group twice")
        # a canonical order (not the order given): equal bounds, equal plans
        _set(self, "groups", tuple(sorted(groups, key=lambda g: (type(g[0]).__name__, repr(g[0])))))

    @property
    def midpoint(self) -> Fraction:
        return (self.lower + self.upper) / 2

    @property
    def radius(self) -> Fraction:
        """Half the width: the largest |x − midpoint| after clamping."""
        return (self.upper - self.lower) / 2


@dataclass(frozen=True)
class Contribution:
    """How much one privacy unit may contribute: at most ``max_groups`` groups (L0), at most
    ``max_rows_per_group`` rows in each (L∞) and, when given, at most ``max_rows`` rows in all
    (the total-rows bound). Defaults: 1 and 1, no total (visible in ``explain``).

    With a privacy unit the engine enforces all three. Without one (each row is a unit)
    ``max_rows`` is the declared ``contributions=k``: each person has at most k rows, which
    veil cannot enforce and accounts for instead (``veil.compile.statistics``)."""

    max_groups: int = 1
    max_rows_per_group: int = 1
    max_rows: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_groups", "max_rows_per_group", "max_rows"):
            value = getattr(self, name)
            if name == "max_rows" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                flag = "--" + name.replace("_", "-")
                raise InvalidArgumentError(
                    f"{name} must be a positive integer, got {value!r}; e.g. {name}=1",
                    cli=f"{flag} must be a positive integer, got {value!r}; e.g. {flag} 1",
                )

    @staticmethod
    def of(
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        max_rows: int | None = None,
    ) -> Contribution:
        """The limits as an analyst gives them: a limit left out is 1, unless ``max_rows`` is
        given, which then bounds it alone (a unit with at most T rows has at most T groups and
        T rows in one)."""
        default = 1 if max_rows is None else Contribution(max_rows=max_rows).max_rows or 1
        return Contribution(
            default if max_groups is None else max_groups,
            default if max_rows_per_group is None else max_rows_per_group,
            max_rows,
        )


MAX_BIN_EDGES = 1025
"""Per-query cap: the most edges one ``BIN`` key may have (1,024 bins)."""
MAX_PUBLIC_GROUPS = 1 << 22
"""Per-query cap: the most public keys one query may list — each key's domain or bins, and
their product, the groups a query of public keys releases (4,194,304)."""
MAX_AGGREGATES = 100
"""Per-query cap: the most aggregates one SELECT may release."""


def check_public_groups(keys: Iterable[GroupKey]) -> None:
    """A query's public keys list at most :data:`MAX_PUBLIC_GROUPS` groups (the product of
    their counts): an ``UnsupportedQueryError`` naming the count and the cap otherwise, from
    the query alone (the compile rule ``check_numbers``, before anything is reserved)."""
    groups = 1
    for key in keys:
        if key.is_public:
            groups *= len(key.labels())
    if groups > MAX_PUBLIC_GROUPS:
        raise _too_many(
            "the GROUP BY's public keys", groups, "groups (the product of their counts)",
            MAX_PUBLIC_GROUPS, "group by fewer keys or split the domains over several queries",
        )  # fmt: skip


def _too_many(what: str, count: int, unit: str, cap: int, fix: str) -> UnsupportedQueryError:
    """The refusal of a query beyond a per-query cap (decided from the query alone)."""
    return UnsupportedQueryError(
        f"{what} has {count:,} {unit}, more than the {cap:,} veil takes in one query; {fix}"
    )


@dataclass(frozen=True)
class GroupKey:
    """One GROUP BY key.

    - ``column`` only: keys are the column's values; unknown to the analyst, so released
      through DP partition selection.
    - ``domain``: the public list of keys; every key in it is released (empty ones with a count
      of zero), rows with other keys are dropped.
    - ``edges``: a histogram over declared bins ``[e0, e1), [e1, e2), …, [e_{n-1}, e_n]``
      (the last bin closed); the key is the bin label ``"[e_i, e_{i+1})"`` (``"[e_{n-1},
      e_n]"`` for the last), every bin is
      released, rows outside ``[e0, e_n]`` or NULL are dropped.
    - ``edges`` with ``per_unit=True`` (``column`` the privacy unit): the bin of the number of
      rows the row's unit has among the aggregation's rows (after WHERE), clamped into
      ``[e0, e_n]`` — a function of the unit's own rows, so every row of a unit has the same
      key (``veil.autolimits``: a histogram of contributions per unit). With ``within``
      (columns of the aggregation's rows, not the unit): ``distinct=True`` bins the number of
      distinct ``within`` tuples the row's unit has (its groups; NULL is a value), else the
      number of rows of the row's (unit, ``within``) pair — still a function of the unit's
      own rows (``limits="auto_groups"``).
    ``alias`` is the output column name (defaults to ``column``).
    """

    column: str
    domain: tuple[KeyValue, ...] | None = None
    edges: tuple[Fraction, ...] | None = None
    alias: str = ""
    per_unit: bool = False
    within: tuple[str, ...] = ()
    distinct: bool = False

    def __post_init__(self) -> None:
        _check_name(self.column, "a group-by column")
        _set(self, "within", tuple(self.within))
        for c in self.within:
            _check_name(c, "a per-unit key's group column")
        if (self.within or self.distinct) and not self.per_unit:
            raise InvalidArgumentError(
                f"key {self.column!r}: within= and distinct= only qualify a per-unit key"
            )
        if self.distinct and not self.within:
            raise InvalidArgumentError(
                f"key {self.column!r}: distinct=True counts distinct within= columns; name them"
            )
        if not self.alias:
            _set(self, "alias", self.column)
        _check_name(self.alias, "a group-by alias")
        if self.domain is not None and self.edges is not None:
            raise InvalidArgumentError(
                f"group key {self.column!r} has both a domain and histogram edges; pass one"
            )
        if self.domain is not None:
            domain = tuple(self.domain)
            if len(domain) > MAX_PUBLIC_GROUPS:
                raise _too_many(
                    f"the public domain of {self.column!r}", len(domain), "keys",
                    MAX_PUBLIC_GROUPS, "split the domain over several queries",
                )  # fmt: skip
            plain = all(type(v) is int for v in domain) or all(type(v) is str for v in domain)
            for value in () if plain else domain:  # plain ints or strings: all allowed
                if not isinstance(value, str | int | float | bool) and value is not None:
                    raise InvalidArgumentError(
                        f"public domain of {self.column!r} must hold str/int/float/bool/None "
                        f"values, got {value!r}"
                    )
            if len(set(domain)) != len(domain):
                raise InvalidArgumentError(f"public domain of {self.column!r} repeats a key")
            if not domain:
                raise InvalidArgumentError(f"public domain of {self.column!r} is empty")
            _set(self, "domain", domain)
        if self.edges is not None:
            given = tuple(self.edges)
            if len(given) > MAX_BIN_EDGES:
                raise _too_many(
                    f"the BIN of {self.column!r}", len(given), "edges", MAX_BIN_EDGES,
                    "merge bins or split the range over several queries",
                )  # fmt: skip
            edges = tuple(as_fraction(e, f"a histogram edge of {self.column!r}") for e in given)
            if len(edges) < 2 or any(a >= b for a, b in itertools.pairwise(edges)):
                raise InvalidArgumentError(
                    f"histogram edges of {self.column!r} must be at least two strictly "
                    f"increasing numbers, got {[float(e) for e in edges]}"
                )
            doubles = tuple(engine_number(e) for e in edges)  # what the engine compares with
            for (a, b), (x, y) in zip(
                itertools.pairwise(edges), itertools.pairwise(doubles), strict=True
            ):
                if x >= y:
                    raise BoundsError(
                        f"histogram edges {_exact(a)} and {_exact(b)} of {self.column!r} are the "
                        f"same double ({float(x)!r}); space the edges further apart"
                    )
            _set(self, "edges", doubles)
        if self.per_unit and self.edges is None:
            raise InvalidArgumentError(
                f"a per-unit key of {self.column!r} bins the rows per unit: it needs edges"
            )

    def __hash__(self) -> int:
        """The hash of the fields, the domain's remembered by its identity
        (:data:`_domain_hash`): a plan is hashed as a memo key on every query."""
        return hash(
            (self.column, _domain_hash(self.domain), self.edges, self.alias, self.per_unit,
             self.within, self.distinct)
        )  # fmt: skip

    @property
    def is_public(self) -> bool:
        """True when the released key set does not depend on the data."""
        return self.domain is not None or self.edges is not None

    def labels(self) -> tuple[KeyValue, ...]:
        """The public keys in release order (the domain, or the bin labels)."""
        if self.domain is not None:
            return self.domain
        if self.edges is not None:
            return _bin_labels(self.edges)  # built once per edges tuple: read once per bin
        raise InvalidArgumentError(f"group key {self.column!r} has no public domain")


MAX_TOP_K = 64
"""The largest k of TOP_K(col, k) (k peels, each at ε/k)."""
_CHOICES = ("mode", "top_k")  # their candidates are checked when compiled (veil.compile.measure)


def _candidates(function: str, column: str | None, domain: object) -> tuple[KeyValue, ...]:
    """A MODE's public candidates, checked: distinct str/int/float/bool values, at least one."""
    if function not in ("mode", "top_k"):
        raise InvalidArgumentError(f"{function.upper()} takes no domain of candidates")
    values = tuple(domain) if isinstance(domain, tuple | list) else None
    fix = f"pass domains={{{column!r}: ['a', 'b', …]}}"
    if not values:
        raise InvalidArgumentError(f"the candidates of MODE({column}) are empty; {fix}")
    for v in values:
        if not isinstance(v, str | int | float | bool):
            raise InvalidArgumentError(
                f"the candidates of MODE({column}) must be str/int/float/bool values, got "
                f"{v!r}; {fix}"
            )
    if len({(type(v), v) for v in values}) != len(values):
        raise InvalidArgumentError(f"the candidates of MODE({column}) repeat a value; {fix}")
    return values


def _exact(x: Fraction) -> str:
    """``x`` in full: its exact decimal when it has one of at most 60 digits, else ``p/q``."""
    if x.denominator == 1:
        return str(x.numerator)
    for places in range(1, 61):
        scaled = x * 10**places
        if scaled.denominator == 1:
            digits = str(abs(scaled.numerator)).rjust(places + 1, "0")
            sign = "-" if x < 0 else ""
            return f"{sign}{digits[:-places]}.{digits[-places:]}"
    return f"{x.numerator}/{x.denominator}"


def _num(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{float(x):g}"


def _bin_label(lo: Fraction, hi: Fraction, *, closed: bool = False) -> str:
    return f"[{_num(lo)}, {_num(hi)}{']' if closed else ')'}"


def _labels_of(edges: tuple[Fraction, ...]) -> tuple[KeyValue, ...]:
    pairs = list(itertools.pairwise(edges))
    last = len(pairs) - 1  # the last bin is closed: it holds its upper edge
    return tuple(_bin_label(a, b, closed=i == last) for i, (a, b) in enumerate(pairs))


_bin_labels = ByIdentity(_labels_of)
"""The bin labels of an edges tuple, remembered by its identity: the calibration asks for a
key's labels once per bin (2,500 bins built 6 million labels, 45 s of a query)."""


@dataclass(frozen=True)
class AggregateCall:
    """One aggregate in the SELECT list, released as the output column ``alias``.

    ``column`` is the aggregated column (``None`` for COUNT(*)); ``quantile`` the q ∈ [0, 1] of
    a ``quantile`` call (MEDIAN is 1/2); ``weight`` the relative budget share (``None`` lets the
    compiler choose the split that minimises the error).
    """

    alias: str
    function: AggregateFunction
    column: str | None = None
    quantile: Fraction | None = None
    weight: Fraction | None = None
    domain: tuple[KeyValue, ...] | None = None  # MODE's public candidates (else its bounds')
    top: tuple[int, int] | None = None  # TOP_K: (this column's rank r, k)
    weights: str | None = None  # a survey-weight column (``veil.compile.weights``)

    def __post_init__(self) -> None:
        _check_name(self.alias, "an aggregate alias")
        k = kind(self.function)  # an unknown aggregate fails here, when the plan is built
        if self.domain is not None:
            _set(self, "domain", _candidates(self.function, self.column, self.domain))
        if (self.function == "top_k") != (self.top is not None):
            raise InvalidArgumentError(
                f"TOP_K needs its rank and k, and only TOP_K takes them ({self.alias!r}); "
                "e.g. TOP_K(col, 3)"
            )
        if self.top is not None:
            rank, picks = self.top
            if not all(
                isinstance(v, int) and not isinstance(v, bool) for v in (rank, picks)
            ) or not (1 <= rank <= picks <= MAX_TOP_K):
                raise InvalidArgumentError(
                    f"TOP_K(col, k) takes an integer k in [1, {MAX_TOP_K}], got {picks!r} "
                    f"({self.alias!r}); e.g. TOP_K(col, 3)"
                )
        if (self.weights is not None) != (k.weighted != "none"):
            raise InvalidArgumentError(
                f"{self.function.upper()} ({self.alias!r}) "
                + ("needs a weights column" if self.weights is None else "takes no weights")
            )
        if self.weights is not None:
            _check_name(self.weights, "a weights column")
        if self.column is None and k.column == "required":
            raise InvalidArgumentError(f"{self.function.upper()} needs a column ({self.alias!r})")
        if k.quantile == "argument":
            if self.quantile is None:
                raise InvalidArgumentError(f"quantile {self.alias!r} needs q in [0, 1]")
            q = as_fraction(self.quantile, f"the quantile of {self.alias!r}")
            if not 0 <= q <= 1:
                raise InvalidArgumentError(
                    f"quantile of {self.alias!r} must lie in [0, 1], got {float(q):g}"
                )
            _set(self, "quantile", q)
        elif self.quantile is not None:
            raise InvalidArgumentError(f"{self.function.upper()} takes no quantile argument")
        if self.weight is not None:
            w = as_fraction(self.weight, f"the budget weight of {self.alias!r}")
            if w <= 0:
                raise InvalidArgumentError(
                    f"budget weight of {self.alias!r} must be > 0, got {float(w):g}"
                )
            _set(self, "weight", w)

    def __hash__(self) -> int:
        """The hash of the fields, the domain's remembered by its identity (as
        :meth:`GroupKey.__hash__`)."""
        return hash(
            (self.alias, self.function, self.column, self.quantile, self.weight,
             _domain_hash(self.domain), self.top, self.weights)
        )  # fmt: skip

    @property
    def kind(self) -> AggregateKind:
        """The registered kind (``veil.aggregates``) that says what this call releases."""
        return kind(self.function)

    @property
    def q(self) -> Fraction:
        """The quantile this call releases (0 for MIN, 1 for MAX)."""
        k = self.kind
        if k.fixed_q is not None:
            return k.fixed_q
        if self.quantile is None:
            raise InvalidArgumentError(f"{self.alias!r} is not a quantile")
        return self.quantile

    @property
    def needs_bounds(self) -> bool:
        return self.kind.bounded and self.domain is None

    @property
    def value_column(self) -> str | None:
        """The column whose values the call's sums add up: its own column, or for a weighted
        call the weights (a weighted count) or the product of the two
        (:func:`product_name`)."""
        match self.kind.weighted:
            case "none":
                return self.column
            case "count":
                return self.weights
            case _:
                return product_name(self.column or "", self.weights or "")

    def call(self, rows_per_group: int) -> Call:
        """What the kind knows of this call at compile time (R: rows per unit and group)."""
        q = self.q if self.kind.quantile != "none" else None
        return Call(self.column, q, rows_per_group)

    @property
    def output_type(self) -> ColumnType:
        return self.kind.output


@dataclass(frozen=True)
class Stratum:
    """One bin's own calibration of a stratified ``sum`` measurement (``veil.compile.strata``).

    The rows of the bin have clamped values in ``[lower, upper]``; the engine's per-row
    integers (about the measurement's centre) are shifted by ``shift`` grid steps, so they are
    taken about ``centre`` = measurement centre + shift·step and lie in ``[−limit, limit]``;
    the bin's noise is calibrated to ``sensitivity`` (that per-row bound's) at ``scale``.
    """

    lower: Fraction
    upper: Fraction
    centre: Fraction
    shift: int
    limit: int
    sensitivity: Fraction
    scale: Fraction

    def __post_init__(self) -> None:
        if self.limit < 1 or self.scale <= 0 or self.sensitivity < 0 or self.lower > self.upper:
            raise InvalidArgumentError(
                f"a stratum needs limit ≥ 1, scale > 0, sensitivity ≥ 0 and lower ≤ upper (got "
                f"{self.limit}, {self.scale}, {self.sensitivity}, [{self.lower}, {self.upper}])"
            )


@dataclass(frozen=True)
class Measurement:
    """One noisy statistic per group that the released aggregates are computed from.

    Filled in by the compiler. What the engine computes per group, over the bounded rows:

    - ``count``: the number of rows; ``count_units``: the number of distinct units;
    - ``sum``: Σ v with v = clamp(round((clamp(x) − centre)/step), −limit, limit), an exact
      integer sum (so Σ (x − centre) ≈ step · Σ v);
    - ``sum_squares``: Σ (2w − limit) with w = clamp(round(((clamp(x) − centre)/(step·limit))²
      · limit), 0, limit) (so Σ (x − centre)² ≈ (step·limit)²/(2·limit) · (Σ + limit·n));
    - ``quantile``: row counts per bucket b = clamp(floor((clamp(x) − centre)/step), 0,
      limit − 1), i.e. ``limit`` buckets of width ``step`` from ``centre`` (the lower bound);
      candidates are the bucket edges, chosen by the exponential mechanism. With ``discrete``
      (an integer column with integer bounds) the buckets are the integers centre, centre + 1,
      …, centre + limit − 1 themselves, and they are the candidates.

    ``sensitivity`` is in the statistic's integer units: the L1 sensitivity for
    ``discrete_laplace``, the *square* of the L2 sensitivity for ``discrete_gaussian`` (so it
    stays exact), the per-group score sensitivity for ``exponential``. ``scale`` is the Laplace
    scale b, the Gaussian variance σ², or the exponential mechanism's temperature 2Δ/ε_group
    (weights exp(score/scale)). ``budget`` is this measurement's share of the query's loss.
    """

    name: str
    statistic: Statistic
    mechanism: Mechanism
    budget: Budget
    sensitivity: Fraction
    scale: Fraction
    column: str | None = None
    centre: Fraction = Fraction(0)
    step: Fraction = Fraction(1)
    limit: int = 1
    quantile: Fraction | None = None
    discrete: bool = False
    picks: int = 1  # a TOP_K: candidates chosen one after another, each at temperature picks·scale
    strata: tuple[Stratum, ...] = ()
    stratum_key: int | None = None

    def __post_init__(self) -> None:
        _check_name(self.name, "a measurement name")
        _set(self, "strata", tuple(self.strata))
        if bool(self.strata) != (self.stratum_key is not None) or (
            self.strata and self.statistic != "sum"
        ):
            raise InvalidArgumentError(
                f"measurement {self.name!r}: strata (one per bin of key {self.stratum_key}) "
                "are for a sum measurement, with the index of its BIN key"
            )
        if self.mechanism not in MECHANISMS:
            raise InvalidArgumentError(
                f"measurement {self.name!r}: no mechanism {self.mechanism!r} (one of {MECHANISMS})"
            )
        if self.sensitivity < 0 or self.scale <= 0 or self.step <= 0 or self.limit < 1:
            raise InvalidArgumentError(
                f"measurement {self.name!r} needs sensitivity ≥ 0, scale > 0, step > 0 and "
                f"limit ≥ 1 (got {self.sensitivity}, {self.scale}, {self.step}, {self.limit})"
            )


@dataclass(frozen=True)
class Selection:
    """DP partition selection for unknown group keys: a group is released iff its noisy unit
    count (``mechanism`` at ``scale``) is at least ``threshold``. Filled in by the compiler."""

    mechanism: Mechanism
    budget: Budget
    sensitivity: Fraction
    scale: Fraction
    threshold: Fraction


@dataclass(frozen=True)
class SortKey:
    column: str
    descending: bool = False


# ── plan nodes ───────────────────────────────────────────────────────────────────────────────


class Plan:
    """Base of every plan node."""

    def schema(self) -> tuple[Field, ...]:
        """The columns this node outputs, in order."""
        raise NotImplementedError

    def accept(self, visitor: PlanVisitor[T]) -> T:
        raise NotImplementedError

    @property
    def children(self) -> tuple[Plan, ...]:
        return ()

    @property
    def releases(self) -> bool:
        """True for nodes whose output is released (noisy) data: ``Aggregate`` and above."""
        return False

    def column_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.schema())

    def field(self, name: str) -> Field:
        """The output field ``name``; ``SchemaError`` (with the known names) if absent."""
        for f in self.schema():
            if f.name == name:
                return f
        known = ", ".join(self.column_names())
        close = [n for n in self.column_names() if n.lower() == name.lower()]
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise SchemaError(f"unknown column {name!r}{hint} (columns: {known})")


def _columns_of(expression: exp.Expression) -> Iterable[str]:
    for col in expression.find_all(exp.Column):
        yield col.name


def _check_private_child(node: str, child: Plan) -> None:
    if not isinstance(child, Plan):
        raise InvalidArgumentError(f"{node} needs a plan node as its child, got {child!r}")
    if child.releases:
        raise UnsupportedQueryError(
            f"{node} over aggregated results (a sub-query) is not supported; "
            "put the filter in WHERE on the table's rows"
        )


def _check_released_child(node: str, child: Plan) -> None:
    if not isinstance(child, Plan):
        raise InvalidArgumentError(f"{node} needs a plan node as its child, got {child!r}")
    if not child.releases:
        raise UnsupportedQueryError(
            f"{node} on private rows is not supported: it can only act on released aggregate "
            "values; aggregate first (GROUP BY … with COUNT/SUM/AVG…)"
        )


@dataclass(frozen=True)
class Scan(Plan):
    """Read a private table; ``columns`` is its schema (from the engine, read without data).

    ``declarable``: whether the engine reads the table with column types its owner declares
    (``schema=``; not on PostgreSQL). Only the advice of errors depends on it, so it is not
    part of the canonical form.
    """

    table: str
    columns: tuple[Field, ...]
    declarable: bool = True

    def __post_init__(self) -> None:
        _check_name(self.table, "a table name")
        cols = tuple(self.columns)
        if not cols:
            raise SchemaError(f"table {self.table!r} has no columns")
        names = [c.name for c in cols]
        if len(set(names)) != len(names):
            raise SchemaError(f"table {self.table!r} repeats a column name: {names}")
        _set(self, "columns", cols)

    def schema(self) -> tuple[Field, ...]:
        return self.columns

    def accept(self, visitor: PlanVisitor[T]) -> T:
        return visitor.visit_scan(self)


@dataclass(frozen=True)
class Filter(Plan):
    """Keep the rows where ``predicate`` (a sqlglot boolean expression over the child's
    columns) is true — SQL's WHERE."""

    child: Plan
    predicate: exp.Expression

    def __post_init__(self) -> None:
        _check_private_child("WHERE", self.child)
        if not isinstance(self.predicate, exp.Expression):
            raise InvalidArgumentError(
                f"a filter predicate must be a sqlglot expression, got {self.predicate!r}"
            )
        if self.predicate.find(exp.AggFunc, exp.Window, exp.Subquery, exp.Select):
            raise UnsupportedQueryError(
                "WHERE may only use row values (no aggregates, window functions or sub-queries); "
                "use HAVING for conditions on released aggregates"
            )
        for name in _columns_of(self.predicate):
            self.child.field(name)

    @property
    def children(self) -> tuple[Plan, ...]:
        return (self.child,)

    def schema(self) -> tuple[Field, ...]:
        return self.child.schema()

    def accept(self, visitor: PlanVisitor[T]) -> T:
        return visitor.visit_filter(self)


@dataclass(frozen=True)
class Aggregate(Plan):
    """The DP boundary: group the child's rows by ``keys`` and release ``aggregates``.

    ``privacy_unit`` is the column identifying a unit (``None``: each row is a unit);
    ``contribution`` the L0/L∞ limits per unit; ``bounds`` the clamping bounds of every column a
    bounded aggregate reads (sorted by column). ``budget``, ``measurements`` and ``selection``
    are filled in by the compiler. Output: the keys' aliases, then the aggregates' aliases.
    """

    child: Plan
    keys: tuple[GroupKey, ...]
    aggregates: tuple[AggregateCall, ...]
    privacy_unit: str | None = None
    contribution: Contribution = field(default_factory=Contribution)
    bounds: tuple[ColumnBounds, ...] = ()
    budget: Budget | None = None
    measurements: tuple[Measurement, ...] = ()
    selection: Selection | None = None

    def __post_init__(self) -> None:
        _check_private_child("GROUP BY", self.child)
        keys, aggs = tuple(self.keys), tuple(self.aggregates)
        if not aggs:
            raise UnsupportedQueryError(
                "a query must release at least one aggregate (COUNT, SUM, AVG, …)"
            )
        if len(aggs) > MAX_AGGREGATES:
            raise _too_many(
                "the SELECT", len(aggs), "aggregates", MAX_AGGREGATES,
                "split them over several queries",
            )  # fmt: skip
        for key in keys:
            f = self.child.field(key.column)
            if key.per_unit:
                if key.column != self.privacy_unit:
                    raise UnsupportedQueryError(
                        f"a per-unit key bins the rows of the privacy unit, but it names "
                        f"{key.column!r} and the unit is {self.privacy_unit!r}"
                    )
                for c in key.within:
                    self.child.field(c)
                    if c == self.privacy_unit:
                        raise UnsupportedQueryError(
                            f"a per-unit key counts within groups other than the unit, but "
                            f"names the unit {c!r}"
                        )
                continue
            if key.edges is not None and f.type not in NUMERIC_TYPES:
                raise SchemaError(
                    f"histogram bins need a numeric column; {key.column!r} is {f.type}"
                )
        if self.privacy_unit is not None:
            self.child.field(self.privacy_unit)
            if any(k.column == self.privacy_unit and not k.per_unit for k in keys):
                raise UnsupportedQueryError(
                    f"grouping by the privacy unit {self.privacy_unit!r} would release one "
                    "group per unit; group by another column"
                )
        for agg in aggs:
            self._check_call(agg)
        check_weights(self, aggs)  # survey weights (veil.plan.weighting)
        names = [k.alias for k in keys] + [a.alias for a in aggs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InvalidArgumentError(
                f"output column name(s) {dup} used twice; give each aggregate its own alias (AS …)"
            )
        bounds = tuple(sorted(self.bounds, key=lambda b: b.column))
        seen = [b.column for b in bounds]
        if len(set(seen)) != len(seen):
            raise BoundsError(f"bounds given twice for a column: {seen}")
        for b in bounds:
            f = self.child.field(b.column)
            if f.type not in NUMERIC_TYPES:
                raise SchemaError(f"bounds given for {b.column!r}, which is {f.type}, not numeric")
        _set(self, "keys", keys)
        _set(self, "aggregates", aggs)
        _set(self, "bounds", bounds)
        _set(self, "measurements", tuple(self.measurements))
        if not isinstance(self.contribution, Contribution):
            raise InvalidArgumentError(
                f"contribution must be a Contribution, got {self.contribution!r}"
            )

    def _check_call(self, agg: AggregateCall) -> None:
        if agg.kind.column == "unit":
            if self.privacy_unit is None or agg.column not in (None, self.privacy_unit):
                unit = self.privacy_unit or "<none declared>"
                raise UnsupportedQueryError(
                    f"COUNT(DISTINCT {agg.column}) is only supported on the "
                    f"privacy unit (privacy unit: {unit}); use COUNT(*) or declare privacy_unit="
                    f"{agg.column!r}"
                )
            return
        if agg.column is None:
            return
        f = self.child.field(agg.column)
        if agg.needs_bounds and f.type not in NUMERIC_TYPES and agg.function not in _CHOICES:
            scan = self.scan()
            hint = declare_hint(agg.column, f.type, scan.table, declarable=scan.declarable)
            raise SchemaError(
                f"{agg.function.upper()}({agg.column}) needs a numeric column, but "
                f"{agg.column!r} is {f.type}; aggregate a numeric column or COUNT(*) "
                f"instead{hint}"
            )
        if agg.column == self.privacy_unit and agg.needs_bounds:
            raise UnsupportedQueryError(
                f"{agg.function.upper()} of the privacy unit {agg.column!r} is not supported"
            )

    def factors(self, column: str) -> tuple[str, ...]:
        """The table columns a measured column is computed from: a weighted call's product
        is ``(column, weights)``, any other column itself."""
        for a in self.aggregates:
            if a.kind.weighted in ("sum", "mean") and a.value_column == column:
                return (a.column or "", a.weights or "")
        return (column,)

    def scan(self) -> Scan:
        """The table this aggregation reads (the leaf of its child chain)."""
        node = self.child
        while not isinstance(node, Scan):
            node = node.children[0]
        return node

    def bounds_of(self, column: str) -> ColumnBounds | None:
        for b in self.bounds:
            if b.column == column:
                return b
        factors = self.factors(column)
        if len(factors) == 2:  # a product clamp(x)·clamp(w): the range of the products
            bx, bw = (self.bounds_of(c) for c in factors)
            if bx is None or bw is None:
                return None
            corners = [x * w for x in (bx.lower, bx.upper) for w in (bw.lower, bw.upper)]
            return ColumnBounds(column, min(corners), max(corners))
        return None

    @property
    def public_keys(self) -> bool:
        """True when every key has a public domain (no partition selection needed)."""
        return all(k.is_public for k in self.keys)

    @property
    def children(self) -> tuple[Plan, ...]:
        return (self.child,)

    @property
    def releases(self) -> bool:
        return True

    def schema(self) -> tuple[Field, ...]:
        """The keys' fields, then the aggregates' (made once: a node never changes, and a
        query's compiling and release read them many times, field by field)."""
        held: tuple[Field, ...] | None = self.__dict__.get("_schema")
        if held is None:
            held = self._schema_of()
            _set(self, "_schema", held)
        return held

    def _schema_of(self) -> tuple[Field, ...]:
        out: list[Field] = []
        for k in self.keys:
            t = "string" if k.edges is not None else self.child.field(k.column).type
            out.append(Field(k.alias, t))
        out.extend(
            Field(a.alias, self.child.field(a.column).type)
            if a.domain is not None and a.column is not None
            else Field(a.alias, a.output_type)  # a MODE over candidates has their column's type
            for a in self.aggregates
        )
        return tuple(out)

    def accept(self, visitor: PlanVisitor[T]) -> T:
        return visitor.visit_aggregate(self)


def _check_released_columns(node: str, child: Plan, expression: exp.Expression) -> None:
    for name in _columns_of(expression):
        child.field(name)


class _PostProcessing(Plan):
    """Base of the nodes above ``Aggregate`` (Having, Sort, Limit, Project): one released
    child, and by default its columns. Each subclass declares ``child`` as its first field."""

    child: Plan

    @property
    def children(self) -> tuple[Plan, ...]:
        return (self.child,)

    @property
    def releases(self) -> bool:
        return True

    def schema(self) -> tuple[Field, ...]:
        return self.child.schema()


@dataclass(frozen=True)
class Having(_PostProcessing):
    """Keep released groups where ``predicate`` (over released output columns) holds.
    Post-processing: it reads only noisy values."""

    child: Plan
    predicate: exp.Expression

    def __post_init__(self) -> None:
        _check_released_child("HAVING", self.child)
        if not isinstance(self.predicate, exp.Expression):
            raise InvalidArgumentError(
                f"a HAVING predicate must be a sqlglot expression, got {self.predicate!r}"
            )
        if self.predicate.find(exp.AggFunc, exp.Window, exp.Subquery, exp.Select):
            raise UnsupportedQueryError(
                "HAVING may only refer to released output columns by name (e.g. HAVING n > 10 "
                "with COUNT(*) AS n in SELECT)"
            )
        _check_released_columns("HAVING", self.child, self.predicate)

    def accept(self, visitor: PlanVisitor[T]) -> T:
        return visitor.visit_having(self)


@dataclass(frozen=True)
class Sort(_PostProcessing):
    """Order released rows by output columns (ORDER BY on released values)."""

    child: Plan
    keys: tuple[SortKey, ...]

    def __post_init__(self) -> None:
        _check_released_child("ORDER BY", self.child)
        keys = tuple(self.keys)
        if not keys:
            raise InvalidArgumentError("ORDER BY needs at least one column")
        for k in keys:
            self.child.field(k.column)
        _set(self, "keys", keys)

    def accept(self, visitor: PlanVisitor[T]) -> T:
        return visitor.visit_sort(self)


@dataclass(frozen=True)
class Limit(_PostProcessing):
    """Keep the first ``count`` released rows (after ``offset``)."""

    child: Plan
    count: int
    offset: int = 0

    def __post_init__(self) -> None:
        _check_released_child("LIMIT", self.child)
        for name in ("count", "offset"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InvalidArgumentError(f"LIMIT {name} must be an integer ≥ 0, got {v!r}")

    def accept(self, visitor: PlanVisitor[T]) -> T:
        return visitor.visit_limit(self)


@dataclass(frozen=True)
class Project(_PostProcessing):
    """Select and order released output columns (the SELECT list's order)."""

    child: Plan
    columns: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_released_child("SELECT", self.child)
        cols = tuple(self.columns)
        if not cols:
            raise InvalidArgumentError("SELECT needs at least one column")
        if len(set(cols)) != len(cols):
            raise InvalidArgumentError(f"SELECT repeats an output column: {list(cols)}")
        for c in cols:
            self.child.field(c)
        _set(self, "columns", cols)

    def schema(self) -> tuple[Field, ...]:
        return tuple(self.child.field(c) for c in self.columns)

    def accept(self, visitor: PlanVisitor[T]) -> T:
        return visitor.visit_project(self)
