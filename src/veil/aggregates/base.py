"""What an aggregate kind is: the statistics it reads, how it splits the budget, its estimate,
its error bar and its expected error — all post-processing of noisy statistics.

The engine computes a small closed set of exact statistics per group (:data:`Statistic`; their
sensitivities and SQL are in ``veil.compile.statistics``); every released aggregate is a
function of those statistics once noised, so everything a kind does after the noise is
post-processing (Dwork & Roth 2014, Prop. 2.1) and reads released values and public parameters
only. A kind never sees private data.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Literal, get_args

import numpy as np
from numpy.typing import NDArray

from veil.errors import InternalError
from veil.noise.errorbars import Term, combination_halfwidth
from veil.noise.families import Mechanism, family, mechanism_of

__all__ = [
    "ROLES",
    "AggregateKind",
    "Call",
    "ColumnModel",
    "Expected",
    "Group",
    "Moments",
    "NoiseModel",
    "Read",
    "Role",
    "Statistic",
    "measurement_name",
    "stratum_name",
]

Statistic = Literal["count", "count_units", "sum", "sum_squares", "quantile", "mode"]
"""The closed set of exact per-group statistics the engine computes."""

Role = Literal["count", "units", "sum", "squares", "quantile", "mode", "total"]
"""The part a statistic plays for one aggregate (a column model names one measurement per
role it reads); ``total`` is the sum of a weighted call's weights (its ``sum`` is that of
the products)."""
ROLES: tuple[Role, ...] = get_args(Role)

OutputType = Literal["integer", "real"]
QuantileArgument = Literal["none", "argument", "fixed"]
Weighted = Literal["none", "count", "sum", "mean"]


def measurement_name(
    statistic: Statistic, column: str | None = None, q: Fraction | None = None
) -> str:
    """The name of the measurement of ``statistic`` (part of the ledger's cache key: stable)."""
    if statistic in ("count", "count_units"):
        return statistic
    if column is None:
        raise InternalError(f"the statistic {statistic} needs a column")
    if statistic == "quantile":
        return f"quantile({column}, {q})"
    if statistic == "mode":  # q: a TOP_K's k
        return f"mode({column})" if q is None else f"top({column}, {q})"
    return f"{statistic}({column})"


def stratum_name(measurement: str) -> str:
    """The statistic under which a released group records its bin index for a stratified
    measurement (``veil.compile.strata``): a public number, the group's own BIN key."""
    return f"{measurement}#stratum"


@dataclass(frozen=True)
class Read:
    """One statistic an aggregate reads, in a role (of the call's column, if per column).
    ``optional``: the compiler may prove it unneeded (SUM's count when the centre is 0)."""

    role: Role
    statistic: Statistic
    optional: bool = False


@dataclass(frozen=True)
class Call:
    """What a kind knows about one call when the plan is compiled (no data): its column, its
    quantile, and R, the rows one unit may have in a group."""

    column: str | None
    q: Fraction | None
    rows_per_group: int


@dataclass(frozen=True)
class Moments:
    """A bounded column for the budget split, in units of its own magnitude (so every term is
    a relative variance and the arithmetic stays finite): the bounds' midpoint, half-width, and
    the centre the sums are taken about."""

    mid: float
    rad: float
    centre: float

    @property
    def second(self) -> float:
        """E[x²] under a uniform prior on the bounds (never 0)."""
        return max(self.mid * self.mid + self.rad * self.rad / 3, 1e-300)

    @property
    def spread(self) -> float:
        """Var[x] under the uniform prior (never 0)."""
        return max(self.rad * self.rad / 3, 1e-300)

    @property
    def centred(self) -> float:
        """E[(x − centre)²] under the uniform prior."""
        return (self.mid - self.centre) ** 2 + self.rad * self.rad / 3


@dataclass(frozen=True)
class NoiseModel:
    """What error bars need to know about one measurement (JSON-serialisable)."""

    name: str
    statistic: str
    mechanism: Mechanism
    scale: Fraction
    centre: Fraction
    step: Fraction
    limit: int
    strata: tuple[NoiseModel, ...] = ()  # a stratified sum: one model per bin
    lower: Fraction | None = None  # a stratum's clamped values lie in [lower, upper]
    upper: Fraction | None = None

    def stratum(self, index: int | None) -> NoiseModel:
        """The model of bin ``index`` of a stratified measurement (itself otherwise)."""
        if not self.strata or index is None:
            return self
        if not 0 <= index < len(self.strata):
            raise InternalError(f"{self.name!r} has no stratum {index}")
        return self.strata[index]

    def halfwidth(self, level: float) -> float:
        """Half-width of the noise at ``level`` in the statistic's integer units."""
        return combination_halfwidth([self.term(1.0)], level)

    def term(self, coefficient: float) -> Term:
        """This noise times ``coefficient``, as a term of a linear combination."""
        if not family(self.mechanism).additive:
            raise InternalError(f"no error bar for mechanism {self.mechanism!r}")
        return (coefficient, self.mechanism, self.scale)

    @property
    def square_unit(self) -> float:
        """Σ(x − c)² per unit of a ``sum_squares`` statistic: width²/(2·limit)."""
        width = float(self.step) * self.limit
        return width * width / (2 * self.limit)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "statistic": self.statistic,
            "mechanism": self.mechanism,
            "scale": str(self.scale),
            "centre": str(self.centre),
            "step": str(self.step),
            "limit": self.limit,
        }
        if self.strata:  # only then: unstratified models keep their form
            d["strata"] = [s.to_json() for s in self.strata]
        if self.lower is not None and self.upper is not None:
            d["lower"], d["upper"] = str(self.lower), str(self.upper)
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> NoiseModel:
        return NoiseModel(
            name=str(d["name"]),
            statistic=str(d["statistic"]),
            mechanism=mechanism_of(d["mechanism"]),
            scale=Fraction(d["scale"]),
            centre=Fraction(d["centre"]),
            step=Fraction(d["step"]),
            limit=int(d["limit"]),
            strata=tuple(NoiseModel.from_json(s) for s in d.get("strata") or ()),
            lower=None if d.get("lower") is None else Fraction(d["lower"]),
            upper=None if d.get("upper") is None else Fraction(d["upper"]),
        )


