"""Per-record perturbation: a noisy copy of a table's columns, record by record (local DP).

The function is ``veil.perturb``; this module is ``veil.local.perturb`` (``veil.local`` exports
no ``perturb`` function, so the module and the function never shadow each other).

:func:`perturb` releases, for every record, a noisy version of the chosen columns:

- a **numeric** column is clamped to its declared bounds ``[lo, hi]`` (NULL and NaN become
  ``lo``), then each value gets the grid Laplace mechanism of
  :func:`veil.mechanisms.laplace` for
  one value of sensitivity ``hi - lo`` (:func:`laplace_calibration`) — the output lies on a fixed
  grid ``2^k`` chosen from the scale alone, so the set of outputs does not depend on the input;
- a **categorical** column goes through k-ary randomized response over the declared
  categories (:func:`veil.mechanisms.randomized_response`); a value outside them (NULL
  included unless declared) is perturbed as the first declared category, so no value can
  make the release fail or show up in an error.

The privacy model is **local DP per record**, not veil's central model: each record's released
values are ε-LDP with respect to that record (ε split evenly across the perturbed columns,
sequential composition inside the record), so the released table is ε-DP under the
*replace-one-record* neighbouring relation. Records are perturbed independently, each once, so
the whole release costs ε (parallel composition over records) — that is what is charged. What it
does **not** protect: the number of records is released exactly, and a privacy unit that owns
``m`` records has ``m`` independent perturbations of its data (loss ``m·ε``); use it on tables with
one record per unit, or account ``m·ε`` yourself. Columns that are not perturbed are not released.

Where the noise is drawn (DESIGN §3): in the engine's batches.

- DuckDB relations, Arrow tables/readers, pandas frames and Parquet/CSV paths are streamed as
  Arrow record batches and perturbed in bulk; the result is a materialised ``pyarrow.Table``.
- A Spark DataFrame is perturbed by ``mapInArrow`` on the executors. Each executor's function
  calls :func:`veil.random.system_source` *itself*: no seed, key or random state is shipped from
  the driver, so two partitions never share noise. Before anything is charged, the executors
  themselves are asked whether they can run this module, at the driver's versions
  (:func:`veil.engines.spark_executors.check_executors`). The result is checkpointed eagerly
  (reliable checkpoint when a checkpoint directory is set, else a local checkpoint), so every
  later action reads the same noisy values — re-running the lineage would hand out fresh noise
  for free.

The seed this replaces (``parallel_noise`` in the first seed) used ``np.random.laplace`` with a
sensitivity measured on the data; both are refused here (DESIGN §8).
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from veil import mechanisms, noise
from veil.accounting.budget import Budget, exact, show
from veil.accounting.conversions import group_privacy
from veil.accounting.limits import MIN_EPSILON
from veil.compile.constants import check_bounds
from veil.engines.spark import is_spark_dataframe, require_pyspark
from veil.engines.spark_executors import check_executors, map_in_arrow
from veil.errors import (
    BoundsError,
    InternalError,
    InvalidArgumentError,
    QueryFailedError,
    SchemaError,
    log_withheld,
)
from veil.local import geo
from veil.local.geo import Location, error_radius
from veil.noise.grid import from_grid, grid_exponent, to_grid
from veil.plan.nodes import ColumnBounds
from veil.postprocess import Estimate, laplace_mean, rr_frequencies
from veil.random import RandomSource, is_private, refuse_replayable, system_source
from veil.release.result import NOT_PRIVATE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame as SparkDataFrame

    from veil.accounting.ledger import Ledger
    from veil.accounting.scratch import ScratchLedger
    from veil.session import Session

__all__ = ["ColumnPerturbation", "Perturbation", "laplace_calibration", "perturb", "perturb_batch"]

Number = int | float | Fraction
_BATCH_ROWS = 65_536
_TABLE = "__perturbed"


@dataclass(frozen=True)
class ColumnPerturbation:
    """How one column is perturbed: the mechanism and its parameters (all public)."""

    name: str
    mechanism: str  # "laplace" | "randomized_response" | "planar_laplace" | "region"
    epsilon: Fraction  # a location's: ε per unit of distance (veil.local.geo)
    lower: Fraction | None = None
    upper: Fraction | None = None
    categories: tuple[Any, ...] = ()
    location: Location | None = None

    @property
    def inputs(self) -> tuple[str, ...]:
        """The input columns read: the column itself, or a location's latitude and longitude."""
        if self.location is not None:
            return (self.location.lat, self.location.lon)
        return (self.name,)

    @property
    def sensitivity(self) -> Fraction | None:
        """``upper - lower`` for a numeric column (one record replaced), else None."""
        if self.lower is None or self.upper is None:
            return None
        return self.upper - self.lower

    def describe(self) -> str:
        """One line: the column, its mechanism and its share of ε."""
        if self.location is not None:
            return self.location.describe()
        if self.mechanism == "laplace" and self.lower is not None and self.upper is not None:
            return (
                f"{self.name}: Laplace noise, ε={show(self.epsilon)}, values clamped to "
                f"[{show(self.lower)}, {show(self.upper)}]"
            )
        return (
            f"{self.name}: randomized response over {len(self.categories)} categories, "
            f"ε={show(self.epsilon)}"
        )

    def to_json(self) -> dict[str, Any]:
        """The column's parameters, numbers exact (``"1/2"``)."""
        if self.location is not None:
            return {"column": self.name, "mechanism": self.mechanism, **self.location.to_json()}
        return {
            "column": self.name,
            "mechanism": self.mechanism,
            "epsilon": str(self.epsilon),
            "lower": None if self.lower is None else str(self.lower),
            "upper": None if self.upper is None else str(self.upper),
            "categories": [_json_value(c) for c in self.categories],
        }


