"""The catalog: each dataset and the metadata its owner sets, kept in the ledger database.

In a shared deployment the analyst must not choose what protects the data. The data owner
registers each dataset once — its source, privacy unit, contribution limits, clamping bounds,
public key domains, the largest cost of one query and an optional total budget across all
analysts — and a session opened from the catalog (:meth:`veil.Session.from_catalog`) uses
them: an analyst may narrow bounds or limits in a query (more protection), never widen them,
and never change the privacy unit; a query that tries is refused before anything is charged.

The dataset's name is its unit of accounting, bound to its source here, so one source cannot be
queried under two names with two budgets: :meth:`Catalog.add_dataset` refuses a second name for
a registered source, and a file source is known by the (device, inode) of the files it expands
to, so a hard link, a glob matching another dataset's file or a second spelling of its path is
the same source; a DuckDB table or view is what it reads — the base tables behind its views,
the files they read, each table's content — so a view or a copy of another dataset's table is
that dataset (:mod:`veil.catalog.files`). A glob of files (one per person, often) has a
*layout* fixed at registration — the header line its CSV files share, or the columns of its
Parquet files — against which later files are held: one whose layout differs is skipped when
the dataset is read (:mod:`veil.engines.sources`), so one person's file never changes how the
others are read, nor whether a query is answered. What an analyst is told never names the
source: an engine that cannot be opened on it is refused in general words, and the operator's
log (``veil.sources``) says which file or server failed. The total cap is enforced by the
ledger in the same transaction as each analyst's own grant (:meth:`veil.Ledger.cap_dataset`):
what colluding analysts learn together is bounded by it.

>>> import veil
>>> catalog = Catalog("sqlite://")
>>> ds = catalog.add_dataset(
...     "people", source=Source("file", path="people.parquet"), privacy_unit="user_id",
...     bounds={"income": (0, 1_000_000)}, max_epsilon=1, total=veil.Budget(epsilon=10))
>>> catalog.dataset("people").public()["bounds"]
{'income': ['0', '1000000']}
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from veil.accounting.budget import Budget, Number, exact
from veil.catalog.files import source_files, with_layout
from veil.errors import (
    BoundsError,
    InvalidArgumentError,
    LedgerError,
    MissingDependencyError,
    SchemaError,
    UnknownDatasetError,
    UserError,
)

if TYPE_CHECKING:
    from veil.accounting.ledger import Ledger
    from veil.engines.base import Engine

__all__ = ["Catalog", "Dataset", "Source", "SourceKind", "config_ledger_url", "parse_entry"]

SourceKind = Literal["file", "duckdb", "postgres", "spark"]
KeyValue = str | int | float | bool | None

_sources = logging.getLogger("veil.sources")  # owner-side details: paths, servers


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidArgumentError(f"{what} must be a non-empty string, got {value!r}")
    return value


@dataclass(frozen=True)
class Source:
    """Where a dataset's rows are: ``kind`` ``"file"`` (a CSV or Parquet ``path``),
    ``"duckdb"`` (a DuckDB database file ``path`` and its ``table``), ``"postgres"`` (a
    connection ``url`` and a ``table`` as ``schema.table``) or ``"spark"`` (a catalog
    ``table`` of the active Spark session, or a ``path`` Spark reads). ``layout``: what every
    file of a glob must start with — its CSV header line, or its Parquet columns — fixed from
    the files when the dataset is registered (or given, for a CSV, as the header line)."""

    kind: SourceKind
    path: str | None = None
    table: str | None = None
    url: str | None = None
    layout: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in get_args(SourceKind):
            raise InvalidArgumentError(
                f"source kind must be one of {', '.join(get_args(SourceKind))}, got {self.kind!r}"
            )
        need: dict[str, tuple[str, ...]] = {
            "file": ("path",),
            "duckdb": ("path", "table"),
            "postgres": ("url", "table"),
            "spark": (),
        }
        for name in need[self.kind]:
            _text(getattr(self, name), f"a {self.kind} source's {name}")
        if self.kind == "spark" and not (self.table or self.path):
            raise InvalidArgumentError("a spark source needs a table or a path")
        if self.layout is not None and not isinstance(self.layout, str):
            raise InvalidArgumentError(f"a source's layout must be a string, got {self.layout!r}")

    @property
    def identity(self) -> str:
        """What makes two sources the same data (the path resolved, the table, the URL)."""
        path = os.path.realpath(self.path) if self.path and self.kind != "spark" else self.path
        return json.dumps([self.kind, path, self.table, self.url])

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Source:
        if not isinstance(d, Mapping):
            raise InvalidArgumentError(f"a source must be a table of kind, path…; got {d!r}")
        unknown = set(d) - {"kind", "path", "table", "url", "layout"}
        if unknown:
            raise InvalidArgumentError(f"unknown source field(s) {sorted(unknown)}")
        return Source(d.get("kind"), d.get("path"), d.get("table"), d.get("url"), d.get("layout"))  # type: ignore[arg-type]


def _fraction(value: object, what: str) -> Fraction:
    try:
        return exact(value, what)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:  # pragma: no cover - exact raises veil errors
        raise InvalidArgumentError(f"{what} must be a number, got {value!r}") from exc


@dataclass(frozen=True)
class Dataset:
    """One registered dataset and what its owner decided (see the module docstring)."""

    name: str
    source: Source
    privacy_unit: str | None = None
    max_groups: int = 1
    max_rows_per_group: int = 1
    max_rows: int | None = None  # total rows per unit; without a unit, rows per person
    bounds: Mapping[str, tuple[Fraction, Fraction]] = field(default_factory=dict)
    domains: Mapping[str, tuple[KeyValue, ...]] = field(default_factory=dict)
    schema: Mapping[str, str] = field(default_factory=dict)
    max_epsilon: Fraction | None = None
    max_delta: Fraction | None = None
    total: Budget | None = None
    min_response_ms: int = 0
    weights: str | None = None  # survey weights of every query (veil.compile.weights)

    def public(self) -> dict[str, Any]:
        """What an analyst granted the dataset may see (JSON-safe): everything but the source."""
        d = self.to_json()
        del d["source"]
        return d

    def to_json(self) -> dict[str, Any]:
        from veil.plan.numbers import number_text

        extra = {} if self.max_rows is None else {"max_rows": self.max_rows}
        weights = {} if self.weights is None else {"weights": self.weights}  # stored as before
        return {
            "name": self.name,
            "source": self.source.to_json(),
            "privacy_unit": self.privacy_unit,
            "max_groups": self.max_groups,
            "max_rows_per_group": self.max_rows_per_group,
            **extra,
            # each bound the double the engine clamps to, as text that reads back as it
            "bounds": {
                c: [number_text(lo), number_text(hi)] for c, (lo, hi) in sorted(self.bounds.items())
            },
            "domains": {c: list(v) for c, v in sorted(self.domains.items())},
            "schema": dict(sorted(self.schema.items())),
            "max_epsilon": None if self.max_epsilon is None else str(self.max_epsilon),
            "max_delta": None if self.max_delta is None else str(self.max_delta),
            "total": None if self.total is None else self.total.to_dict(),
            "min_response_ms": self.min_response_ms,
            **weights,
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Dataset:
        return _dataset(
            d["name"],
            source=Source.from_json(d["source"]),
            privacy_unit=d.get("privacy_unit"),
            max_groups=d.get("max_groups", 1),
            max_rows_per_group=d.get("max_rows_per_group", 1),
            # one stored field: a unit's total rows, or without a unit the rows per person
            max_rows=d.get("max_rows") if d.get("privacy_unit") is not None else None,
            contributions=d.get("max_rows") if d.get("privacy_unit") is None else None,
            bounds={c: tuple(v) for c, v in (d.get("bounds") or {}).items()},
            domains=d.get("domains") or {},
            schema=d.get("schema") or {},
            max_epsilon=d.get("max_epsilon"),
            max_delta=d.get("max_delta"),
            total=None if d.get("total") is None else Budget.from_dict(d["total"]),
            min_response_ms=d.get("min_response_ms", 0),
            weights=d.get("weights"),
        )

    # -- the owner's limits, checked before anything is charged ---------------------------

    def check_bounds(
        self, bounds: Mapping[str, tuple[Fraction, Fraction]], *, group: object = None
    ) -> None:
        """Refuse query bounds that widen the owner's (or bound a column the owner did not);
        ``group``: the group whose per-group bounds these are (named in the message)."""
        where = "" if group is None else f" in group {group!r}"
        for column, (lo, hi) in bounds.items():
            owner = self.bounds.get(column)
            if owner is None:
                raise BoundsError(
                    f"the data owner declared no bounds for {column!r} in dataset {self.name!r}; "
                    "it cannot be aggregated (ask the owner to add bounds to the catalog)"
                )
            if lo < owner[0] or hi > owner[1]:
                raise BoundsError(
                    f"bounds ({float(lo):g}, {float(hi):g}) for {column!r}{where} widen the "
                    f"owner's ({float(owner[0]):g}, {float(owner[1]):g}) in dataset "
                    f"{self.name!r}; a query may only narrow them"
                )

    def check_limits(
        self,
        max_groups: int | None,
        max_rows_per_group: int | None,
        max_rows: int | None = None,
    ) -> None:
        """Refuse contribution limits above the owner's (a total-rows bound the owner did not
        set only adds a bound: any is a narrowing)."""
        for name, asked, owner in (
            ("max_groups", max_groups, self.max_groups),
            ("max_rows_per_group", max_rows_per_group, self.max_rows_per_group),
            ("max_rows", max_rows, self.max_rows),
        ):
            if asked is not None and owner is not None and asked > owner:
                raise InvalidArgumentError(
                    f"{name}={asked} raises the owner's limit of {owner} in dataset "
                    f"{self.name!r}; a query may only lower it",
                    cli=f"--{name.replace('_', '-')} {asked} raises the owner's limit of {owner} "
                    f"in dataset {self.name!r}; a query may only lower it",
                )

    def check_cost(self, cost: Budget) -> None:
        """Refuse one query costing more than the owner's largest ε (or δ). A ρ-zCDP cost is
        held to the cap as its (ε, δ) conversion at the owner's largest δ; with no δ allowed it
        cannot meet an ε cap (zCDP gives no pure guarantee) and is refused."""
        if self.max_epsilon is not None and cost.kind == "zcdp":
            if not self.max_delta:
                raise InvalidArgumentError(
                    f"a zCDP cost ({cost}) has no pure-ε bound to hold to the largest cost of "
                    f"one query on dataset {self.name!r} (ε ≤ {float(self.max_epsilon):g}, no "
                    "δ allowed); pass epsilon= (and delta=) instead"
                )
            from veil.accounting.conversions import zcdp_to_approx

            eps = zcdp_to_approx(cost.rho_value, self.max_delta).eps
            if eps > self.max_epsilon:
                raise InvalidArgumentError(
                    f"{cost} is ε={float(eps):g} at δ={float(self.max_delta):g}, above the "
                    f"largest cost of one query on dataset {self.name!r}, "
                    f"{float(self.max_epsilon):g}; ask a cheaper query"
                )
            return
        if self.max_epsilon is not None and cost.eps > self.max_epsilon:
            raise InvalidArgumentError(
                f"epsilon={float(cost.eps):g} is above the largest cost of one query on dataset "
                f"{self.name!r}, {float(self.max_epsilon):g}; ask a cheaper query"
            )
        if self.max_delta is not None and cost.delta > self.max_delta:
            raise InvalidArgumentError(
                f"delta={float(cost.delta):g} is above the largest δ of one query on dataset "
                f"{self.name!r}, {float(self.max_delta):g}"
            )


@lru_cache(maxsize=256)
def parse_entry(spec: str) -> Dataset:
    """The dataset a catalog entry (its JSON text, as the ledger stores it) describes. The
    same text always describes the same (immutable) dataset, so each is parsed once."""
    return Dataset.from_json(json.loads(spec))


def _limit(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
    return value


def _rows(privacy_unit: object, max_rows: object, contributions: object) -> int | None:
    """The one stored field of ``max_rows`` (a unit's total rows, enforced) and
    ``contributions`` (a person's rows in a table without an id column, declared)."""
    if contributions is not None and privacy_unit is not None:
        raise InvalidArgumentError(
            f"contributions={contributions!r} is for a dataset without a privacy unit; with "
            f"privacy_unit={privacy_unit!r} pass max_rows={contributions!r}",
            cli=f"--contributions is for a dataset without --privacy-unit; pass --max-rows "
            f"{contributions!r}",
        )
    if max_rows is not None and privacy_unit is None:
        raise InvalidArgumentError(
            f"max_rows={max_rows!r} bounds a privacy unit's rows, but the dataset has none; "
            f"declare privacy_unit=… or contributions={max_rows!r} (rows per person)",
            cli=f"--max-rows needs --privacy-unit; for a table without an id column pass "
            f"--contributions {max_rows!r}",
        )
    rows = max_rows if contributions is None else contributions
    return None if rows is None else _limit(rows, "max_rows")


def _dataset(
    name: object,
    *,
    source: Source,
    privacy_unit: object = None,
    max_groups: object = 1,
    max_rows_per_group: object = 1,
    max_rows: object = None,
    contributions: object = None,
    bounds: Mapping[str, Sequence[object]] | None = None,
    domains: Mapping[str, Sequence[KeyValue]] | None = None,
    schema: Mapping[str, str] | None = None,
    max_epsilon: object = None,
    max_delta: object = None,
    total: Budget | None = None,
    min_response_ms: object = 0,
    weights: object = None,
) -> Dataset:
    """A checked :class:`Dataset` (every argument validated, numbers read exactly)."""
    from veil.plan.nodes import ColumnBounds, GroupKey

    checked: dict[str, tuple[Fraction, Fraction]] = {}
    for column, pair in (bounds or {}).items():
        if isinstance(pair, str) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise InvalidArgumentError(
                f"bounds for {column!r} must be [lower, upper], got {pair!r}"
            )
        b = ColumnBounds(column, pair[0], pair[1])  # type: ignore[arg-type]
        checked[column] = (b.lower, b.upper)
    keys: dict[str, tuple[KeyValue, ...]] = {}
    for column, values in (domains or {}).items():
        keys[column] = tuple(GroupKey(column, domain=tuple(values)).domain or ())
    if privacy_unit is not None:
        _text(privacy_unit, "the privacy unit")
    if total is not None and not isinstance(total, Budget):
        raise InvalidArgumentError(f"total must be a veil.Budget, got {total!r}")
    pad = min_response_ms
    if isinstance(pad, bool) or not isinstance(pad, int) or pad < 0:
        raise InvalidArgumentError(f"min_response_ms must be an integer ≥ 0, got {pad!r}")
    if weights is not None:
        _check_weights(_text(weights, "the weights column"), checked)
    return Dataset(
        name=_text(name, "a dataset name"),
        source=source,
        privacy_unit=privacy_unit,  # type: ignore[arg-type]
        max_groups=_limit(max_groups, "max_groups"),
        max_rows_per_group=_limit(max_rows_per_group, "max_rows_per_group"),
        max_rows=_rows(privacy_unit, max_rows, contributions),
        bounds=checked,
        domains=keys,
        schema={
            _text(k, "a column name"): _text(v, f"the type of {k!r}")
            for k, v in (schema or {}).items()
        },
        max_epsilon=None if max_epsilon is None else _fraction(max_epsilon, "max_epsilon"),
        max_delta=None if max_delta is None else _fraction(max_delta, "max_delta"),
        total=total,
        min_response_ms=pad,
        weights=weights,  # type: ignore[arg-type]
    )


def _check_weights(column: str, bounds: Mapping[str, tuple[Fraction, Fraction]]) -> None:
    """A dataset's survey weights need the owner's bounds, from 0 or above."""
    from veil.compile.weights import weights_bounds_missing

    pair = bounds.get(column)
    if pair is None:
        raise weights_bounds_missing(column)
    if pair[0] < 0:
        rule = (
            f"bounds for the weights column {column!r} start at {float(pair[0]):g}: a weight "
            "counts people, its lower bound must be at least 0; declare "
        )
        raise BoundsError(
            f"{rule}bounds={{{column!r}: (0, {float(pair[1]):g})}}",
            cli=f"{rule}--bounds {column}=0:{float(pair[1]):g}",
        )


class Catalog:
    """The datasets of one ledger database (SQLite or PostgreSQL: several processes share it).

    ``ledger``: a :class:`veil.Ledger` or its URL.
    """

    def __init__(self, ledger: Ledger | str | os.PathLike[str]) -> None:
        from veil.accounting.ledger import Ledger

        self.ledger = ledger if isinstance(ledger, Ledger) else Ledger(ledger)

    def __repr__(self) -> str:
        return f"Catalog({self.ledger.url!r})"

    def add_dataset(
        self,
        name: str,
        *,
        source: Source,
        privacy_unit: str | None = None,
        max_groups: int = 1,
        max_rows_per_group: int = 1,
        max_rows: int | None = None,
        contributions: int | None = None,
        bounds: Mapping[str, Sequence[Number]] | None = None,
        domains: Mapping[str, Sequence[KeyValue]] | None = None,
        schema: Mapping[str, str] | None = None,
        max_epsilon: Number | None = None,
        max_delta: Number | None = None,
        total: Budget | None = None,
        min_response_ms: int = 0,
        replace: bool = False,
        weights: str | None = None,
    ) -> Dataset:
        """Register ``name`` (see the module docstring); return its :class:`Dataset`.

        Idempotent: the same metadata again changes nothing. Different metadata for a
        registered name raises ``LedgerError`` unless ``replace=True``; a source already
        registered under another name is refused (one source, one unit of accounting).
        ``total`` caps what all analysts together may spend on the dataset
        (:meth:`veil.Ledger.cap_dataset`). ``weights``: the survey-weights column every
        query's COUNT(*), SUM and AVG are weighted by (its bounds in ``bounds``, from 0 up; an
        analyst opts out with ``weights=False``).
        """
        if not isinstance(source, Source):
            raise InvalidArgumentError(f"source must be a veil.catalog.Source, got {source!r}")
        ds = _dataset(
            name,
            source=source,
            privacy_unit=privacy_unit,
            max_groups=max_groups,
            max_rows_per_group=max_rows_per_group,
            max_rows=max_rows,
            contributions=contributions,
            bounds=bounds,
            domains=domains,
            schema=schema,
            max_epsilon=max_epsilon,
            max_delta=max_delta,
            total=total,
            min_response_ms=min_response_ms,
            weights=weights,
        )
        _check_schema(ds, "python")
        registered = self.ledger.get_dataset(ds.name)
        previous = None if registered is None else parse_entry(registered).source
        ds = dataclasses.replace(ds, source=with_layout(ds.source, previous))
        spec = json.dumps(ds.to_json(), sort_keys=True)
        identity = source.identity
        others = [d for d in self.datasets() if d.name != ds.name]
        clash = next((d.name for d in others if d.source.identity == identity), None)
        if clash is not None:
            raise LedgerError(
                f"this source is already registered as dataset {clash!r}: one source is one "
                f"unit of accounting; remove {clash!r} first or use its name"
            )
        files = source_files(ds.source)
        if files:
            for other in others:
                shared = files & source_files(other.source)
                if shared and all(isinstance(i, tuple) and i[0] == "content" for i in shared):
                    raise LedgerError(
                        f"this source holds the same rows as dataset {other.name!r} (a copy "
                        f"of its table): one source is one unit of accounting; remove "
                        f"{other.name!r} first or use its name"
                    )
                if shared:
                    raise LedgerError(
                        f"the files of this source are files of dataset {other.name!r} too "
                        f"(the same file under another name, a hard link, a glob that "
                        f"matches it, or a view of its table): one file is one unit of "
                        f"accounting; remove {other.name!r} first or use its name"
                    )
        if registered is not None and registered != spec and not replace:
            raise LedgerError(  # refused before the cap below is touched
                f"dataset {ds.name!r} is already in the catalog with other metadata; pass "
                "replace=True (veil catalog add --replace) to change it"
            )
        if ds.total is not None:  # the cap first: a dataset is never registered without it
            self.ledger.cap_dataset(ds.name, ds.total)
        self.ledger.put_dataset(ds.name, spec, replace=replace)
        return ds

    def dataset(self, name: str) -> Dataset:
        """The registered dataset ``name``; ``UnknownDatasetError`` if there is none."""
        spec = self.ledger.get_dataset(name)
        if spec is None:
            raise UnknownDatasetError(f"no dataset {name!r} in the catalog")
        return parse_entry(spec)

    def datasets(self) -> list[Dataset]:
        """Every registered dataset, by name."""
        return [parse_entry(s) for _, s in self.ledger.list_datasets()]

    def remove(self, name: str) -> None:
        """Unregister ``name`` (its grants, charges and cap stay in the ledger: re-adding it
        finds them again)."""
        if not self.ledger.delete_dataset(name):
            raise UnknownDatasetError(f"no dataset {name!r} in the catalog")

    def load_toml(self, path: str | os.PathLike[str]) -> list[Dataset]:
        """Register every ``[[datasets]]`` table of the TOML file ``path``, idempotently (a file
        loaded twice, or by several processes at start, registers each dataset once). Source
        paths are relative to the file's directory."""
        file = Path(path)
        try:
            doc = tomllib.loads(file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read {str(file)!r}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(
                f"{str(file)!r} is not a TOML file: it is not UTF-8 text (byte {exc.start})"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise InvalidArgumentError(f"{str(file)!r} is not valid TOML: {exc}") from None
        entries = doc.get("datasets", [])
        if not isinstance(entries, list):
            raise InvalidArgumentError(f"{str(file)!r}: 'datasets' must be [[datasets]] tables")
        parsed = [_toml_entry(entry, file.parent) for entry in entries]
        for fields in parsed:  # every entry checked before any is registered
            _check_schema(_dataset(**fields), "toml")  # the fix in the file's syntax
        return [self.add_dataset(**fields, replace=True) for fields in parsed]

    def open_engine(self, name: str) -> Engine:
        """A new engine over dataset ``name``'s source, its one table called ``name`` (one per
        caller: engines are not shared between requests).

        Whoever asks is an analyst: when the source cannot be opened (a file gone, a server
        down), the ``SchemaError`` names no file, path or server — the operator's log
        (``veil.sources``) has the engine's own message."""
        ds = self.dataset(name)
        try:
            return _engine(ds)
        except MissingDependencyError:
            raise  # says what to install, nothing of the source
        except UserError as exc:
            _sources.error(
                "dataset %r: its source cannot be opened: %s",
                name,
                exc,
                extra={"veil_dataset": name, "veil_source": ds.source.to_json()},
            )
            raise SchemaError(
                f"dataset {name!r} cannot be read now: its source is not as the data owner "
                "registered it (the operator's log says why); ask the data owner"
            ) from None


def config_ledger_url(doc: Mapping[str, Any], base: Path) -> str | None:
    """The ledger URL a ``veil.toml`` names — ``ledger = "URL"`` or a ``[ledger]`` table with
    ``url = "URL"`` — with a relative SQLite path made relative to ``base`` (the file's
    directory); None when it names none. Anything else is an ``InvalidArgumentError``."""
    value = doc.get("ledger")
    if value is None:
        return None
    if isinstance(value, Mapping):
        value = value.get("url")
    if not isinstance(value, str) or "://" not in value:
        raise InvalidArgumentError(
            'the ledger must be a URL: ledger = "sqlite:///veil-ledger.db" (or a [ledger] table '
            'with url = "…"), or "postgresql://user@host:5432/veil"'
        )
    prefix = "sqlite:///"
    rest = value[len(prefix) :]
    if value.startswith(prefix) and rest and not Path(rest).is_absolute():
        return prefix + str((base / rest).resolve())
    return value


_TOML_KEYS = {
    "name",
    "source",
    "privacy_unit",
    "max_groups",
    "max_rows_per_group",
    "max_rows",
    "contributions",
    "bounds",
    "domains",
    "schema",
    "max_epsilon",
    "max_delta",
    "total_epsilon",
    "total_delta",
    "total_rho",
    "min_response_ms",
    "weights",
}


Syntax = Literal["python", "cli", "toml"]
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _declaration(column: str, type_name: str, syntax: Syntax) -> str:
    """``column: type_name`` declared in ``syntax``: ``schema={'c': 'T'}``, ``--column c:T``
    or ``schema = { c = "T" }`` (a veil.toml entry)."""
    if syntax == "cli":
        return f"--column {column}:{type_name}"
    if syntax == "toml":
        key = column if _BARE_KEY.fullmatch(column) else json.dumps(column)
        return f"schema = {{ {key} = {json.dumps(type_name)} }}"
    return f"schema={{{column!r}: {type_name!r}}}"


def _check_schema(ds: Dataset, syntax: Syntax) -> None:
    """Refuse, when a dataset is added, a declared schema its engine would refuse later: a type
    veil does not read, a column declared twice (names are case-insensitive), or any
    declaration on a PostgreSQL source (its tables carry their own types). Each message says
    the fix in ``syntax``; from Python, its ``cli`` form in the ``veil`` command's."""
    if not ds.schema:
        return
    from veil.engines.declared import parse_type  # sqlglot: only when something is declared

    def refuse(says: Callable[[Syntax], str]) -> InvalidArgumentError:
        return InvalidArgumentError(says(syntax), cli=says("cli") if syntax == "python" else None)

    def on_postgres(s: Syntax) -> str:
        key = {"python": "schema=", "cli": "--column", "toml": "the schema key"}[s]
        return (
            f"dataset {ds.name!r}: a PostgreSQL table carries its own column types, so {key} "
            f"is not accepted on a postgres source (it declares "
            f"{', '.join(repr(c) for c in ds.schema)}); register the dataset without it, and "
            "to change a column's type cast it in a view (CREATE VIEW … AS SELECT CAST(…)) "
            "and register the view"
        )

    if ds.source.kind == "postgres":
        raise refuse(on_postgres)
    seen: dict[str, str] = {}
    for column, type_name in ds.schema.items():

        def bad_type(s: Syntax, c: str = column, t: str = type_name) -> str:
            try:
                parse_type(ds.name, c, t, example=_declaration(c, "DOUBLE", s))
            except InvalidArgumentError as exc:
                return str(exc)
            return ""

        def twice(s: Syntax, c: str = column, first: str = seen.get(column.lower(), "")) -> str:
            return (
                f"dataset {ds.name!r}: column {c!r} is declared twice ({first!r} and {c!r}; "
                f"names are case-insensitive); declare it once, e.g. "
                f"{_declaration(first, ds.schema[first], s)}"
            )

        if bad_type(syntax):
            raise refuse(bad_type)
        if column.lower() in seen:
            raise refuse(twice)
        seen[column.lower()] = column


def _toml_entry(entry: object, base: Path) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise InvalidArgumentError(f"each [[datasets]] entry must be a table, got {entry!r}")
    unknown = set(entry) - _TOML_KEYS
    if unknown:
        raise InvalidArgumentError(
            f"dataset {entry.get('name')!r}: unknown key(s) {sorted(unknown)}; known: "
            f"{', '.join(sorted(_TOML_KEYS))}"
        )
    d = dict(entry)
    source = dict(d.pop("source", None) or {})
    if source.get("path") and source.get("kind") in ("file", "duckdb"):
        source["path"] = str(base / str(source["path"]))
    d["source"] = Source.from_json(source)
    total = {
        k[len("total_") :]: d.pop(k)
        for k in ("total_epsilon", "total_delta", "total_rho")
        if k in d
    }
    if total:
        d["total"] = Budget(**total)
    return d


def _engine(ds: Dataset) -> Engine:
    src = ds.source
    schema = {ds.name: dict(ds.schema)} if ds.schema else None
    layouts = {ds.name: src.layout} if src.layout is not None else None
    if src.kind == "file":
        from veil.engines.duckdb import DuckDBEngine

        return DuckDBEngine({ds.name: src.path}, schema=schema, layouts=layouts)
    if src.kind == "duckdb":
        import duckdb

        from veil.engines.duckdb import DuckDBEngine

        try:
            connection = duckdb.connect(src.path or "", read_only=True)
        except duckdb.Error as exc:
            raise SchemaError(f"cannot open the DuckDB database {src.path!r}: {exc}") from None
        return DuckDBEngine(
            {ds.name: src.table}, connection=connection, schema=schema, layouts=layouts
        )
    if src.kind == "postgres":
        from veil.engines.postgres import PostgresEngine

        # a schema is refused when a postgres dataset is added; one stored before that rule
        # is refused here, by the engine, rather than silently dropped
        return PostgresEngine(src.url or "", {ds.name: src.table or ""}, schema=schema)
    from pyspark.sql import SparkSession

    from veil.engines.spark import SparkEngine

    spark = SparkSession.builder.getOrCreate()
    return SparkEngine(
        spark, {ds.name: src.table or src.path or ""}, schema=schema, layouts=layouts
    )
