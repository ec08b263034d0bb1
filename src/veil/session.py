"""The session: the one place that walks a query through the whole flow (DESIGN §3).

    plan ─► rewrite (bounding, clamping, mechanism, split) ─► cache? ─► reserve ─► re-check the
    loss ─► SQL on the engine ─► noise ─► post-process ─► commit ─► Result

Ledger protocol: nothing is charged for a query refused before it runs (parse, schema,
bounds, budget errors all happen before ``reserve``); an identical query (same canonical plan,
data version and loss) is answered from ``ledger.cached_answer`` at no cost; a failure after
reserving and before the engine is asked to read the data refunds; once the engine reads
the data the charge stays, even on failure (:class:`veil.errors.QueryFailedError`, whose
message carries nothing from the engine: a data-dependent failure must not leak for free).
Where every key is public the noise does not depend on the data: it is drawn from the query's
source on a worker thread while the engine reads (``veil.release.draw.draw_early``) — the same
draws in the same order as after the engine, and a failure of either is the failure after
reading (charged, withheld).

NULL rule: rows where a column read by an aggregate (other than COUNT(*)) is NULL or NaN are
left out of the whole aggregation, as if ``WHERE col IS NOT NULL`` had been written; a NULL
privacy unit is one unit; a NULL group key is a group of its own (unknown keys) or dropped
(public domain without None, histograms).
"""

from __future__ import annotations

import difflib
import inspect
import json
import marshal
import math
import os
import threading
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, TypedDict, Unpack, cast

import pyarrow as pa
from sqlglot import exp

from veil._background import settle, submit
from veil.accounting.budget import Budget, Number
from veil.accounting.scratch import ScratchLedger
from veil.accuracy.search import Choice, choose_epsilon, probing
from veil.autoboth import auto_both_explain, auto_both_sql
from veil.autobounds import auto_explain, auto_sql, is_auto, split_request
from veil.autobounds_target import targeted_bounds_explain, targeted_bounds_sql
from veil.autolimits import auto_limits_explain, auto_limits_sql, refuse_stray_share
from veil.autolimits_target import targeted_limits_explain, targeted_limits_sql
from veil.compile.constants import DEFAULT_QUANTILE_BUCKETS, check_quantile_buckets
from veil.compile.dialect import dialect as dialect_of
from veil.compile.lower import Lowered, lower, to_sql
from veil.compile.rules import MEASURING, SHAPING, Context, apply_rules
from veil.compile.templates import template
from veil.compile.verify import check_loss
from veil.compile.weights import weigh
from veil.engines.base import (
    DeclaredTypes,
    Engine,
    Prepared,
    Preparing,
    Progress,
    ProgressReporting,
    SchemaNotes,
    StoredTypes,
)
from veil.errors import (
    InternalError,
    InvalidArgumentError,
    QueryFailedError,
    SessionStateError,
    VeilError,
    VeilWarning,
    log_withheld,
)
from veil.plan.builder import Query
from veil.plan.canonical import canonical, measurement_fingerprint
from veil.plan.domain import domain_digest
from veil.plan.nodes import (
    Aggregate,
    ColumnBounds,
    Contribution,
    KeyValue,
    Plan,
    Scan,
    as_fraction,
)
from veil.plan.tree import aggregate_of
from veil.random import RandomSource, is_private, refuse_replayable, system_source
from veil.release.draw import Cells, Early, Measured, draw_early, early_draws, finish, measure
from veil.release.estimators import check_models, column_models
from veil.release.exact import cells_by_measurement, exact_stats, may_wrap
from veil.release.explain import (
    Explanation,
    describe_contribution,
    describe_usage,
    expected_errors,
)
from veil.release.quantiles import split_together
from veil.release.result import Result

if TYPE_CHECKING:  # SQLAlchemy loads only when a database ledger is opened
    from veil.accounting.ledger import Ledger
    from veil.catalog import Catalog, Dataset

__all__ = ["Result", "Session"]


_MEMO_SIZE = 512
_PLANS: dict[Any, Plan] = {}  # parsed plans by their public inputs (Session.plan)
_CHECKED: dict[Any, bool] = {}  # (dialect, table, schema, measurement) that lowered and checked
_COMPILED: dict[Any, Plan] = {}  # compiled plans by (plan, context): the rules are pure
_PAIRS: dict[Any, ColumnBounds] = {}  # a query's (column, lower, upper) bounds, checked
_SHAPED: dict[Any, tuple[Plan, Plan]] = {}  # plans through the rules before the budget split
_MEMO_LOCK = threading.Lock()


def _exact_values(values: Any) -> tuple[object, ...]:
    """A declared domain as part of a memo key that tells apart what compares equal: each
    value's type (``1``, ``True``, ``1.0``) and where a float zero is negative (``-0.0``).
    The types are written once when every value has the same one (a type, never equal to a
    tuple of them), else value by value."""
    vs = tuple(values)
    kinds = set(map(type, vs))
    types: object = next(iter(kinds)) if len(kinds) == 1 else tuple(map(type, vs))
    negative = (
        tuple(
            i for i, v in enumerate(vs) if type(v) is float and v == 0 and math.copysign(1, v) < 0
        )
        if float in kinds
        else ()
    )
    return types, vs, negative


_PLAIN = frozenset({int, str, float, bool, type(None)})


def _marshalled(domains: Mapping[str, Any]) -> tuple[tuple[str, bytes], ...] | None:
    """The declared domains (lists or tuples) each written by ``marshal`` (format 2, no
    references; one pass in C), by column; None when one is not a list or tuple, or holds a
    value marshal refuses.

    A memo key only for domains of plain values (:func:`_plain`): marshal writes each plain
    value as a code of its exact type (``int``, ``bool``, ``float``, ``str``, ``None``) and
    its value (a float's eight bytes, its sign included), so two lists of plain values with
    equal bytes hold equal values of equal types in the same order. It writes other objects
    with the buffer protocol as *bytes* (a NumPy scalar, a ``bytearray``), which no plain
    value is written as: bytes equal to a plain list's are that plain list's."""
    out = []
    for c, vs in sorted(domains.items()):
        if type(vs) not in (list, tuple):
            return None
        try:
            out.append((c, marshal.dumps(vs, 2)))
        except (ValueError, TypeError, BufferError):  # a value marshal cannot write
            return None
    return tuple(out)


def _plain(values: Any) -> bool:
    """Whether every value is of a plain type: int, str, float, bool or None exactly."""
    return set(map(type, values)) <= _PLAIN


def _exact_bounds(bounds: Mapping[str, ColumnBounds]) -> tuple[object, ...]:
    """Bounds by column as part of a memo key that tells apart what compares equal: each
    bound with its groups' labels as :func:`_exact_values` writes them (per-group bounds
    labelled ``1``, ``1.0`` or ``True`` name different groups, and ``0.0`` and ``-0.0`` are
    fingerprinted apart), sorted by column."""
    return tuple(
        (name, b, _exact_values(label for label, _, _ in b.groups) if b.groups else ())
        for name, b in sorted(bounds.items())
    )


def _domain_digests(agg: Aggregate) -> tuple[bytes, ...]:
    """The digests of the aggregation's declared domains (keys, then MODE candidates)."""
    keys = tuple(domain_digest(k.domain) for k in agg.keys if k.domain is not None)
    return keys + tuple(domain_digest(a.domain) for a in agg.aggregates if a.domain is not None)


def _remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
    """Keep ``key → value`` in ``memo``, the oldest entry dropped past :data:`_MEMO_SIZE`."""
    with _MEMO_LOCK:
        memo[key] = value
        while len(memo) > _MEMO_SIZE:
            memo.pop(next(iter(memo)))


BoundsArg = Mapping[str, tuple[Any, Any] | Mapping[Any, tuple[Any, Any]]] | None
AutoBoundsArg = Mapping[str, tuple[Any, Any] | Mapping[Any, tuple[Any, Any]] | str] | str | None
"""``bounds`` of :meth:`Session.sql` / :meth:`Session.explain`: pairs (or per-group pairs, see
:mod:`veil.compile.strata`), or ``"auto"`` (:mod:`veil.autobounds`) for every clamped column or
per column."""
DomainsArg = Mapping[str, Sequence[KeyValue]] | None
Key = tuple[KeyValue, ...]