def _json_value(value: Any) -> Any:
    return value if value is None or isinstance(value, str | int | float | bool) else str(value)


@dataclass(frozen=True, repr=False)
class Perturbation:
    """The released, perturbed columns and what they cost.

    ``data`` is a ``pyarrow.Table`` (DuckDB/Arrow inputs) or a checkpointed Spark DataFrame;
    ``loss`` is the ε charged (once, for the whole table); ``reservation_id`` names the ledger
    charge when a ledger was given; ``private`` is False when the noise came from a
    caller-supplied source (tests only: it can be replayed) — its printout and JSON say so, as
    a :class:`veil.Result`'s do.
    """

    data: Any
    loss: Budget
    columns: tuple[ColumnPerturbation, ...]
    reservation_id: int | None = field(default=None)
    private: bool = True

    def _held(self) -> str:
        if isinstance(self.data, pa.Table):
            return f"{self.data.num_rows} row(s)"
        return "a Spark DataFrame"

    def __str__(self) -> str:
        lines = [f"perturbation of {self._held()}, each row on its own (local DP):"]
        lines += [f"  {c.describe()}" for c in self.columns]
        lines.append(f"cost: {self.loss}")
        if not self.private:
            lines.append(NOT_PRIVATE)
        return "\n".join(lines)

    def __repr__(self) -> str:
        names = ", ".join(repr(c.name) for c in self.columns)
        tail = "" if self.private else f"; {NOT_PRIVATE}"
        return f"<Perturbation of {self._held()}: {names}; cost {self.loss}{tail}>"

    def to_json(self) -> dict[str, Any]:
        """What was released and what it cost, without the values (``data`` holds them: write
        them with Arrow's or Spark's own writers); ``private`` as in :meth:`Result.to_json`."""
        return {
            "columns": [c.to_json() for c in self.columns],
            "rows": self.data.num_rows if isinstance(self.data, pa.Table) else None,
            "loss": self.loss.to_dict(),
            "reservation_id": self.reservation_id,
            "private": self.private,
        }

    def _spec(self, column: str, mechanism: str) -> ColumnPerturbation:
        for spec in self.columns:
            if spec.name == column:
                if spec.mechanism != mechanism:
                    raise InvalidArgumentError(
                        f"column {column!r} was perturbed by {spec.mechanism}, not {mechanism}"
                    )
                return spec
        names = ", ".join(s.name for s in self.columns)
        raise SchemaError(f"column {column!r} was not perturbed; the release has: {names}")

    def radius(self, location: str, *, level: float = 0.95) -> float:
        """The distance (in the location's unit) within which each released point's true point
        lies with probability ≥ ``level`` (:func:`veil.local.geo.error_radius`): public, free."""
        spec = self._spec(location, "planar_laplace")
        if spec.location is None:  # pragma: no cover - built with one
            raise InvalidArgumentError(f"{location!r} is not a location")
        return error_radius(spec.location, level)

    def region_counts(self, location: str) -> dict[Any, int]:
        """How many records were released in each region of ``location`` (every declared
        region, 0 included). Post-processing, free — but these are counts of the *noisy*
        choices, not estimates of how many true points lie in each region (for those, count
        in the engine with a grouped COUNT over a public region domain)."""
        spec = self._spec(location, "region")
        if spec.location is None:  # pragma: no cover - built with one
            raise InvalidArgumentError(f"{location!r} is not a location")
        if is_spark_dataframe(self.data):
            rows = self.data.groupBy(location).count().collect()
            seen = {r[location]: int(r["count"]) for r in rows}
        else:
            counted = pc.value_counts(self.data.column(location)).to_pylist()
            seen = {r["values"]: int(r["counts"]) for r in counted}
        return {r[0]: seen.get(r[0], 0) for r in spec.location.regions}

    def frequencies(self, column: str, *, level: float = 0.95) -> dict[Any, Estimate]:
        """Debiased counts of each declared category of ``column`` with error bars
        (:func:`veil.postprocess.rr_frequencies`). Post-processing: free."""
        spec = self._spec(column, "randomized_response")
        if is_spark_dataframe(self.data):
            rows = self.data.groupBy(column).count().collect()
            reports: dict[Any, int] = {r[column]: int(r["count"]) for r in rows}
        else:
            counted = pc.value_counts(self.data.column(column)).to_pylist()
            reports = {r["values"]: int(r["counts"]) for r in counted}
        return rr_frequencies(
            reports, categories=spec.categories, epsilon=spec.epsilon, level=level
        )

    def mean(self, column: str, *, level: float = 0.95) -> Estimate:
        """The mean of ``column``'s clamped values over all records, estimated from the
        release, with its error bar (:func:`veil.postprocess.laplace_mean`; NULL and NaN
        inputs count as the lower bound, as perturbed). Post-processing: free."""
        spec = self._spec(column, "laplace")
        if spec.lower is None or spec.upper is None:  # pragma: no cover - built with bounds
            raise InvalidArgumentError(f"column {column!r} has no bounds")
        k, scale = laplace_calibration(spec.upper - spec.lower, spec.epsilon)
        if is_spark_dataframe(self.data):
            functions = importlib.import_module("pyspark.sql.functions")
            row = self.data.agg(
                functions.count(column).alias("n"), functions.avg(column).alias("m")
            ).first()
            n, m = int(row["n"]), float(row["m"] or 0.0)
        else:
            values = self.data.column(column)
            n, m = len(values), float(pc.mean(values).as_py() or 0.0)
        return laplace_mean((), noise_scale=scale, grid=k, level=level, count=n, mean=m)