@dataclass(frozen=True)
class ColumnModel:
    """How one released aggregate column is computed: its kind (``function``), the bounds of
    its column, and the measurement it reads in each role."""

    alias: str
    function: str
    lower: Fraction | None = None
    upper: Fraction | None = None
    count: str | None = None
    units: str | None = None
    sum: str | None = None
    squares: str | None = None
    quantile: str | None = None
    mode: str | None = None
    labels: tuple[str | int | float | bool | None, ...] | None = None  # MODE candidates
    rank: int | None = None  # a TOP_K column: the rank it releases (1: the most frequent)
    picks: int | None = None  # … of its k
    total: str | None = None

    def reads(self, role: Role) -> str | None:
        name: str | None = getattr(self, role)
        return name

    def measurements(self) -> tuple[str, ...]:
        return tuple(n for n in (self.reads(r) for r in ROLES) if n is not None)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["lower"] = None if self.lower is None else str(self.lower)
        d["upper"] = None if self.upper is None else str(self.upper)
        if self.total is None:  # unweighted models keep their JSON
            del d["total"]
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> ColumnModel:
        return ColumnModel(
            alias=str(d["alias"]),
            function=str(d["function"]),
            lower=None if d.get("lower") is None else Fraction(d["lower"]),
            upper=None if d.get("upper") is None else Fraction(d["upper"]),
            **{r: d.get(r) for r in ROLES},
            labels=None if d.get("labels") is None else tuple(d["labels"]),
            rank=None if d.get("rank") is None else int(d["rank"]),
            picks=None if d.get("picks") is None else int(d["picks"]),
        )