def _bounds(bounds: BoundsArg) -> dict[str, ColumnBounds]:
    if bounds is None:
        return {}
    if not isinstance(bounds, Mapping):
        raise InvalidArgumentError(
            f"bounds must map column → (lower, upper), e.g. {{'income': (0, 1e6)}}; got {bounds!r}"
        )
    out: dict[str, ColumnBounds] = {}
    for col, pair in bounds.items():
        if isinstance(pair, Mapping):  # per-group bounds: {group: (lower, upper), …}
            out[col] = _group_bounds(col, pair)
            continue
        if not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2:
            raise InvalidArgumentError(
                f"bounds for {col!r} must be a pair (lower, upper), got {pair!r}"
            )
        out[col] = _pair(col, pair[0], pair[1])
    return out


def _shaped(plan: Plan, ctx: Context) -> Plan:
    """``plan`` through the rules before the budget split (``veil.compile.rules.SHAPING``),
    remembered by the plan's identity (held with it, so that its id names no other plan) and
    the parts of the context those rules read, each bound with its groups' label types (1 and
    True are equal, and different labels): the same question at a new ε is shaped once. A
    refusal is raised every time (nothing is remembered)."""
    key = (id(plan), ctx.privacy_unit, _exact_bounds(ctx.bounds), ctx.contribution)
    held = _SHAPED.get(key)
    if held is not None and held[0] is plan:
        return held[1]
    shaped = apply_rules(plan, ctx, SHAPING)
    _remember(_SHAPED, key, (plan, shaped))
    return shaped


def _pair(column: Any, lower: Any, upper: Any) -> ColumnBounds:
    """``ColumnBounds(column, lower, upper)``, remembered by the three values and their types:
    the bounds are a pure function of them (exact Fractions, checked on construction), and a
    query passes the same pair again and again (``bounds={'income': (0, 1e6)}``), each time
    read several times over. An invalid pair raises every time (nothing is remembered), and
    an unhashable value is converted without the memo."""
    key = (column, type(lower), lower, type(upper), upper)
    try:
        found = _PAIRS.get(key)
    except TypeError:  # e.g. a list as a bound: refused by ColumnBounds itself
        return ColumnBounds(column, lower, upper)
    if found is None:
        found = ColumnBounds(column, lower, upper)
        _remember(_PAIRS, key, found)
    return found


def _group_bounds(col: object, groups: Mapping[Any, Any]) -> ColumnBounds:
    """Per-group bounds ``{group: (lower, upper), …}`` of one column (``veil.compile.strata``):
    the column's bounds are their hull; which key's groups they name is checked when compiled."""
    pairs = []
    for label, pair in groups.items():
        if not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2:
            raise InvalidArgumentError(
                f"bounds for {col!r} in group {label!r} must be a pair (lower, upper), got "
                f"{pair!r}; e.g. bounds={{{col!r}: {{{label!r}: (0, 20000), …}}}}"
            )
        pairs.append((label, pair[0], pair[1]))
    if not pairs:
        raise InvalidArgumentError(f"per-group bounds for {col!r} name no group")
    ends = [ColumnBounds(str(col), lo, hi) for _, lo, hi in pairs]
    lower = min(b.lower for b in ends)
    upper = max(b.upper for b in ends)
    return ColumnBounds(str(col), lower, upper, tuple(pairs))


class SessionOptions(TypedDict, total=False):
    """The options every way of opening a session takes (see :meth:`Session.on`)."""

    privacy_unit: str | None
    budget: Budget | None
    analyst: str
    ledger: Ledger | ScratchLedger | str | None
    dataset: str | None
    bounds: BoundsArg
    max_groups: int | None
    max_rows_per_group: int | None
    max_rows: int | None
    contributions: int | None
    domains: DomainsArg
    quantile_buckets: int
    source: RandomSource | None
    self_grant: bool
    weights: str | None


def _self_grant_refused(
    budget: Budget, analyst: str, dataset: str, url: str
) -> InvalidArgumentError:
    """A session may not grant its own budget on a persistent ledger without the opt-in."""
    return InvalidArgumentError(
        f"budget={budget!r} would let this session grant analyst {analyst!r} a budget on "
        f"dataset {dataset!r} in the persistent ledger {url}; budgets are granted by the data "
        f"owner: veil budget grant --ledger URL --analyst {analyst} --dataset {dataset} "
        "--epsilon E (or ledger.grant(...)), then open the session without budget=. On a "
        "personal ledger, pass self_grant=True to grant it when no grant exists"
    )


class _Roles:
    """The optional protocols of :mod:`veil.engines.base` an engine implements, decided once
    per engine: a runtime protocol check walks the protocol's members (~10 µs, several per
    query)."""

    __slots__ = ("declared", "engine", "preparing", "stored")

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.declared = isinstance(engine, DeclaredTypes)
        self.stored: StoredTypes | None = engine if isinstance(engine, StoredTypes) else None
        self.preparing: Preparing | None = engine if isinstance(engine, Preparing) else None