def perturb(
    data: Any,
    *,
    epsilon: Number | Budget,
    bounds: Mapping[str, tuple[Number, Number]] | None = None,
    categories: Mapping[str, Sequence[Any]] | None = None,
    ledger: Ledger | ScratchLedger | None = None,
    analyst: str | None = None,
    dataset: str | None = None,
    session: Session | None = None,
    source: RandomSource | None = None,
    schema: Mapping[str, str] | None = None,
    locations: Mapping[str, tuple[str, str]] | None = None,
    regions: Mapping[str, Mapping[Any, tuple[float, float]]] | None = None,
    box: tuple[float, float, float, float] | None = None,
    unit: str = "km",
    step: Number | None = None,
) -> Perturbation:
    """Perturb every record's chosen columns with local DP; charge ``epsilon`` once.

    **Locations** (:mod:`veil.local.geo`): ``locations={"home": ("lat", "lon")}`` with ``box=(south,
    west, north, east)`` releases each record's point geo-indistinguishably, ``epsilon`` being
    ε per ``unit`` of distance (``"km"``, ``"m"`` or ``"mi"``) on a grid of ``step`` (default
    1 m); with ``regions={"home": {id: (lat, lon), ...}}`` the released value of that location
    is a region id chosen by the exponential mechanism instead. The charge is the loss between
    any two records of the box, ``ε·(diameter + slack)`` per location (``Location.loss``).
    Locations are perturbed in a call of their own (not with ``bounds=``/``categories=``).

    A CSV/JSON path or a pandas frame is read as a session reads it (``veil.engines.lines``:
    no type sniffed from the values): ``schema`` declares column types (column → SQL type,
    e.g. ``{"income": "DOUBLE"}``), without which CSV columns are text.

    Charge it to ``ledger`` for (``analyst``, ``dataset``), or to a :class:`veil.Session`'s
    ledger, analyst and dataset with ``session=``; without either nothing is charged and the
    caller accounts for ``result.loss`` (like :mod:`veil.mechanisms`).

    Contract:

    - Preconditions: ``epsilon`` (a number or a pure :class:`veil.Budget`) in [1e-12, 1e4],
      the range one release may spend (``veil.accounting.limits``), and so is each column's
      share; every numeric column has bounds ``lower < upper`` in the range a query's
      bounds are held to (``veil.compile.constants``: within ±1e100, at least 1e-100 apart,
      distinct doubles), so every released value is a finite double; every categorical
      column at least two distinct categories (values outside them are read as the first);
      ``source`` only on the Arrow/DuckDB path (on Spark each executor uses its own CSPRNG).
    - Postcondition: the result holds exactly the perturbed columns, one row per input row in
      input order; each row is ``ε``-LDP w.r.t. that input row: a clamped value has
      sensitivity ``upper - lower`` and gets the grid geometric mechanism of
      :func:`laplace_calibration` (Ghosh et al. 2009; Canonne–Kamath–Steinke 2020); k-ary
      randomized response is ε-LDP (Warner 1965; Kairouz et al. 2016); the row's columns
      compose sequentially (basic composition, Dwork–Roth 2014, Thm 3.14).
    - Charge: with a ``ledger``, ``Budget(epsilon=epsilon)`` is reserved for ``(analyst,
      dataset)`` before any record is read and committed once the release is materialised;
      on a ``session=`` declaring ``contributions=k`` (each person has at most k records),
      the person's loss, k·ε (group privacy: ``veil.accounting.conversions.group_privacy``).
      Everything decidable from the schema (columns, types, categories of the column's type),
      and Spark executors that cannot run the kernel (asked by a job that reads no data:
      :func:`veil.engines.spark_executors.check_executors`), is refused before that, free;
      no engine reads a record before it (a DuckDB relation's
      types come from a zero-row query). The kernel is total; a failure that still happens
      keeps the charge and raises :class:`veil.errors.QueryFailedError`, which quotes nothing
      and chains nothing; the engine's error is logged for the operator on the
      ``veil.withheld`` logger (:func:`veil.errors.log_withheld`).
    """
    if not isinstance(epsilon, Budget) and exact(epsilon, "epsilon") <= 0:
        raise InvalidArgumentError(f"epsilon must be positive, got {epsilon!r}")
    if locations is not None or regions is not None:
        if bounds or categories:
            raise InvalidArgumentError(
                "perturb locations in a call of their own: their epsilon is ε per unit of "
                "distance, the other columns' is ε per record (call perturb twice)"
            )
        eps_unit = exact(epsilon, "epsilon") if not isinstance(epsilon, Budget) else None
        if eps_unit is None:
            raise InvalidArgumentError(
                "for locations, epsilon is a number: ε per unit of distance (e.g. 1 per km)"
            )
        specs = _location_specs(eps_unit, locations or {}, regions or {}, box, unit, step)
        eps = mechanisms.pure_epsilon(
            sum((s.location.loss for s in specs if s.location is not None), Fraction(0)),
            "perturb (ε per unit × the box's diameter)", gaussian=False,
        )  # fmt: skip
    else:
        eps = mechanisms.pure_epsilon(epsilon, "perturb", gaussian=False)
        specs = _column_specs(eps, bounds or {}, categories or {})
    loss = Budget(epsilon=eps)
    if session is not None:
        if ledger is not None:
            raise InvalidArgumentError("pass either session= or ledger=, not both")
        if session.privacy_unit is not None:
            raise InvalidArgumentError(
                f"this session protects all rows of a {session.privacy_unit!r} together, but "
                "perturb protects each record on its own (a unit with m rows would lose m·ε); "
                "use a row-level session (privacy_unit=None) on a table with one row per unit"
            )
        ledger, analyst, dataset = session.ledger, session.analyst, session.dataset
        rows = session.contribution.max_rows if session.contribution is not None else None
        if rows is not None:  # contributions=k: a person's k records lose kε (group privacy)
            loss = group_privacy(loss, rows)
    if ledger is not None:
        refuse_replayable(source, persistent=ledger.persistent, ledger=ledger.url)
    if ledger is not None and (not analyst or not dataset):
        raise InvalidArgumentError(
            "charging a perturbation needs the analyst and the dataset: "
            "perturb(..., ledger=ledger, analyst='alice', dataset='people')"
        )
    spark = is_spark_dataframe(data)
    if spark and source is not None:
        raise InvalidArgumentError(
            "a random source cannot be shipped to Spark executors: each executor draws from "
            "its own CSPRNG; call perturb on a Spark DataFrame without source="
        )
    # everything checkable without reading values is checked before anything is charged;
    # no engine reads a record before the reservation (a DuckDB reader would start the query)
    if spark:
        job: Any = _spark_job(data, specs)
    else:
        arrow_in = _record_batches(data, specs, schema)
        _check_types(arrow_in.schema, specs)
    described = ", ".join(f"{sp.name} ({sp.mechanism}, ε={sp.epsilon})" for sp in specs)
    reservation = None
    if ledger is not None:
        reservation = ledger.reserve(
            str(analyst),
            str(dataset),
            loss,
            fingerprint=_fingerprint(specs),
            query=f"perturb {described}",
        )
    rid = None if reservation is None else int(reservation.id)
    # From here on records are read and noise is drawn. The kernel is total (types were
    # checked above, casts cannot fail, outside values are mapped): if it still fails, the
    # charge stays and the error quotes nothing — its text could hold a record's value. The
    # QueryFailedError is raised outside the ``except`` block, so that it carries neither
    # ``__cause__`` nor ``__context__``; the engine's error goes to the operator's log only.
    failure: Exception | None = None
    try:
        if spark:
            released: Any = _materialise(job)
        else:
            released = _perturb_arrow(arrow_in, specs, source)
    except Exception as exc:
        failure = exc
    if failure is not None:
        log_withheld(
            failure,
            analyst=analyst,
            dataset=dataset,
            query=f"perturb {described}",
            reservation=rid,
        )
        failure = None  # drop the traceback (it holds the batches) before raising
        if reservation is not None:
            reservation.commit(None)
        raise QueryFailedError(
            f"the perturbation failed after it began reading the records; the charge stays "
            f"({loss}), because a failure that depends on the data would otherwise leak it for "
            "free. The engine's message is withheld for the same reason: try the call on "
            "synthetic data with the same schema"
        )
    if reservation is not None:
        reservation.commit(None)
    return Perturbation(
        data=released,
        loss=loss,
        columns=specs,
        reservation_id=rid,
        private=is_private(source),
    )