class Expected:
    """A column model before any data: the noise of each role it reads, and its bounds.

    ``stratum``: for a column whose sum is stratified by its own bins (``veil.compile.strata``),
    the bin whose noise and bounds apply (a group's own, or one ``explain`` describes)."""

    def __init__(
        self, model: ColumnModel, noise: Mapping[str, NoiseModel], stratum: int | None = None
    ) -> None:
        self.model = model
        self._noise = noise
        self._stratum = stratum

    def has(self, role: Role) -> bool:
        return self.model.reads(role) is not None

    def noise(self, role: Role) -> NoiseModel:
        name = self.model.reads(role)
        if name is None:
            raise InternalError(f"{self.model.alias!r} reads no {role} measurement")
        return self._noise[name].stratum(self._stratum)

    @property
    def stratum(self) -> int | None:
        """The bin whose noise applies, when the column's sum is stratified (else None)."""
        name = self.model.reads("sum")
        if name is None or not self._noise[name].strata:
            return None
        return self._stratum

    def _bin(self) -> NoiseModel | None:
        if self.stratum is None:
            return None
        m = self.noise("sum")
        return m if m.lower is not None and m.upper is not None else None

    @property
    def lower(self) -> float:
        b = self._bin()
        return float(b.lower if b is not None and b.lower is not None else self.model.lower or 0)

    @property
    def upper(self) -> float:
        b = self._bin()
        return float(b.upper if b is not None and b.upper is not None else self.model.upper or 0)


class Group(Expected):
    """One released group as a kind sees it: the noisy integer statistics it reads."""

    def __init__(
        self, model: ColumnModel, stats: Mapping[str, int], noise: Mapping[str, NoiseModel]
    ) -> None:
        name = model.reads("sum")
        index = stats.get(stratum_name(name)) if name is not None else None
        super().__init__(model, noise, None if index is None else int(index))
        self._stats = stats

    def value(self, role: Role) -> int:
        name = self.model.reads(role)
        if name is None:
            raise InternalError(f"{self.model.alias!r} reads no {role} measurement")
        return int(self._stats[name])


def clamp(x: float, lo: float, hi: float) -> float:
    return min(max(x, lo), hi)


def nonnegative(
    model: ColumnModel, role: Role, columns: Mapping[str, NDArray[np.int64]]
) -> list[int] | None:
    """max(0, v) of every group's noisy ``role`` statistic, as Python ints (a count's bulk
    estimate), or None when the column reads no such statistic."""
    name = model.reads(role)
    if name is None:
        return None
    values: list[int] = np.maximum(columns[name], 0).tolist()
    return values


def scaled(step: Fraction, values: NDArray[np.int64]) -> NDArray[np.float64] | None:
    """``float(step * v)`` for every ``v`` at once, or None unless that is exact in bulk:
    ``step`` a power of two (the fixed-point grid's, ``veil.compile.constants.fixed_point``),
    so that rounding ``v`` to a float then scaling by ``step`` (exact, no overflow or
    subnormal for these magnitudes) is the correctly rounded product, as Fraction's."""
    num, den = step.numerator, step.denominator
    if num <= 0 or (num & (num - 1)) or (den & (den - 1)):
        return None
    s = float(step)
    if not 2.0**-960 < s < 2.0**900:
        return None
    return values.astype(np.float64) * s