class Session:
    """Differentially private queries over named tables on one engine, charged to one ledger.

    Build one with :meth:`local` (DuckDB in-process). ``privacy_unit`` is the column whose
    rows are protected together (``None``: each row); ``bounds`` default clamping bounds per
    column; ``max_groups`` / ``max_rows_per_group`` / ``max_rows`` the contribution limits
    (defaults 1 and 1; ``max_rows`` alone bounds the rows of a unit in all groups, and the other
    two then default to it). A table without an id column (``privacy_unit=None``) may declare
    ``contributions=k``: each person has at most k rows (OpenDP's ``unit_of(contributions=k)``),
    which veil accounts for but cannot enforce.
    """

    def __init__(
        self,
        engine: Engine,
        *,
        ledger: Ledger | ScratchLedger,
        analyst: str,
        dataset: str,
        privacy_unit: str | None = None,
        bounds: BoundsArg = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        domains: DomainsArg = None,
        quantile_buckets: int = DEFAULT_QUANTILE_BUCKETS,
        source: RandomSource | None = None,
        max_rows: int | None = None,
        contributions: int | None = None,
        weights: str | None = None,
    ) -> None:
        self.engine = engine
        self.ledger = ledger
        self.analyst = analyst
        self.dataset = dataset
        self.privacy_unit = privacy_unit
        self.bounds = _bounds(bounds)
        self.contribution = _contribution(
            privacy_unit, max_groups, max_rows_per_group, max_rows, contributions
        )
        # the limits declared by name (the owner's, or the analyst's when opening the session):
        # a per-query max_rows given alone defaults the undeclared ones to itself
        self._declared_limits = (max_groups, max_rows_per_group)
        self.domains: dict[str, tuple[KeyValue, ...]] = {
            k: tuple(v) for k, v in (domains or {}).items()
        }
        self.quantile_buckets = check_quantile_buckets(quantile_buckets)
        _refuse_replayable(source, ledger)
        self._source = source
        self._closed = False
        self._owns_engine = True
        self.owner: Dataset | None = None  # the catalog entry whose limits a query may narrow
        # survey weights every query's COUNT(*), SUM and AVG use unless it says weights=False
        self.weights = weights
        self._roles: _Roles | None = None

    def _engine_roles(self) -> _Roles:
        """What the engine implements besides :class:`Engine` (for the engine it is now)."""
        roles = getattr(self, "_roles", None)
        if roles is None or roles.engine is not self.engine:
            roles = self._roles = _Roles(self.engine)
        return roles

    @classmethod
    def on(cls, engine: Engine, **options: Unpack[SessionOptions]) -> Session:
        """A session on any :class:`veil.engines.base.Engine` — the one way every session is
        opened (:meth:`local`, :meth:`spark` and :meth:`postgres` build their engine and call
        this).

        Options: ``privacy_unit`` (the column whose rows are protected together; ``None``:
        each row), ``bounds`` (default clamping bounds per column), ``max_groups`` /
        ``max_rows_per_group`` (contribution limits, default 1 and 1), ``domains`` (public
        group keys, column → every key: released in full, empty groups included, without
        partition selection), ``quantile_buckets`` (candidates of a continuous quantile),
        ``source`` (a random source for tests; refused with a persistent ledger), and the
        accounting: ``ledger`` (a :class:`veil.Ledger`; the URL of an existing one such as
        ``"sqlite:///ledger.db"`` — a ledger that does not exist is a ``LedgerError`` saying
        how to create it, unless ``budget=`` with ``self_grant=True`` creates it; or ``None``
        for an in-memory one), ``analyst``,
        ``dataset`` (the unit of accounting; default: the engine's table names joined by
        ``+``) and ``budget``, granted to (``analyst``, ``dataset``) if the ledger has no
        grant for them yet — on a persistent ledger only with ``self_grant=True``: budgets are
        the data owner's to grant, and an existing grant is never topped up.
        """
        unknown = set(options) - set(SessionOptions.__annotations__)
        if unknown:  # reachable from untyped callers only
            raise InvalidArgumentError(
                f"Session: {_unknown_option(sorted(unknown)[0], SessionOptions.__annotations__)}"
            )
        # before a grant
        buckets = check_quantile_buckets(options.get("quantile_buckets", DEFAULT_QUANTILE_BUCKETS))
        ledger = options.get("ledger")
        budget = options.get("budget")
        analyst = options.get("analyst", "analyst")
        self_grant = options.get("self_grant", False)
        name = options.get("dataset") or "+".join(sorted(engine.tables))
        if ledger is None or isinstance(ledger, str | os.PathLike):
            from veil.accounting.ledger import Ledger
            from veil.accounting.store import in_memory, shown_url

            url = ledger if ledger is not None else "sqlite://"
            if budget is not None and not self_grant and not in_memory(url):
                raise _self_grant_refused(budget, analyst, name, shown_url(url))
            # a named ledger must exist (a mistyped path is not a new, empty ledger), unless
            # this call grants its own budget, by its documented opt-in
            ledger = Ledger(url, create=budget is not None and self_grant)
        if budget is not None:
            if ledger.persistent and not self_grant:
                raise _self_grant_refused(budget, analyst, name, ledger.url)
            if not ledger.has_grant(analyst, name):
                ledger.grant(analyst, name, budget)
        return cls(
            engine,
            ledger=ledger,
            analyst=analyst,
            dataset=name,
            privacy_unit=options.get("privacy_unit"),
            bounds=options.get("bounds"),
            max_groups=options.get("max_groups"),
            max_rows_per_group=options.get("max_rows_per_group"),
            domains=options.get("domains"),
            quantile_buckets=buckets,
            source=options.get("source"),
            max_rows=options.get("max_rows"),
            contributions=options.get("contributions"),
            weights=options.get("weights"),
        )

    @classmethod
    def from_catalog(
        cls,
        catalog: Catalog,
        dataset: str | Dataset,
        *,
        analyst: str,
        source: RandomSource | None = None,
        quantile_buckets: int = DEFAULT_QUANTILE_BUCKETS,
        engine: Engine | None = None,
    ) -> Session:
        """A session on the registered ``dataset`` of ``catalog`` (its one table is called
        ``dataset``), for ``analyst``, charged to the catalog's ledger.

        The data owner's privacy unit, contribution limits, bounds and domains are the
        session's; a query may narrow bounds or lower the limits, never widen them, and may
        cost at most the owner's largest ε and δ per query — anything else is refused before
        anything is charged. ``dataset`` is a name, or the :class:`veil.catalog.Dataset` the
        caller has just read from ``catalog``. The session opens its own engine on the source
        (closed with the session), unless ``engine`` lends it one opened by
        ``catalog.open_engine`` for this dataset, which the caller keeps and closes (a server's
        pool: one request at a time per engine). ``source`` is a random source for tests
        (refused on a persistent ledger).
        """
        spec = catalog.dataset(dataset) if isinstance(dataset, str) else dataset
        owned = engine is None
        engine = catalog.open_engine(spec.name) if engine is None else engine
        try:
            session = cls(
                engine,
                ledger=catalog.ledger,
                analyst=analyst,
                dataset=spec.name,
                privacy_unit=spec.privacy_unit,
                bounds=dict(spec.bounds),
                max_groups=spec.max_groups,
                max_rows_per_group=spec.max_rows_per_group,
                max_rows=spec.max_rows if spec.privacy_unit is not None else None,
                contributions=spec.max_rows if spec.privacy_unit is None else None,
                domains=dict(spec.domains),
                quantile_buckets=quantile_buckets,
                source=source,
                weights=spec.weights,
            )
        except BaseException:
            if owned:
                engine.close()
            raise
        session.owner = spec
        session._owns_engine = owned
        return session

    @classmethod
    def local(
        cls,
        tables: Mapping[str, Any],
        *,
        connection: Any = None,
        schema: Mapping[str, Mapping[str, str]] | None = None,
        **options: Unpack[SessionOptions],
    ) -> Session:
        """A session on the embedded DuckDB engine.

        ``tables``: name → CSV/Parquet path (scanned lazily), pandas/Polars/Arrow object, or a
        table name of ``connection``. A name that ``connection`` already gives to a table or
        view of its own registers only that table (``{"t": "t"}``): anything else under it
        would be a temporary view hiding the table from the connection's later queries, and is
        refused (a ``SchemaError`` naming another name). ``schema`` declares column types,
        ``{"people": {"income": "DOUBLE"}}``: CSV columns are otherwise text (see
        :mod:`veil.engines.declared`). Every other option is :meth:`on`'s.
        """
        from veil.engines.duckdb import DuckDBEngine

        return cls.on(DuckDBEngine(tables, connection=connection, schema=schema), **options)

    @classmethod
    def spark(
        cls,
        spark_session: Any,
        tables: Mapping[str, Any],
        *,
        schema: Mapping[str, Mapping[str, str]] | None = None,
        **options: Unpack[SessionOptions],
    ) -> Session:
        """A session on Apache Spark (``pip install 'veil[spark]'``), classic or Spark Connect.

        ``tables``: name → Spark DataFrame, catalog table name, or Parquet/CSV path (any URI
        Spark reads). The same plans and lowering as :meth:`local`; Spark runs the bounding and
        the exact sums, and only the aggregated rows reach the driver. ``schema`` declares
        column types as in :meth:`local`; every other option is :meth:`on`'s.
        """
        from veil.engines.spark import SparkEngine

        return cls.on(SparkEngine(spark_session, tables, schema=schema), **options)

    @classmethod
    def postgres(
        cls,
        url: str,
        tables: Mapping[str, str],
        *,
        schema: Mapping[str, Mapping[str, str]] | None = None,
        **options: Unpack[SessionOptions],
    ) -> Session:
        """A session on PostgreSQL (``pip install 'veil[postgres]'``).

        ``url``: ``postgresql://user@host:5432/database``; ``tables``: name → ``schema.table``
        (a table, view or materialized view). The same plans and lowering as :meth:`local`;
        PostgreSQL runs the bounding and the exact sums, and only the aggregated rows leave
        the server (see :mod:`veil.engines.postgres`). Every other option is :meth:`on`'s.
        """
        from veil.engines.postgres import PostgresEngine

        return cls.on(PostgresEngine(url, tables, schema=schema), **options)

    # -- state --------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the session (and an engine it owns); later queries raise SessionStateError."""
        if not self._closed:
            self._closed = True
            if self._owns_engine:
                self.engine.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _open(self) -> None:
        if self._closed:
            raise SessionStateError("this session is closed; open a new one with Session.local")

    def remaining(self) -> Budget:
        """What is left of this analyst's budget on this dataset."""
        return self.ledger.remaining(self.analyst, self.dataset)

    # -- building plans -----------------------------------------------------------------------
    def _schemas(self) -> dict[str, pa.Schema]:
        return {t: self.engine.schema(t) for t in self.engine.tables}

    def plan(
        self,
        text: str,
        *,
        bounds: BoundsArg = None,
        domains: DomainsArg = None,
        weights: str | Literal[False] | None = None,
    ) -> Plan:
        """The plan of SQL ``text`` (veil's DP subset), before compiling; ``weights``: its
        COUNT(*), SUM and AVG weighted by that column (``veil.compile.weights``; ``None``:
        the session's weights, ``False``: none)."""
        from veil.sql import parse

        self._open()
        merged = {**self.bounds, **_bounds(bounds)}
        schemas = self._schemas()
        keys = {**self.domains, **(domains or {})}
        declarable = self._engine_roles().declared
        # a plan is a function of the text, the schemas and these settings alone (public
        # inputs, no data): the same question again reuses it (a server's repeated queries)
        head = (
            text,
            declarable,
            tuple(schemas.items()),
            self.privacy_unit,
            _exact_bounds(merged),  # per-group labels with their types and zeros' signs
            self.contribution,
        )
        # the domains: each value with its type and each zero's sign (1, True and 1.0 are
        # different keys, and so are 0.0 and -0.0) — marshalled in one pass when a plan was
        # remembered so (plain values only), else written value by value with their types
        fast = _marshalled(keys)
        found = None if fast is None else _PLANS.get((*head, fast))
        if found is None:
            exact = (*head, tuple((c, *_exact_values(vs)) for c, vs in sorted(keys.items())))
            found = _PLANS.get(exact)
            if found is None:
                found = parse(
                    text,
                    schemas,
                    privacy_unit=self.privacy_unit,
                    bounds=list(merged.values()),
                    contribution=self.contribution,
                    domains=keys,
                    declarable=declarable,
                )
                plain = fast is not None and all(map(_plain, keys.values()))
                _remember(_PLANS, (*head, fast) if plain else exact, found)
        return weigh(found, self._weights(weights))

    def _auto_weights(self, query: str | Plan, weights: str | Literal[False] | None) -> str | None:
        """The weights column auto bounds would run with (refused): SQL's as :meth:`plan`
        weighs it, a plan's own (or an explicit ``weights=`` column, as :meth:`explain`)."""
        if isinstance(query, str):
            return self._weights(weights)
        return weights if isinstance(weights, str) else _weights_of(query)

    def _weights(self, weights: str | Literal[False] | None) -> str | None:
        """The weights column of a query: its own, none (``False``), or the session's."""
        if weights is False:
            return None
        return self.weights if weights is None else weights

    def _limits_plan(
        self,
        query: str | Plan,
        bounds: AutoBoundsArg,
        domains: DomainsArg,
        weights: str | Literal[False] | None,
    ) -> Plan:
        """The plan auto limits explain: SQL's as :meth:`plan` makes it, a plan weighted only
        by an explicit ``weights=`` column (never the session's a second time)."""
        if isinstance(query, str):
            return self.plan(
                query, bounds=cast(BoundsArg, bounds), domains=domains, weights=weights
            )
        return weigh(query, weights if isinstance(weights, str) else None)

    def query(self, table: str) -> Query:
        """A query builder over ``table``; ``.run(epsilon=…)`` / ``.explain(…)`` come back here."""
        self._open()
        from veil.plan.tree import fields_from_arrow

        fields = fields_from_arrow(self.engine.schema(table))
        declarable = isinstance(self.engine, DeclaredTypes)
        return Query.over(table, fields, runner=self, declarable=declarable)

    def run_query(self, query: Query, **options: Any) -> Result:
        """``query.run(**options)``: the options of :meth:`run` (and ``domains``)."""
        _check_options(options, self.run, "run", drop=("plan", "text"), add=("domains", "weights"))
        plan = self._builder_plan(query, options)  # takes "domains" out of options
        return self.run(plan, **options)

    def explain_query(self, query: Query, **options: Any) -> Explanation:
        """``query.explain(**options)``: the options of :meth:`explain`."""
        _check_options(options, self.explain, "explain", drop=("query",))
        plan = self._builder_plan(query, options)  # weighted as asked (or as the session is)
        return self.explain(plan, weights=False, **options)

    def _builder_plan(self, query: Query, options: dict[str, Any]) -> Plan:
        """The plan of builder ``query`` with the session's settings; takes ``domains`` and
        ``weights`` out of ``options`` (the plan has them) and leaves ``bounds`` in (compiling
        reads them too)."""
        bounds = options.get("bounds")
        if is_auto(bounds):  # the pairs given beside the auto columns (their refusals, free)
            bounds = split_request(bounds)[0]
        plan = query.plan(
            privacy_unit=self.privacy_unit,
            bounds=list({**self.bounds, **_bounds(bounds)}.values()),
            contribution=self.contribution,
            domains={**self.domains, **(options.pop("domains", None) or {})},
        )
        return weigh(plan, self._weights(options.pop("weights", None)))

    def _query_limits(
        self,
        agg: Aggregate,
        max_groups: int | None,
        max_rows_per_group: int | None,
        max_rows: int | None,
    ) -> Contribution:
        """A query's limits over the session's: a limit given replaces the session's; one not
        given keeps the session's — unless ``max_rows`` is given and that limit was never
        declared (by the owner, the session or the plan), where it defaults to ``max_rows``
        as on a session opened with ``max_rows`` alone (each unit then bounded by the total
        alone). A ``max_rows`` above the declared ``max_groups × max_rows_per_group`` would
        bound nothing (the engine leaves that window out): refused, free, with the fix."""
        base = self.contribution or agg.contribution
        groups, rows = getattr(self, "_declared_limits", (None, None))
        if self.contribution is None and agg.contribution != Contribution():
            groups, rows = agg.contribution.max_groups, agg.contribution.max_rows_per_group
        if max_rows is None:
            return Contribution(
                max_groups if max_groups is not None else base.max_groups,
                max_rows_per_group if max_rows_per_group is not None else base.max_rows_per_group,
                base.max_rows,
            )
        Contribution(max_rows=max_rows)  # checks the value first
        g = max_groups if max_groups is not None else groups if groups is not None else max_rows
        r = max_rows_per_group
        if r is None:
            r = rows if rows is not None else max_rows
        if (max_groups is None or max_rows_per_group is None) and g * r < max_rows:
            raise _max_rows_bounds_nothing(max_rows, g, r, owner=self.owner is not None)
        return Contribution(g, r, max_rows)

    def _compile(
        self,
        plan: Plan,
        epsilon: Number | Budget | None,
        delta: Number | None,
        bounds: BoundsArg,
        max_groups: int | None,
        max_rows_per_group: int | None,
        max_rows: int | None = None,
        quantile_buckets: int | None = None,
    ) -> Plan:
        if epsilon is None:
            raise InvalidArgumentError("a query needs a privacy cost: pass epsilon=0.1 (say)")
        if self.owner is not None:  # the data owner's limits: a query may only narrow them
            asked = _bounds(bounds)
            for c, b in asked.items():  # per-group bounds: each group's pair, named
                for label, lo, hi in b.groups:
                    self.owner.check_bounds({c: (lo, hi)}, group=label)
            self.owner.check_bounds({c: (b.lower, b.upper) for c, b in asked.items()})
            self.owner.check_limits(max_groups, max_rows_per_group, max_rows)
        agg = aggregate_of(plan)
        if isinstance(epsilon, Budget):  # what even_split / split_budget return
            if delta is not None:
                raise InvalidArgumentError(
                    f"epsilon={epsilon!r} is a Budget, which carries its own delta; pass "
                    "either epsilon=Budget(...) or epsilon= and delta= as numbers"
                )
            if epsilon.kind == "zcdp":
                budget = epsilon
            else:
                given: Fraction | None = epsilon.delta if epsilon.kind == "approx" else None
                if given is None and not agg.public_keys:
                    given = self._default_delta(epsilon.eps)
                budget = Budget(epsilon=epsilon.eps, delta=given)
        else:
            d = delta
            if d is None and not agg.public_keys:
                d = self._default_delta(epsilon)
            budget = Budget(epsilon=epsilon, delta=d)
        if self.owner is not None:
            self.owner.check_cost(budget)
        contribution = self.contribution
        if max_rows is not None and self.privacy_unit is None:
            raise _max_rows_without_unit(max_rows)
        if max_groups is not None or max_rows_per_group is not None or max_rows is not None:
            contribution = self._query_limits(agg, max_groups, max_rows_per_group, max_rows)
        ctx = Context(
            budget=budget,
            privacy_unit=self.privacy_unit,
            bounds={**self.bounds, **_bounds(bounds)},
            contribution=contribution,
            quantile_buckets=(
                self.quantile_buckets
                if quantile_buckets is None
                else check_quantile_buckets(quantile_buckets)
            ),
        )
        # the rules are a pure function of the plan and the context (they read no data, no
        # ledger, no randomness): a pair compiled once compiles to the same plan again
        # (plans compare their domains and per-group bounds' labels with ==, where
        # 1 == True == 1.0 and 0.0 == -0.0: the domains' digests and the labels' exact forms
        # tell them apart)
        memo = (plan, _domain_digests(agg), budget, ctx.privacy_unit, _exact_bounds(ctx.bounds),
                contribution, ctx.quantile_buckets)  # fmt: skip
        compiled = _COMPILED.get(memo)
        if compiled is None:
            compiled = apply_rules(_shaped(plan, ctx), ctx, MEASURING)
            # every role each aggregate reads was measured: a kind whose reads and budget split
            # disagree fails here, before anything is charged, not after the engine ran
            check_models(aggregate_of(compiled), column_models(aggregate_of(compiled)))
            _remember(_COMPILED, memo, compiled)
        _warn_unwise(
            budget, set(_bounds(bounds)) - {b.column for b in aggregate_of(compiled).bounds}
        )
        return compiled

    def _default_delta(self, epsilon: Number | Budget) -> Fraction:
        """δ for partition selection when the query gives none: the grant's δ, scaled by the
        query's share of the grant's ε."""
        if isinstance(epsilon, Budget):
            if epsilon.kind == "approx":
                return epsilon.delta
            epsilon = epsilon.eps if epsilon.kind == "pure" else 1
        try:
            granted = self.ledger.granted(self.analyst, self.dataset)
        except VeilError:
            granted = None
        if granted is None or granted.kind != "approx":
            need = (
                "grouping by columns without a public list of keys needs partition selection, "
                "which needs delta > 0; pass "
            )
            raise InvalidArgumentError(
                f"{need}delta=1e-6 (or declare the keys' domain: domains={{...}})",
                cli=f"{need}--delta 1e-6 (or list the keys: WHERE col IN ('a', 'b'))",
            )
        eps = as_fraction(epsilon, "epsilon")
        share = min(Fraction(1), eps / granted.eps) if granted.eps > 0 else Fraction(1)
        return granted.delta * share

    # -- the flow -----------------------------------------------------------------------------
    def sql(
        self,
        text: str,
        *,
        epsilon: Number | Budget | None = None,
        delta: Number | None = None,
        bounds: AutoBoundsArg = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        domains: DomainsArg = None,
        consistent: bool = False,
        source: RandomSource | None = None,
        progress: Progress | None = None,
        max_rows: int | None = None,
        target: Any = None,
        quantile_buckets: int | None = None,
        bounds_share: Number | None = None,
        weights: str | Literal[False] | None = None,
        limits: str | None = None,
        limits_share: Number | None = None,
    ) -> Result:
        """Answer SQL ``text`` with noise, error bars and a charged budget.

        ``epsilon`` (and ``delta``, needed when group keys are not public; by default the
        grant's δ in proportion to ε) is the query's cost; ``bounds``, ``domains``,
        ``max_groups``, ``max_rows_per_group`` and ``max_rows`` override the session's for this
        query (a limit not given keeps the session's);
        ``consistent=True`` makes released group counts add up to their noisy total;
        ``progress`` is called with the scan's progress (see :meth:`run`);
        ``target`` (instead of ``epsilon``): accuracy targets, run at the smallest ε meeting
        them (:func:`veil.accuracy.choose_epsilon`, which reads no data);
        ``quantile_buckets`` the grid of this query's continuous quantiles (the session's by
        default); ``weights``: a survey-weights column (with bounds, e.g. ``bounds={"coeff":
        (0, 20)}``) weighting the query's COUNT(*), SUM and AVG (``veil.compile.weights``;
        ``None``: the session's, as the catalog declares them; ``False``: unweighted).
        ``bounds="auto"`` (or ``{"income": "auto"}``) spends ``bounds_share`` of ε (default
        0.1) to choose the bounds from the data under DP first (:mod:`veil.autobounds`); with
        ``target`` instead of ε, the bounds step's ε is set by the targets at the declared
        range and the query runs at the smallest ε meeting them at the bounds chosen
        (:mod:`veil.autobounds_target`).
        ``limits="auto"`` spends ``limits_share`` of ε (default 0.1) to choose the contribution
        limits from a noisy histogram of rows per unit first (:mod:`veil.autolimits`); with
        ``target`` instead of ε, the limits step's ε is set by the targets and the query runs
        at the smallest ε meeting them at the limits chosen (:mod:`veil.autolimits_target`).
        """
        if not isinstance(text, str):
            raise InvalidArgumentError(
                f"sql() takes the query as SQL text, not {type(text).__name__}; for a plan "
                "use run(plan)"
            )
        if limits is not None and target is not None:
            if is_auto(bounds):
                _refuse_both_target()
            _refuse_stray_share(bounds_share)
            return targeted_limits_sql(
                self, self.plan(text, bounds=cast(BoundsArg, bounds), domains=domains,
                                weights=weights),
                text=text, target=target, epsilon=epsilon, delta=delta, bounds=bounds,
                limits=limits, limits_share=limits_share, domains=domains,
                given=(max_groups, max_rows_per_group, max_rows), consistent=consistent,
                source=source, progress=progress, quantile_buckets=quantile_buckets,
            )  # fmt: skip
        if limits is not None:
            if is_auto(bounds):
                _refuse_auto_weights(self._weights(weights))
                return auto_both_sql(
                    self, text, epsilon=epsilon, delta=delta, bounds=bounds,
                    bounds_share=bounds_share, limits=limits, limits_share=limits_share,
                    domains=domains, given=(max_groups, max_rows_per_group, max_rows),
                    consistent=consistent, source=source, progress=progress,
                    quantile_buckets=quantile_buckets,
                )  # fmt: skip
            _refuse_stray_share(bounds_share)
            return auto_limits_sql(
                self, self.plan(text, bounds=cast(BoundsArg, bounds), domains=domains,
                                weights=weights),
                text=text, epsilon=epsilon, delta=delta, bounds=bounds, limits=limits,
                limits_share=limits_share, domains=domains,
                given=(max_groups, max_rows_per_group, max_rows), consistent=consistent,
                source=source, progress=progress, quantile_buckets=quantile_buckets,
            )  # fmt: skip
        refuse_stray_share(limits_share)
        if is_auto(bounds):
            _refuse_auto_weights(self._weights(weights))
            if target is not None:
                return targeted_bounds_sql(
                    self, text, target=target, epsilon=epsilon, delta=delta, bounds=bounds,
                    bounds_share=bounds_share, domains=domains, max_groups=max_groups,
                    max_rows_per_group=max_rows_per_group, max_rows=max_rows,
                    consistent=consistent, source=source, progress=progress,
                    quantile_buckets=quantile_buckets,
                )  # fmt: skip
            return auto_sql(
                self, text, epsilon=epsilon, delta=delta, bounds=bounds,
                bounds_share=bounds_share, domains=domains, max_groups=max_groups,
                max_rows_per_group=max_rows_per_group, max_rows=max_rows,
                consistent=consistent, source=source, progress=progress,
                quantile_buckets=quantile_buckets,
            )  # fmt: skip
        _refuse_stray_share(bounds_share)
        bounds = cast(BoundsArg, bounds)
        plan = self.plan(text, bounds=bounds, domains=domains, weights=weights)
        if target is not None:
            epsilon = self._targeted(
                plan, target, epsilon, delta, bounds, max_groups, max_rows_per_group, max_rows,
                quantile_buckets,
            ).epsilon  # fmt: skip
        return self.run(
            plan,
            epsilon=epsilon,
            delta=delta,
            bounds=bounds,
            max_groups=max_groups,
            max_rows_per_group=max_rows_per_group,
            max_rows=max_rows,
            consistent=consistent,
            source=source,
            progress=progress,
            text=text,
            quantile_buckets=quantile_buckets,
        )

    def run(
        self,
        plan: Plan,
        *,
        epsilon: Number | Budget | None = None,
        delta: Number | None = None,
        bounds: AutoBoundsArg = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        consistent: bool = False,
        source: RandomSource | None = None,
        progress: Progress | None = None,
        text: str | None = None,
        max_rows: int | None = None,
        quantile_buckets: int | None = None,
        limits: str | None = None,
        limits_share: Number | None = None,
        bounds_share: Number | None = None,
        target: Any = None,
    ) -> Result:
        """Answer ``plan`` (see the module docstring for the protocol).

        ``target`` (instead of ``epsilon``): accuracy targets, as in :meth:`sql`.
        ``limits="auto"``: the contribution limits chosen first (see :meth:`sql`).
        ``bounds="auto"`` (or ``{"income": "auto"}``, ``{"income": {"auto": KEY}}``) with
        ``bounds_share``: the bounds chosen first, as in :meth:`sql` — the same steps, charges,
        fingerprints and cached answers as the SQL of the same question; the bounds found
        replace the plan's own for those columns, and stay within the session's (a catalog's:
        the owner's), else within the plan's own.

        ``text`` is what the ledger's audit trail records with the charge (``sql`` passes the
        SQL); by default the plan's canonical form.

        ``progress`` (optional) is called with how far the engine's scan is, if the engine can
        tell (:class:`veil.engines.base.ProgressReporting`; DuckDB and Spark can): ``None``
        while unknown, then increasing fractions in [0, 1] over all the engine queries of the
        plan, ``1.0`` at the end; from a watcher thread, never two calls at once. It is never
        called for a cached
        answer. An exception it raises fails the query after the engine has read the data
        (:class:`veil.errors.QueryFailedError`, the charge stays). Without it no thread is
        started. The fraction is a timing trace of the scan: see ``ProgressReporting``.
        """
        self._open()
        if limits is not None and target is not None:
            if is_auto(bounds):
                _refuse_both_target()
            _refuse_stray_share(bounds_share)
            return targeted_limits_sql(
                self, plan, target=target, epsilon=epsilon, delta=delta, bounds=bounds,
                limits=limits, limits_share=limits_share, domains=None,
                given=(max_groups, max_rows_per_group, max_rows), consistent=consistent,
                source=source, progress=progress, quantile_buckets=quantile_buckets, text=text,
            )  # fmt: skip
        if limits is not None:
            if is_auto(bounds):
                _refuse_auto_weights(_weights_of(plan))
                return auto_both_sql(
                    self, plan, epsilon=epsilon, delta=delta, bounds=bounds,
                    bounds_share=bounds_share, limits=limits, limits_share=limits_share,
                    domains=None, given=(max_groups, max_rows_per_group, max_rows),
                    consistent=consistent, source=source, progress=progress,
                    quantile_buckets=quantile_buckets, text=text,
                )  # fmt: skip
            _refuse_stray_share(bounds_share)
            return auto_limits_sql(
                self, plan, epsilon=epsilon, delta=delta, bounds=bounds, limits=limits,
                limits_share=limits_share, domains=None,
                given=(max_groups, max_rows_per_group, max_rows), consistent=consistent,
                source=source, progress=progress, quantile_buckets=quantile_buckets, text=text,
            )  # fmt: skip
        refuse_stray_share(limits_share)
        if is_auto(bounds):
            _refuse_auto_weights(_weights_of(plan))
            if target is not None:
                return targeted_bounds_sql(
                    self, plan, target=target, epsilon=epsilon, delta=delta, bounds=bounds,
                    bounds_share=bounds_share, domains=None, max_groups=max_groups,
                    max_rows_per_group=max_rows_per_group, max_rows=max_rows,
                    consistent=consistent, source=source, progress=progress,
                    quantile_buckets=quantile_buckets, text=text,
                )  # fmt: skip
            return auto_sql(
                self, plan, epsilon=epsilon, delta=delta, bounds=bounds,
                bounds_share=bounds_share, domains=None, max_groups=max_groups,
                max_rows_per_group=max_rows_per_group, max_rows=max_rows,
                consistent=consistent, source=source, progress=progress,
                quantile_buckets=quantile_buckets, text=text,
            )  # fmt: skip
        _refuse_stray_share(bounds_share)
        bounds = cast(BoundsArg, bounds)
        if target is not None:
            epsilon = self._targeted(
                plan, target, epsilon, delta, bounds, max_groups, max_rows_per_group, max_rows,
                quantile_buckets,
            ).epsilon  # fmt: skip
        if progress is not None and not callable(progress):
            raise InvalidArgumentError(
                f"progress must be a function taking a fraction (or None), got {progress!r}"
            )
        _refuse_replayable(source, self.ledger)
        compiled = self._compile(
            plan, epsilon, delta, bounds, max_groups, max_rows_per_group, max_rows,
            quantile_buckets,
        )  # fmt: skip
        agg = aggregate_of(compiled)
        if agg.budget is None:
            raise InternalError("the compiled aggregation has no charged loss")
        loss = agg.budget
        # the cache key is what is measured: a query that differs only in post-processing
        # (HAVING, ORDER BY, LIMIT, aliases, consistent=) is answered from the cache, free
        fp = measurement_fingerprint(agg)
        sql_dialect = dialect_of(self.engine.dialect)
        # lowered once before reserving: every constant it writes is checked here, free; and
        # type and name errors are refused, free and unhidden (``check`` reads no data row).
        # Both depend only on the measurement and the table's schema: a pair that passed
        # once passes again, and is not re-checked.
        table = _table(agg)
        roles = self._engine_roles()
        # an engine that prepares binds the very statement it will run, after the cache
        # lookup and before reserving: the check and the preparation in one bind (its own
        # reads of the schema and the footers), so neither is read here
        preparing = roles.preparing
        if preparing is None:
            # the footers' stored types are not in the Arrow schema (a millisecond Parquet
            # column reads as microseconds): an engine that refuses by them keys the memo by
            # them too
            stored = (
                roles.stored.unreadable_columns(table) if roles.stored is not None else frozenset()
            )
            checked = (self.engine.dialect, table, self.engine.schema(table), fp, stored)
            if checked not in _CHECKED:
                probe = lower(agg, sql_dialect, salt=0)
                together = () if probe.together is None else (probe.together,)
                for tree in (probe.main, *together, *(t for _, t in probe.quantiles)):
                    self.engine.check(tree)
                _remember(_CHECKED, checked, True)
        version = self.engine.data_version(_table(agg))
        hit = self.ledger.cached_answer(
            self.analyst, self.dataset, fingerprint=fp, data_version=version, loss=loss
        )
        cached = Measured.from_json(hit) if hit is not None else None
        if cached is not None:
            return finish(compiled, agg, cached, fp, consistent=consistent, cached=True)
        chosen = source if source is not None else self._source
        src = chosen if chosen is not None else system_source()
        if text is None:
            text = json.dumps(canonical(plan), sort_keys=True, separators=(",", ":"))
        statements: list[Prepared] = []
        if preparing is not None:  # a refusal here is the check's: nothing is reserved yet
            salt = self._salt(src)
            # the statements do not depend on ε or δ: lowered once per question, the fresh
            # secret salt bound as their parameter (veil.compile.templates)
            lowered = template(agg, sql_dialect)
            statements = [preparing.prepare(tree, salt=salt) for tree in _trees(lowered)]
        reservation = self.ledger.reserve(
            self.analyst, self.dataset, loss, fingerprint=fp, data_version=version, query=text
        )
        early: Future[Early | None] | None = None
        try:  # nothing here reads private data: a failure refunds
            check_loss(agg, reservation.loss)
            if preparing is None:
                salt = self._salt(src)
                lowered = lower(agg, sql_dialect, salt=salt)
                statements = [_Unprepared(self.engine, tree) for tree in _trees(lowered)]
            # the additive noise does not depend on the data when every key is public: it is
            # drawn on a worker thread while the engine reads (the same draws from the same
            # source, in the same order: nothing else draws until it is done)
            if early_draws(agg) is not None:
                early = submit(draw_early, agg, src)
        except BaseException:
            settle(early)
            reservation.refund()
            raise
        # The engine reads private data from here on. The path is total by construction (the
        # SQL cannot fail on a value, keys arrive losslessly, every decode is defined); if it
        # still fails, the charge stays and the error says nothing the engine or the release
        # said (not even as __cause__).
        failure: Exception | None = None
        try:
            # one statement for the statistics and every quantile's and mode's cells (one
            # scan of the bounded rows; ``_trees``)
            tables = _execute_all(statements, progress)
            main, buckets = tables[0], dict[str, pa.Table]()
            if lowered.together is not None:
                main, buckets = split_together(lowered, main)
            if sql_dialect.sum_wraps and may_wrap(agg, main):
                # a group too large to certify 64-bit sums: the same statement (same salt,
                # same rows) with exact wide sums — the same values, only slower
                wide = lower(agg, sql_dialect, salt=salt, exact_sums=True)
                main = self.engine.execute(wide.main)
            separate = lowered.separate
            buckets |= {name: t for (name, _), t in zip(separate, tables[1:], strict=True)}
            exact = exact_stats(agg, main, dict(lowered.columns), lowered.keys)
            counts = cells_by_measurement(agg, buckets, lowered.keys)
            drawn = None if early is None else early.result()
            measured: Measured | None = self._measure(
                compiled, agg, exact, counts, src, chosen, early=drawn
            )
        except Exception as exc:
            measured, failure = None, exc
        finally:
            settle(early)  # (the engine failed first: the draws are not used)
        result: Result | None = None
        if measured is not None:
            try:  # post-processing of the measurement: a failure here is a bug
                result = finish(compiled, agg, measured, fp, consistent=consistent)
            except Exception as exc:
                result, failure = None, exc
        if result is None:
            reservation.commit(None if measured is None else measured.to_json())
            if failure is not None:  # for the operator's log only, never for the analyst
                log_withheld(
                    failure,
                    analyst=self.analyst,
                    dataset=self.dataset,
                    query=text,
                    reservation=reservation.id,
                )
            failure = None
            raise QueryFailedError(
                f"the query failed after the engine began reading the data; the charge stays "
                f"({loss}), because a failure that depends on the data would otherwise leak it "
                "for free. The engine's message is withheld for the same reason: check the "
                "query on synthetic or public data with the same schema"
            )
        reservation.commit(measured.to_json() if measured is not None else None)
        return result

    # the two seams veil.audit.query overrides (a data-owner tool, never a DP release): the
    # same bounding salt on both neighbours, and the exact statistics the noise is added to
    def _salt(self, source: RandomSource) -> int:
        """The secret per-query salt of contribution bounding (63 random bits)."""
        return int.from_bytes(source.random_bytes(8), "big") >> 1

    def _measure(
        self,
        compiled: Plan,
        agg: Aggregate,
        exact: Mapping[Key, Mapping[str, int]],
        counts: Mapping[str, Mapping[Key, Cells]],
        source: RandomSource,
        chosen: RandomSource | None,
        early: Early | None = None,
    ) -> Measured:
        """The measurement of ``agg`` (:func:`veil.release.draw.measure`) from the exact
        statistics the engine returned; ``chosen`` is the caller's source, if any; ``early``
        the additive noise drawn from ``source`` while the engine read
        (:func:`veil.release.draw.draw_early`)."""
        return measure(agg, exact, counts, source, private=is_private(chosen), early=early)

    def _targeted(
        self,
        plan: Plan,
        target: Any,
        epsilon: Number | Budget | None,
        delta: Number | None,
        bounds: BoundsArg,
        max_groups: int | None,
        max_rows_per_group: int | None,
        max_rows: int | None,
        quantile_buckets: int | None = None,
    ) -> Choice:
        """The smallest ε meeting ``target`` (refused free if ``epsilon`` is given too)."""
        if epsilon is not None:
            raise InvalidArgumentError(
                f"pass target= or epsilon={epsilon!r}, not both: the target chooses ε"
            )
        return choose_epsilon(
            self,
            plan,
            target,
            delta=delta,
            bounds=bounds,
            max_groups=max_groups,
            max_rows_per_group=max_rows_per_group,
            max_rows=max_rows,
            quantile_buckets=quantile_buckets,
        )

    def explain(
        self,
        query: str | Plan,
        *,
        epsilon: Number | Budget | None = None,
        delta: Number | None = None,
        bounds: AutoBoundsArg = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        domains: DomainsArg = None,
        max_rows: int | None = None,
        target: Any = None,
        quantile_buckets: int | None = None,
        bounds_share: Number | None = None,
        weights: str | Literal[False] | None = None,
        limits: str | None = None,
        limits_share: Number | None = None,
    ) -> Explanation:
        """What ``query`` would do and cost, without reading private data or charging.

        Without ``epsilon`` the explanation assumes ε = 1 (and, for unknown keys without a δ
        to take from the grant, δ = 10⁻⁶); ``notes`` says so. ``target`` (instead of
        ``epsilon``): the explanation at the smallest ε meeting the accuracy targets.
        ``bounds="auto"``: the cost of the bounds steps and the query together (see :meth:`sql`).
        ``weights``: as in :meth:`sql`. ``limits="auto"``: the cost of the limits step and the
        query together (see :meth:`sql`); with ``target``, the range of that cost over the
        candidate limits, the explanation at the dearest (``targeted``:
        :class:`veil.autolimits_target.TargetedLimits`).
        """
        if not isinstance(query, str | Plan):
            raise InvalidArgumentError(
                f"explain() takes SQL text or a plan (Session.plan), not {type(query).__name__}"
            )
        if limits is not None and target is not None:
            if is_auto(bounds):
                _refuse_both_target()
            _refuse_stray_share(bounds_share)
            return targeted_limits_explain(
                self, self._limits_plan(query, bounds, domains, weights), target=target,
                epsilon=epsilon, delta=delta, bounds=bounds, limits=limits,
                limits_share=limits_share, domains=domains,
                given=(max_groups, max_rows_per_group, max_rows),
                quantile_buckets=quantile_buckets,
            )  # fmt: skip
        if limits is not None:
            if is_auto(bounds):
                _refuse_auto_weights(self._auto_weights(query, weights))
                return auto_both_explain(
                    self, query, epsilon=epsilon, delta=delta, bounds=bounds,
                    bounds_share=bounds_share, limits=limits, limits_share=limits_share,
                    domains=domains, given=(max_groups, max_rows_per_group, max_rows),
                    quantile_buckets=quantile_buckets,
                )  # fmt: skip
            _refuse_stray_share(bounds_share)
            return auto_limits_explain(
                self, self._limits_plan(query, bounds, domains, weights),
                epsilon=epsilon, delta=delta, bounds=bounds, limits=limits,
                limits_share=limits_share, domains=domains,
                given=(max_groups, max_rows_per_group, max_rows),
                quantile_buckets=quantile_buckets,
            )  # fmt: skip
        refuse_stray_share(limits_share)
        if is_auto(bounds):
            _refuse_auto_weights(self._auto_weights(query, weights))
            if target is not None:
                return targeted_bounds_explain(
                    self, query, target=target, epsilon=epsilon, delta=delta, bounds=bounds,
                    bounds_share=bounds_share, domains=domains, max_groups=max_groups,
                    max_rows_per_group=max_rows_per_group, max_rows=max_rows,
                    quantile_buckets=quantile_buckets,
                )  # fmt: skip
            return auto_explain(
                self, query, epsilon=epsilon, delta=delta, bounds=bounds,
                bounds_share=bounds_share, domains=domains, max_groups=max_groups,
                max_rows_per_group=max_rows_per_group, max_rows=max_rows,
                quantile_buckets=quantile_buckets,
            )  # fmt: skip
        _refuse_stray_share(bounds_share)
        bounds = cast(BoundsArg, bounds)
        plan = (
            self.plan(query, bounds=bounds, domains=domains, weights=weights)
            if isinstance(query, str)
            # a plan is weighted when it is built (plan(), the builder): only an explicit
            # weights= column weights it here, never the session's default a second time
            else weigh(query, weights if isinstance(weights, str) else None)
        )
        if target is not None:
            choice = self._targeted(
                plan, target, epsilon, delta, bounds, max_groups, max_rows_per_group, max_rows,
                quantile_buckets,
            )  # fmt: skip
            return replace(choice.explanation, notes=(*choice.lines(), *choice.explanation.notes))
        notes: list[str] = []
        if epsilon is None:
            epsilon = 1
            notes.append("no epsilon given: costs and error bars are shown for epsilon=1")
        if delta is None and not aggregate_of(plan).public_keys:
            try:
                self._default_delta(epsilon)
            except InvalidArgumentError:
                delta = Fraction(1, 10**6)
                notes.append("no delta given: partition selection is shown for delta=1e-6")
        compiled = self._compile(
            plan, epsilon, delta, bounds, max_groups, max_rows_per_group, max_rows,
            quantile_buckets,
        )  # fmt: skip
        agg = aggregate_of(compiled)
        if agg.budget is None:
            raise InternalError("the compiled aggregation has no charged loss")
        check_loss(agg, agg.budget)
        if isinstance(self.engine, SchemaNotes):
            notes.extend(self.engine.notes(_table(agg)))
        # the bounding salt is secret and drawn per run: explain shows a placeholder
        lowered = lower(agg, dialect_of(self.engine.dialect), salt=None)
        contribution = describe_contribution(agg)
        remaining: Budget | None = None
        covered: bool | None = None
        if self.ledger.has_grant(self.analyst, self.dataset):
            remaining = self.ledger.remaining(self.analyst, self.dataset)
            covered = self.ledger.covers(self.analyst, self.dataset, agg.budget)
        return Explanation(
            remaining=remaining,
            covered=covered,
            plan=compiled,
            sql=to_sql(
                lowered.main if lowered.together is None else lowered.together,
                self.engine.dialect,
            ),
            quantile_sql=tuple(to_sql(t, self.engine.dialect) for _, t in lowered.separate),
            cost=agg.budget,
            usage=describe_usage(agg),
            errors=expected_errors(agg),
            contribution=contribution,
            notes=tuple(notes),
        )