# -- specification --------------------------------------------------------------------------


def _column_specs(
    eps: Fraction,
    bounds: Mapping[str, tuple[Number, Number]],
    categories: Mapping[str, Sequence[Any]],
) -> tuple[ColumnPerturbation, ...]:
    """Each column's mechanism and share of ``eps``; everything the kernel could not draw (a
    share below the smallest ε, a scale or grid beyond the samplers') is refused here, before
    anything is charged."""
    both = sorted(set(bounds) & set(categories))
    if both:
        raise InvalidArgumentError(
            f"column {both[0]!r} is given both bounds and categories; perturb it one way"
        )
    names = [*bounds, *categories]
    if not names:
        raise InvalidArgumentError(
            "nothing to perturb: pass bounds={'income': (0, 1e6)} for numeric columns and/or "
            "categories={'state': ['CA', 'TX', ...]} for categorical ones"
        )
    share = eps / len(names)
    if share < MIN_EPSILON:
        raise InvalidArgumentError(
            f"epsilon={show(eps)} split over {len(names)} columns leaves each "
            f"{show(share)}, below 1e-12, the smallest ε one release may spend (below it the "
            "noise is too large to sample exactly); raise epsilon or perturb fewer columns"
        )
    specs: list[ColumnPerturbation] = []
    for name, pair in bounds.items():
        try:
            lo_raw, hi_raw = pair
            lo, hi = exact(lo_raw, f"lower bound of {name!r}"), exact(hi_raw, f"upper of {name!r}")
        except (TypeError, ValueError, InvalidArgumentError) as exc:
            raise BoundsError(
                f"bounds for {name!r} must be two finite numbers (lower, upper), got {pair!r}"
            ) from exc
        if not lo < hi:
            raise BoundsError(
                f"bounds for {name!r} must satisfy lower < upper, got {pair!r}; "
                f"pass bounds={{{name!r}: (lower, upper)}}"
            )
        # the session's range (±1e100, width ≥ 1e-100): beyond it a clamped value plus its
        # noise may leave the doubles (bounds ±1e308 released -inf, with numpy's overflow
        # warning, an error under -W error, after the charge)
        held = ColumnBounds(name, lo, hi)
        check_bounds(held)
        # one value per constant (``veil.plan.numbers``): the records are clamped to the
        # doubles nearest the bounds, so the noise is calibrated to those doubles' width —
        # bounds either side of 44 + ulp(44)/2 were calibrated for their 2e-40 apart while
        # the clamp let values 2^-47 apart through
        lo, hi = held.lower, held.upper
        k, scale = laplace_calibration(hi - lo, share)
        mechanisms.check_representable(f"perturbing {name!r}", scale, k)
        specs.append(ColumnPerturbation(name, "laplace", share, lower=lo, upper=hi))
    for name, cats in categories.items():
        values = tuple(cats)
        if len(set(values)) != len(values) or len(values) < 2:
            raise InvalidArgumentError(
                f"categories for {name!r} must be at least two distinct values, got {values!r}"
            )
        specs.append(ColumnPerturbation(name, "randomized_response", share, categories=values))
    return tuple(specs)