class AggregateKind(ABC):
    """One released aggregate kind. Subclasses live one per file in ``veil.aggregates`` and
    are registered by :func:`veil.aggregates.register`, which checks that they are complete.

    Class attributes: ``name`` (the plan's function name, part of the cache key), ``sql`` (the
    SQL spellings, for messages and docs), ``sql_nodes`` (the sqlglot node types the SQL front
    end reads as a one-column call of this kind), ``output``, ``bounded`` (reads a numeric
    column that needs clamping bounds), ``column`` ("required", "optional" or "unit": only the
    privacy unit), ``quantile`` ("none"; "argument": takes q; "fixed": q is ``fixed_q``),
    ``consistent`` (the role whose count ``consistent=True`` projects, if any),
    ``constant_bar`` (the error bar is the same for every group: it reads no released value),
    ``weighted`` (a survey-weighted kind, ``veil.compile.weights``: "count" sums the weights,
    "sum" and "mean" the products column × weights; "none" otherwise).
    """

    name: ClassVar[str]
    rank: ClassVar[int] = 100  # where the kind is listed (messages, docs)
    sql: ClassVar[tuple[str, ...]]
    sql_nodes: ClassVar[tuple[type[Any], ...]] = ()
    output: ClassVar[OutputType] = "real"
    bounded: ClassVar[bool] = True
    column: ClassVar[Literal["required", "optional", "unit"]] = "required"
    quantile: ClassVar[QuantileArgument] = "none"
    fixed_q: ClassVar[Fraction | None] = None
    consistent: ClassVar[Role | None] = None
    constant_bar: ClassVar[bool] = False  # the bar depends on no released value
    weighted: ClassVar[Weighted] = "none"

    def default_alias(self, column: str | None, q: Fraction | None) -> str:
        """The output name given no alias: ``sum_income``, ``count``…"""
        return self.name if column is None else f"{self.name}_{column}"

    @abstractmethod
    def reads(self, call: Call) -> tuple[Read, ...]:
        """The statistics this aggregate is computed from, each in its role."""

    def split(self, call: Call, weight: float, moments: Moments | None) -> dict[Statistic, float]:
        """Its expected relative variance as Σ_m A_m·V_m (delta method, uniform prior on the
        bounds), times ``weight``: the coefficient A_m per statistic it reads (``count``,
        ``count_units``, ``sum``, ``sum_squares`` of its column). Quantile kinds take their
        share off the top instead and return nothing."""
        return {}

    def split_weights(
        self, call: Call, weight: float, moments: Moments | None
    ) -> dict[Statistic, float]:
        """For a kind that reads the sum of its weights (role ``total``): the coefficients of
        that sum (key ``sum``) and of the row count, as :meth:`split` (``moments``: the
        weights column's). Nothing otherwise."""
        return {}

    @abstractmethod
    def estimate(self, g: Group) -> int | float:
        """The released value of one group."""

    def estimates(
        self,
        model: ColumnModel,
        columns: Mapping[str, NDArray[np.int64]],
        noise: Mapping[str, NoiseModel],
    ) -> list[int] | list[float] | None:
        """The released values of every group at once, from the noisy statistics as int64
        columns by measurement name, or None when this kind (or this column) has no bulk
        estimate (each group's :meth:`estimate` is then used).

        Contract: equal, group for group, to :meth:`estimate` (post-processing of the same
        noisy integers, the same IEEE operations in the same order)."""
        return None

    @abstractmethod
    def halfwidth(self, g: Group, value: float, level: float) -> float | None:
        """The error-bar half-width at ``level`` of the released ``value`` (None: none)."""

    def halfwidths(
        self, groups: Sequence[Group], values: Sequence[float], level: float
    ) -> list[float | None]:
        """:meth:`halfwidth` for many groups of one column at once (what a printout of every
        group asks for); kinds whose bar differs per group override it with a vectorised
        computation and define :meth:`halfwidth` as a batch of one."""
        if self.constant_bar and groups:  # one noise law for every group of the column
            bars: dict[int | None, float | None] = {}  # or per bin of a stratified sum
            for g, v in zip(groups, values, strict=True):
                if g.stratum not in bars:
                    bars[g.stratum] = self.halfwidth(g, v, level)
            return [bars[g.stratum] for g in groups]
        return [self.halfwidth(g, v, level) for g, v in zip(groups, values, strict=True)]

    @abstractmethod
    def expected(self, e: Expected, level: float) -> str:
        """The data-independent error bar at ``level``, in words, for ``explain``."""