def _trees(lowered: Lowered) -> tuple[exp.Expression, ...]:
    """The statements of a lowered aggregation, in the order they run: ``together`` (the
    statistics and every quantile's and mode's cells in one scan) or ``main``, then any
    measurement's that ``together`` does not carry (``Lowered.separate``)."""
    first = lowered.main if lowered.together is None else lowered.together
    return (first, *(tree for _, tree in lowered.separate))


class _Unprepared:
    """A tree run by an engine that does not prepare (checked before, see ``Session.run``)."""

    def __init__(self, engine: Engine, tree: exp.Expression) -> None:
        self._engine = engine
        self._tree = tree

    def run(self, progress: Progress | None) -> pa.Table:
        if progress is None or not isinstance(self._engine, ProgressReporting):
            return self._engine.execute(self._tree)
        return self._engine.execute_with_progress(self._tree, progress)


def _execute_all(statements: Sequence[Prepared], progress: Progress | None) -> list[pa.Table]:
    """Run ``statements`` in order; ``progress`` sees them as one scan, each statement an
    equal share: ``None`` only before the first fraction, then strictly increasing fractions
    (an engine that cannot tell reports nothing)."""
    if progress is None:
        return [statement.run(None) for statement in statements]
    report: Progress = progress
    last: list[float] = []  # the largest fraction reported so far

    def share(i: int) -> Progress:
        def part(fraction: float | None) -> None:
            if fraction is None:
                if i == 0 and not last:
                    report(None)
                return
            overall = (i + fraction) / len(statements)
            if not last or overall > last[0]:
                last[:] = [overall]
                report(overall)

        return part

    return [statement.run(share(i)) for i, statement in enumerate(statements)]