def _location_specs(
    eps: Fraction,
    locations: Mapping[str, tuple[str, str]],
    regions: Mapping[str, Any],
    box: Any,
    unit: str,
    step: Number | None,
) -> tuple[ColumnPerturbation, ...]:
    """Each location's :class:`veil.local.geo.Location`, checked before anything is charged."""
    if not locations:
        raise InvalidArgumentError(
            "regions= needs the points: locations={'home': ('lat', 'lon')}, regions={'home': ...}"
        )
    unknown = sorted(set(regions) - set(locations))
    if unknown:
        raise InvalidArgumentError(
            f"regions for {unknown[0]!r}, which is not one of locations= ({', '.join(locations)})"
        )
    if box is None:
        raise InvalidArgumentError(
            "locations need a bounding box: box=(south, west, north, east) in degrees; points "
            "outside it are moved onto it, and the charge is ε times its diameter"
        )
    if eps <= 0:
        raise InvalidArgumentError(f"epsilon must be positive, got {show(eps)} per {unit}")
    specs = []
    seen: set[str] = set()
    for label, columns in locations.items():
        loc = geo.location(
            label, columns, epsilon=eps, box=box, unit=unit, step=step, regions=regions.get(label)
        )
        if seen & {loc.lat, loc.lon} or loc.lat == loc.lon:
            raise InvalidArgumentError(f"location {label!r} reuses a column of another location")
        seen |= {loc.lat, loc.lon}
        kind = "region" if loc.regions else "planar_laplace"
        specs.append(ColumnPerturbation(label, kind, eps, location=loc))
    return tuple(specs)