_WISE_EPSILON = Fraction(10)
_WISE_DELTA = Fraction(1, 10**5)


def _warn_unwise(budget: Budget, unused_bounds: set[str]) -> None:
    """A ``VeilWarning`` for what is allowed but rarely meant (decided from the query alone:
    whether a warning appears never depends on the data); none while a quiet search probes ε
    it will not run (:func:`veil.accuracy.search.probing`)."""
    if probing():
        return
    if budget.kind != "zcdp" and budget.eps > _WISE_EPSILON:
        warnings.warn(
            f"epsilon={float(budget.eps):g} for one query protects little (outputs may differ "
            "by a factor e^ε between neighbours); values above 10 are rarely meant",
            VeilWarning,
            stacklevel=4,
        )
    if budget.delta > _WISE_DELTA:
        warnings.warn(
            f"delta={float(budget.delta):g} is large: δ must be far below 1/n (n the number of "
            "privacy units), or one person's rows may be released outright; 1e-6 or less is usual",
            VeilWarning,
            stacklevel=4,
        )
    for column in sorted(unused_bounds):
        warnings.warn(
            f"bounds for {column!r} are ignored: no aggregate of this query clamps {column!r}",
            VeilWarning,
            stacklevel=4,
        )


def _refuse_both_target() -> None:
    raise InvalidArgumentError(
        "target= with bounds='auto' and limits='auto' together is not supported: the bounds "
        "step's ε is set from the targets at the widest bounds and limits the data could "
        "lead to (up to 1024 rows per unit), where they are rarely met; choose one of the two "
        "automatically — target= with limits='auto' and bounds as pairs, or target= with "
        "bounds='auto' and max_rows= (say) — or pass epsilon= with both 'auto'",
        cli="--target with --bounds auto and --limits auto together is not supported; choose "
        "one of the two automatically (--target with --limits auto and --bounds COLUMN=LO:HI, "
        "or --target with --bounds auto and --max-rows N), or pass --epsilon with both",
    )


def _refuse_auto_weights(weights: object) -> None:
    if weights is not None and weights is not False:
        raise InvalidArgumentError(
            f"weights={weights!r} and bounds='auto' cannot be combined yet (the weights' bounds "
            "must be declared, and the automatic bounds would be chosen unweighted); pass the "
            "bounds as pairs, e.g. bounds={'hours': (0, 60), 'coeff': (0, 5)}, or "
            "weights=False"
        )


def _weights_of(plan: Plan) -> str | None:
    """The survey-weights column a plan's aggregates are weighted by (``None``: unweighted)."""
    return next((a.weights for a in aggregate_of(plan).aggregates if a.weights), None)


def _refuse_stray_share(share: Number | None) -> None:
    if share is not None:
        shown = f"{float(as_fraction(share, 'bounds_share')):g}"
        raise InvalidArgumentError(
            f"bounds_share={shown} is the share of epsilon spent on finding bounds, but no "
            "bounds are 'auto'; pass bounds='auto' (or {'income': 'auto'}) or drop bounds_share",
            cli=f"--bounds-share {shown} needs --bounds COLUMN=auto (or --bounds auto)",
        )


def _unknown_option(name: str, allowed: Any) -> str:
    """The message for an option ``name`` that is not one of ``allowed`` (names)."""
    names = sorted(allowed)
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}=?" if close else f"the options are {', '.join(names)}"
    return f"unknown option {name}=; {hint}"