def _check_columns(available: Iterable[str], specs: Sequence[ColumnPerturbation]) -> None:
    have = set(available)
    for spec in specs:
        for name in spec.inputs:
            if name not in have:
                raise SchemaError(
                    f"unknown column {name!r}; the data has: {', '.join(sorted(have))}"
                )


def _is_number(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind)
    )


def _check_types(schema: pa.Schema, specs: Sequence[ColumnPerturbation]) -> None:
    """Refuse, from the schema alone (before anything is charged), every column the kernel
    could not perturb: a non-number given bounds, categories that are not values of the
    column's type. After this, :func:`perturb_batch` is defined for every value."""
    for spec in specs:
        if spec.location is not None:
            for name in spec.inputs:
                if not _is_number(schema.field(name).type):
                    raise SchemaError(
                        f"column {name!r} of location {spec.name!r} has type "
                        f"{schema.field(name).type}, not a number of degrees; declare it "
                        f"DOUBLE (schema={{{name!r}: 'DOUBLE'}})"
                    )
            continue
        kind = schema.field(spec.name).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        if spec.mechanism == "laplace" and not _is_number(kind):
            raise SchemaError(
                f"column {spec.name!r} has type {kind}, not a number; perturb it with "
                f"categories={{{spec.name!r}: [...]}} or cast it to a number first"
            )
        if spec.mechanism == "randomized_response":
            try:
                domain = pa.array(list(spec.categories), kind)
                pc.index_in(pa.array([], kind), value_set=domain)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                raise SchemaError(
                    f"the categories of {spec.name!r} are not all values of its type {kind}; "
                    f"pass categories of that type, e.g. categories={{{spec.name!r}: [...]}}"
                ) from None


def _fingerprint(specs: Sequence[ColumnPerturbation]) -> str:
    canon = [
        {
            "column": s.name,
            "mechanism": s.mechanism,
            "epsilon": str(s.epsilon),
            "lower": None if s.lower is None else str(s.lower),
            "upper": None if s.upper is None else str(s.upper),
            "categories": [repr(c) for c in s.categories],
            "location": None if s.location is None else s.location.to_json(),
        }
        for s in specs
    ]
    text = json.dumps({"operation": "perturb", "columns": canon}, sort_keys=True)
    return "perturb:" + hashlib.sha256(text.encode()).hexdigest()


# -- the per-batch kernel (runs on the driver for DuckDB/Arrow, on executors for Spark) --------


def _output_fields(spec: ColumnPerturbation, schema: pa.Schema) -> list[pa.Field]:
    """The released columns of ``spec`` (a point: its latitude and longitude; a region: the
    location's label holding region ids)."""
    if spec.location is None:
        return [_output_field(spec, schema.field(spec.name).type)]
    if spec.location.regions:
        ids = pa.array([r[0] for r in spec.location.regions])
        return [pa.field(spec.name, ids.type, nullable=False)]
    return [pa.field(n, pa.float64(), nullable=False) for n in spec.inputs]