def _check_options(
    options: Mapping[str, Any],
    method: Any,
    what: str,
    *,
    drop: Sequence[str] = (),
    add: Sequence[str] = (),
) -> None:
    """``InvalidArgumentError`` naming the first option ``method`` does not take (with the
    closest one it does), instead of Python's ``TypeError`` from deep inside veil."""
    allowed = {p for p in inspect.signature(method).parameters if p not in drop} | set(add)
    for name in options:
        if name not in allowed:
            raise InvalidArgumentError(f"{what}(): {_unknown_option(name, allowed)}")


def _refuse_replayable(source: RandomSource | None, ledger: Ledger | ScratchLedger) -> None:
    refuse_replayable(source, persistent=ledger.persistent, ledger=ledger.url)


def _max_rows_without_unit(max_rows: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"max_rows={max_rows} bounds the rows of a privacy unit, but none is declared; pass "
        f"privacy_unit='user_id' (say), or for a table without an id column declare "
        f"contributions={max_rows} (each person has at most {max_rows} rows)",
        cli=f"--max-rows {max_rows} bounds the rows of a privacy unit, but none is declared; "
        f"pass --privacy-unit user_id (say), or for a table without an id column "
        f"--contributions {max_rows}",
    )


def _max_rows_bounds_nothing(max_rows: int, g: int, r: int, *, owner: bool) -> InvalidArgumentError:
    """A per-query ``max_rows`` above the declared ``max_groups × max_rows_per_group``."""
    kept = f"max_groups={g} × max_rows_per_group={r} keep at most {g * r} row(s) per unit already"
    if owner:
        return InvalidArgumentError(
            f"max_rows={max_rows} bounds nothing here: the data owner's limits {kept}, and a "
            f"query may only lower them; pass max_rows={g * r} or less, or ask the owner for "
            "higher limits",
            cli=f"--max-rows {max_rows} bounds nothing here: the data owner's limits {kept}, and "
            f"a query may only lower them; pass --max-rows {g * r} or less, or ask the owner "
            "for higher limits",
        )
    return InvalidArgumentError(
        f"max_rows={max_rows} bounds nothing here: the session's {kept}; pass max_groups= and "
        f"max_rows_per_group= with it (max_rows alone bounds a unit by itself only where "
        f"they were not declared), or open the session with max_rows={max_rows} alone",
        cli=f"--max-rows {max_rows} bounds nothing here: the session's {kept}; pass "
        "--max-groups and --max-rows-per-group with it",
    )


def _contribution(
    privacy_unit: str | None,
    max_groups: int | None,
    max_rows_per_group: int | None,
    max_rows: int | None,
    contributions: int | None,
) -> Contribution | None:
    """The session's limits; ``contributions`` (rows per person, declared) only without a
    privacy unit, ``max_rows`` (enforced) only with one."""
    if contributions is not None:
        if privacy_unit is not None:
            raise InvalidArgumentError(
                f"contributions={contributions!r} declares the rows of one person in a table "
                f"without an id column, but privacy_unit={privacy_unit!r} is declared: veil "
                f"bounds its rows itself; pass max_rows={contributions!r} instead",
                cli=f"--contributions {contributions!r} is for a table without an id column, "
                f"but --privacy-unit {privacy_unit} is given; pass --max-rows "
                f"{contributions!r} instead",
            )
        Contribution(max_rows=contributions)  # checks the value
        return Contribution(max_rows=contributions)
    if max_rows is not None and privacy_unit is None:
        Contribution(max_rows=max_rows)
        raise _max_rows_without_unit(max_rows)
    if max_groups is None and max_rows_per_group is None and max_rows is None:
        return None
    # None means the default (1, or max_rows when given); any other value, 0 included, is
    # checked by Contribution
    return Contribution.of(max_groups, max_rows_per_group, max_rows)


def _table(agg: Aggregate) -> str:
    node: Plan = agg.child
    while not isinstance(node, Scan):
        node = node.children[0]
    return node.table