def _degrees(column: pa.Array) -> NDArray[np.float64]:
    """A coordinate column as doubles, NULL as NaN (moved to the box's centre by veil.local.geo)."""
    values = pc.cast(column, pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    return np.asarray(values, dtype=np.float64)


def _perturb_location(
    batch: pa.RecordBatch, spec: ColumnPerturbation, source: RandomSource
) -> list[pa.Array]:
    loc = spec.location
    if loc is None:  # pragma: no cover - called for locations only
        raise InternalError(f"{spec.name!r} is not a location")
    lat, lon = _degrees(batch.column(loc.lat)), _degrees(batch.column(loc.lon))
    if loc.regions:
        ids = pa.array([r[0] for r in loc.regions])
        return [pa.array(geo.choose_regions(loc, lat, lon, source), ids.type)]
    out_lat, out_lon = geo.perturb_points(loc, lat, lon, source)
    return [pa.array(out_lat, pa.float64()), pa.array(out_lon, pa.float64())]


def _output_field(spec: ColumnPerturbation, input_type: pa.DataType) -> pa.Field:
    if spec.mechanism == "laplace":
        return pa.field(spec.name, pa.float64(), nullable=False)
    if pa.types.is_dictionary(input_type):  # categorical output is plain values (decoded)
        return pa.field(spec.name, input_type.value_type, nullable=False)
    return pa.field(spec.name, input_type, nullable=False)


def laplace_calibration(sensitivity: Fraction, epsilon: Fraction) -> tuple[int, Fraction]:
    """The grid exponent ``k`` and the noise scale in grid units for ONE record's value.

    The same calibration as :func:`veil.mechanisms.laplace` on a scalar (dimension 1):
    ``k = grid_exponent(min(Δ, Δ/ε))`` and scale ``(Δ/2^k + 1)/ε`` grid units — rounding to the
    grid moves a value by at most half a step, so the rounded value's sensitivity is at most
    ``Δ/2^k + 1`` steps and discrete Laplace noise of that scale over ε is ε-DP for the record
    (geometric mechanism, Ghosh et al. 2009; Canonne–Kamath–Steinke 2020). Each record is its own
    one-dimensional query, so the batch size never enters the calibration.
    """
    k = grid_exponent(min(sensitivity, sensitivity / epsilon), 1)
    return k, (sensitivity / Fraction(2) ** k + 1) / epsilon


def _perturb_numeric(column: pa.Array, spec: ColumnPerturbation, source: RandomSource) -> pa.Array:
    if spec.lower is None or spec.upper is None:  # pragma: no cover - built by _column_specs
        raise InvalidArgumentError(f"column {spec.name!r} has no bounds")
    lo, hi = float(spec.lower), float(spec.upper)
    # an unchecked cast: an int64 beyond 2^53 or a wide DECIMAL rounds to the nearest double
    # (then it is clamped anyway) instead of failing on one record's value
    values = pc.cast(column, pa.float64(), safe=False).to_numpy(zero_copy_only=False)
    values = np.where(np.isnan(values), lo, values)  # NULL (→ NaN) and NaN become the lower bound
    clamped = np.clip(values, lo, hi)  # rows: one clamped value per record, in [lo, hi]
    k, scale_units = laplace_calibration(spec.upper - spec.lower, spec.epsilon)
    noisy = to_grid(clamped, k) + noise.discrete_laplace(scale_units, len(clamped), source=source)
    return pa.array(from_grid(noisy, k), pa.float64())


def _perturb_categorical(
    column: pa.Array, spec: ColumnPerturbation, source: RandomSource
) -> pa.Array:
    domain = pa.array(list(spec.categories), column.type)
    # a value outside the declared categories (NULL unless declared) is perturbed as the first
    # category, as a NULL number is as the lower bound: refusing it would make the failure, and
    # a message quoting the value, depend on private data
    index = pc.fill_null(pc.index_in(column, value_set=domain, skip_nulls=False), 0)
    # randomized response over category *indices*; the report is mapped back to the domain
    release = mechanisms.randomized_response(
        index.to_numpy(zero_copy_only=False),
        categories=range(len(spec.categories)),
        epsilon=spec.epsilon,
        source=source,
    )
    reported = pa.array(np.asarray(release.value, dtype=np.int64).reshape(-1), pa.int64())
    return pc.take(domain, reported)


def perturb_batch(
    batch: pa.RecordBatch, specs: Sequence[ColumnPerturbation], source: RandomSource
) -> pa.RecordBatch:
    """Perturb one Arrow batch: only the specified columns, in the order of ``specs``."""
    arrays: list[pa.Array] = []
    fields: list[pa.Field] = []
    for spec in specs:
        if spec.location is not None:
            arrays += _perturb_location(batch, spec, source)
            fields += _output_fields(spec, batch.schema)
            continue
        column = batch.column(spec.name)
        if pa.types.is_dictionary(column.type):  # DuckDB ENUMs, pandas categoricals
            column = column.dictionary_decode()
        if spec.mechanism == "laplace":
            arrays.append(_perturb_numeric(column, spec, source))
        else:
            arrays.append(_perturb_categorical(column, spec, source))
        fields.append(_output_field(spec, column.type))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


# -- DuckDB / Arrow path --------------------------------------------------------------------


@dataclass(frozen=True)
class _ArrowInput:
    """The needed columns of the input: their Arrow schema, known without reading a record,
    and how to open the stream of record batches (which may start the engine's query: call it
    only once the charge is reserved)."""

    schema: pa.Schema
    open: Callable[[], pa.RecordBatchReader]
    owner: Any = None  # what must outlive the reader (the DuckDB engine of a path or frame)


def _record_batches(
    data: Any, specs: Sequence[ColumnPerturbation], schema: Mapping[str, str] | None
) -> _ArrowInput:
    """The needed columns of ``data``, to be read as a stream of Arrow batches (never the whole
    table). Nothing here reads a record: a DuckDB relation's types come from a zero-row query
    (as the engine's schema does); its reader, which runs the query, is opened by ``open``.

    Paths and pandas frames are registered as the DuckDB engine registers a session's tables
    (declared types, nothing sniffed from the values)."""
    import duckdb

    names = [n for s in specs for n in s.inputs]
    if isinstance(data, str | os.PathLike) or type(data).__module__.startswith("pandas"):
        from veil.engines.duckdb import DuckDBEngine

        engine = DuckDBEngine(
            {_TABLE: data}, schema=None if schema is None else {_TABLE: dict(schema)}
        )
        relation = engine.connection.sql(f'SELECT * FROM "{_TABLE}"')
        return replace(_record_batches(relation, specs, None), owner=engine)
    if schema is not None:
        raise InvalidArgumentError(
            "schema= declares the types of a CSV/JSON path or a pandas frame; this input "
            f"({type(data).__name__}) carries its own types"
        )
    if isinstance(data, duckdb.DuckDBPyRelation):
        try:  # binds the query and returns no row: decided by the schema alone
            columns = data.columns
            _check_columns(columns, specs)
            projected = data.select(*[duckdb.ColumnExpression(n) for n in names])
            types = projected.limit(0).to_arrow_table().schema
        except duckdb.Error as exc:
            raise SchemaError(f"cannot read the schema of the relation to perturb: {exc}") from exc
        return _ArrowInput(types, functools.partial(projected.to_arrow_reader, _BATCH_ROWS))
    if isinstance(data, pa.RecordBatchReader):
        _check_columns(data.schema.names, specs)
        return _ArrowInput(data.schema, functools.partial(_identity, data))
    if isinstance(data, pa.RecordBatch):
        data = pa.Table.from_batches([data])
    if isinstance(data, pa.Table):
        _check_columns(data.column_names, specs)
        table = data.select(names)
        return _ArrowInput(
            table.schema,
            functools.partial(
                pa.RecordBatchReader.from_batches,
                table.schema,
                table.to_batches(max_chunksize=_BATCH_ROWS),
            ),
        )
    raise InvalidArgumentError(
        f"cannot perturb a {type(data).__name__}; pass a DuckDB relation, an Arrow table or "
        "reader, a pandas DataFrame, a Parquet/CSV path or a Spark DataFrame"
    )


def _identity(reader: pa.RecordBatchReader) -> pa.RecordBatchReader:
    return reader


def _perturb_arrow(
    arrow_in: _ArrowInput,
    specs: Sequence[ColumnPerturbation],
    source: RandomSource | None,
) -> pa.Table:
    src = system_source() if source is None else source
    reader = arrow_in.open()
    if not reader.schema.equals(arrow_in.schema):
        # the types were checked on the zero-row schema; a stream of other types is a bug
        raise InternalError("the records to perturb do not have the types checked before")
    out = [perturb_batch(batch, specs, src) for batch in reader]
    schema = pa.schema([f for s in specs for f in _output_fields(s, arrow_in.schema)])
    return pa.Table.from_batches(out, schema=schema)


# -- Spark path -----------------------------------------------------------------------------


class _ExecutorPerturbation:
    """The function Spark runs per partition; it carries only public parameters.

    The random source is created *inside* the executor by :func:`system_source` (the OS CSPRNG
    of the worker process), never shipped from the driver.
    """

    def __init__(self, specs: tuple[ColumnPerturbation, ...]) -> None:
        self.specs = specs

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        source = system_source()
        for batch in batches:
            yield perturb_batch(batch, self.specs, source)


def _spark_job(frame: SparkDataFrame, specs: tuple[ColumnPerturbation, ...]) -> Any:
    """The lazy perturbed DataFrame (nothing runs until it is materialised)."""
    require_pyspark()
    types = importlib.import_module("pyspark.sql.pandas.types")
    _check_columns(list(frame.columns), specs)
    projected = frame.select(*[n for s in specs for n in s.inputs])
    arrow_in = types.to_arrow_schema(projected.schema)
    _check_types(arrow_in, specs)
    # last of the free checks (it runs a small job): can the executors run this module?
    check_executors(frame.sparkSession, kernel=__name__)
    out_schema = pa.schema([f for s in specs for f in _output_fields(s, arrow_in)])
    return map_in_arrow(
        projected, _ExecutorPerturbation(specs), types.from_arrow_schema(out_schema)
    )


def _materialise(frame: Any) -> Any:
    """Compute ``frame`` once and cut its lineage, so no later action re-draws the noise."""
    errors = importlib.import_module("pyspark.errors")
    try:
        checkpoint_dir = frame.sparkSession.sparkContext.getCheckpointDir()
    except (AttributeError, errors.PySparkException):  # Spark Connect: no SparkContext API
        checkpoint_dir = None
    if checkpoint_dir:
        return frame.checkpoint(eager=True)
    return frame.localCheckpoint(eager=True)
