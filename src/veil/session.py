"""The session: the one place that walks a query through the whole flow (DESIGN §3).

    plan ─► rewrite (bounding, clamping, mechanism, split) ─► cache? ─► reserve ─► re-check the
    loss ─► SQL on the engine ─► noise ─► post-process ─► commit ─► Result

Ledger protocol: nothing is charged for a query refused before it runs (parse, schema,
bounds, budget errors all happen before ``reserve``); an identical query (same canonical plan,
data version and loss) is answered from ``ledger.cached_answer`` at no cost; a failure after
reserving and before the engine is asked to read the data refunds; once the engine reads
the data the charge stays, even on failure (:class:`veil.errors.QueryFailedError`, whose
message carries nothing from the engine: a data-dependent failure must not leak for free).

NULL rule: rows where a column read by an aggregate (other than COUNT(*)) is NULL or NaN are
left out of the whole aggregation, as if ``WHERE col IS NOT NULL`` had been written; a NULL
privacy unit is one unit; a NULL group key is a group of its own (unknown keys) or dropped
(public domain without None, histograms).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping, Sequence
from decimal import Decimal
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from sqlglot import exp

from veil.accounting.budget import Budget, Number
from veil.accounting.scratch import ScratchLedger
from veil.builder import Query
from veil.compile.dialect import dialect as dialect_of
from veil.compile.lower import BUCKET_COLUMN, BUCKET_COUNT_COLUMN, COUNT_COLUMN, lower, to_sql
from veil.compile.rules import Context, apply_rules
from veil.compile.verify import check_loss
from veil.engines.base import Engine, Progress, ProgressReporting, SchemaNotes
from veil.errors import (
    InternalError,
    InvalidArgumentError,
    QueryFailedError,
    SessionStateError,
    VeilError,
    VeilWarning,
)
from veil.plan.canonical import canonical, measurement_fingerprint
from veil.plan.nodes import (
    Aggregate,
    ColumnBounds,
    Contribution,
    KeyValue,
    Measurement,
    Plan,
    Scan,
    as_fraction,
)
from veil.plan.tree import aggregate_of
from veil.random import RandomSource, is_private, refuse_replayable, system_source
from veil.release.draw import Measured, finish, measure
from veil.release.explain import Explanation, describe_usage, expected_errors
from veil.release.keys import group_keys
from veil.release.result import Result

if TYPE_CHECKING:  # SQLAlchemy loads only when a database ledger is opened
    from veil.accounting.ledger import Ledger

__all__ = ["Result", "Session"]


BoundsArg = Mapping[str, tuple[Any, Any]] | None
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
        if not isinstance(pair, Sequence) or isinstance(pair, str) or len(pair) != 2:
            raise InvalidArgumentError(
                f"bounds for {col!r} must be a pair (lower, upper), got {pair!r}"
            )
        out[col] = ColumnBounds(col, pair[0], pair[1])
    return out


def _integer(v: Any) -> int:
    """An exact statistic from the engine as an int (a SUM over no rows is NULL: 0)."""
    if v is None:
        return 0
    if isinstance(v, Decimal):
        if v != v.to_integral_value():
            raise InternalError(f"an exact integer statistic came back as {v}")
        return int(v)
    if isinstance(v, int):
        return v
    raise InternalError(f"an exact integer statistic came back as {v!r}")


class Session:
    """Differentially private queries over named tables on one engine, charged to one ledger.

    Build one with :meth:`local` (DuckDB in-process). ``privacy_unit`` is the column whose
    rows are protected together (``None``: each row); ``bounds`` default clamping bounds per
    column; ``max_groups`` / ``max_rows_per_group`` the contribution limits (defaults 1 and 1).
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
        quantile_buckets: int = 1024,
        source: RandomSource | None = None,
    ) -> None:
        self.engine = engine
        self.ledger = ledger
        self.analyst = analyst
        self.dataset = dataset
        self.privacy_unit = privacy_unit
        self.bounds = _bounds(bounds)
        self.contribution = _contribution(max_groups, max_rows_per_group)
        self.domains: dict[str, tuple[KeyValue, ...]] = {
            k: tuple(v) for k, v in (domains or {}).items()
        }
        self.quantile_buckets = quantile_buckets
        _refuse_replayable(source, ledger)
        self._source = source
        self._closed = False

    @classmethod
    def local(
        cls,
        tables: Mapping[str, Any],
        *,
        privacy_unit: str | None = None,
        budget: Budget | None = None,
        analyst: str = "analyst",
        ledger: Ledger | ScratchLedger | str | None = None,
        dataset: str | None = None,
        bounds: BoundsArg = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        domains: DomainsArg = None,
        connection: Any = None,
        source: RandomSource | None = None,
        schema: Mapping[str, Mapping[str, str]] | None = None,
        self_grant: bool = False,
    ) -> Session:
        """A session on the embedded DuckDB engine.

        ``tables``: name → CSV/Parquet path (scanned lazily), pandas/Polars/Arrow object, or a
        table name of ``connection``. ``ledger``: a :class:`veil.Ledger`, a URL
        (``"sqlite:///ledger.db"``) or ``None`` for an in-memory one. ``budget`` is granted to
        (``analyst``, ``dataset``) if the ledger has no grant for them yet — on a persistent
        ledger only with ``self_grant=True`` (budgets are the data owner's to grant);
        ``dataset`` (the unit of accounting: one name per table) defaults to the table names
        joined by ``+``. ``domains`` declares public group keys (column → every key), released
        in full, empty groups included, without partition selection. ``schema`` declares
        column types, ``{"people": {"income": "DOUBLE"}}``: CSV columns are otherwise text (see
        :mod:`veil.engines.declared`).
        """
        from veil.engines.duckdb import DuckDBEngine

        return cls._on(
            DuckDBEngine(tables, connection=connection, schema=schema),
            tables,
            ledger=ledger,
            budget=budget,
            analyst=analyst,
            dataset=dataset,
            privacy_unit=privacy_unit,
            bounds=bounds,
            max_groups=max_groups,
            max_rows_per_group=max_rows_per_group,
            domains=domains,
            source=source,
            self_grant=self_grant,
        )

    @classmethod
    def spark(
        cls,
        spark_session: Any,
        tables: Mapping[str, Any],
        *,
        privacy_unit: str | None = None,
        budget: Budget | None = None,
        analyst: str = "analyst",
        ledger: Ledger | ScratchLedger | str | None = None,
        dataset: str | None = None,
        bounds: BoundsArg = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        domains: DomainsArg = None,
        source: RandomSource | None = None,
        schema: Mapping[str, Mapping[str, str]] | None = None,
        self_grant: bool = False,
    ) -> Session:
        """A session on Apache Spark (``pip install 'veil[spark]'``), classic or Spark Connect.

        ``tables``: name → Spark DataFrame, catalog table name, or Parquet/CSV path (any URI
        Spark reads). The same plans and lowering as :meth:`local`; Spark runs the bounding and
        the exact sums, and only the aggregated rows reach the driver. ``schema`` declares
        column types as in :meth:`local`. Other arguments as in :meth:`local`.
        """
        from veil.engines.spark import SparkEngine

        return cls._on(
            SparkEngine(spark_session, tables, schema=schema),
            tables,
            ledger=ledger,
            budget=budget,
            analyst=analyst,
            dataset=dataset,
            privacy_unit=privacy_unit,
            bounds=bounds,
            max_groups=max_groups,
            max_rows_per_group=max_rows_per_group,
            domains=domains,
            source=source,
            self_grant=self_grant,
        )

    @classmethod
    def postgres(
        cls,
        url: str,
        tables: Mapping[str, str],
        *,
        privacy_unit: str | None = None,
        budget: Budget | None = None,
        analyst: str = "analyst",
        ledger: Ledger | ScratchLedger | str | None = None,
        dataset: str | None = None,
        bounds: BoundsArg = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        domains: DomainsArg = None,
        source: RandomSource | None = None,
        schema: Mapping[str, Mapping[str, str]] | None = None,
        self_grant: bool = False,
    ) -> Session:
        """A session on PostgreSQL (``pip install 'veil[postgres]'``).

        ``url``: ``postgresql://user@host:5432/database``; ``tables``: name → ``schema.table``
        (a table, view or materialized view). The same plans and lowering as :meth:`local`;
        PostgreSQL runs the bounding and the exact sums, and only the aggregated rows leave
        the server (see :mod:`veil.engines.postgres`). Other arguments as in :meth:`local`.
        """
        from veil.engines.postgres import PostgresEngine

        return cls._on(
            PostgresEngine(url, tables, schema=schema),
            tables,
            ledger=ledger,
            budget=budget,
            analyst=analyst,
            dataset=dataset,
            privacy_unit=privacy_unit,
            bounds=bounds,
            max_groups=max_groups,
            max_rows_per_group=max_rows_per_group,
            domains=domains,
            source=source,
            self_grant=self_grant,
        )

    @classmethod
    def _on(
        cls,
        engine: Engine,
        tables: Mapping[str, Any],
        *,
        ledger: Ledger | ScratchLedger | str | None,
        budget: Budget | None,
        analyst: str,
        dataset: str | None,
        self_grant: bool = False,
        **options: Any,
    ) -> Session:
        """A session on ``engine``: open the ledger (``None``: in memory), name the dataset
        (default: the table names joined by ``+``); ``options`` go to :meth:`__init__`.

        Budgets are granted, not taken: on an in-memory ledger (a scratch session, gone with
        the process) ``budget`` is granted unless a grant exists; on a persistent ledger the
        session spends only a grant the data owner made (``ledger.grant``, ``veil budget
        grant``), and ``budget`` is refused unless ``self_grant=True`` says, explicitly, that
        this session may create its own grant when none exists (a personal ledger). An
        existing grant is never topped up."""
        if ledger is None or isinstance(ledger, str | os.PathLike):
            from veil.accounting.ledger import Ledger

            ledger = Ledger(ledger if ledger is not None else "sqlite://")
        name = dataset or "+".join(sorted(tables))
        if budget is not None:
            if ledger.persistent and not self_grant:
                raise InvalidArgumentError(
                    f"budget={budget!r} would let this session grant analyst {analyst!r} a "
                    f"budget on dataset {name!r} in the persistent ledger {ledger.url}; budgets "
                    f"are granted by the data owner: veil budget grant --ledger URL --analyst "
                    f"{analyst} --dataset {name} --epsilon E (or ledger.grant(...)), then open "
                    "the session without budget=. On a personal ledger, pass self_grant=True "
                    "to grant it when no grant exists"
                )
            if not ledger.has_grant(analyst, name):
                ledger.grant(analyst, name, budget)
        return cls(engine, ledger=ledger, analyst=analyst, dataset=name, **options)

    # -- state --------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the session (and an engine it owns); later queries raise SessionStateError."""
        if not self._closed:
            self._closed = True
            closer = getattr(self.engine, "close", None)
            if callable(closer):
                closer()

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
        tables: Sequence[str] = getattr(self.engine, "tables", ())
        return {t: self.engine.schema(t) for t in tables}

    def plan(self, text: str, *, bounds: BoundsArg = None, domains: DomainsArg = None) -> Plan:
        """The plan of SQL ``text`` (veil's DP subset), before compiling."""
        from veil.sql import parse

        self._open()
        merged = {**self.bounds, **_bounds(bounds)}
        return parse(
            text,
            self._schemas(),
            privacy_unit=self.privacy_unit,
            bounds=list(merged.values()),
            contribution=self.contribution,
            domains={**self.domains, **(domains or {})},
        )

    def query(self, table: str) -> Query:
        """A query builder over ``table``; ``.run(epsilon=…)`` / ``.explain(…)`` come back here."""
        self._open()
        from veil.plan.tree import fields_from_arrow

        return Query.over(table, fields_from_arrow(self.engine.schema(table)), runner=self)

    def run_query(self, query: Query, **options: Any) -> Result:
        plan = self._builder_plan(query, options)  # takes "domains" out of options
        return self.run(plan, **options)

    def explain_query(self, query: Query, **options: Any) -> Explanation:
        plan = self._builder_plan(query, options)
        return self.explain(plan, **options)

    def _builder_plan(self, query: Query, options: dict[str, Any]) -> Plan:
        """The plan of builder ``query`` with the session's settings; takes ``domains`` out of
        ``options`` (the plan has them) and leaves ``bounds`` in (compiling reads them too)."""
        bounds = options.get("bounds")
        return query.plan(
            privacy_unit=self.privacy_unit,
            bounds=list({**self.bounds, **_bounds(bounds)}.values()),
            contribution=self.contribution,
            domains={**self.domains, **(options.pop("domains", None) or {})},
        )

    def _compile(
        self,
        plan: Plan,
        epsilon: Number | Budget | None,
        delta: Number | None,
        bounds: BoundsArg,
        max_groups: int | None,
        max_rows_per_group: int | None,
    ) -> Plan:
        if epsilon is None:
            raise InvalidArgumentError("a query needs a privacy cost: pass epsilon=0.1 (say)")
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
        contribution = self.contribution
        if max_groups is not None or max_rows_per_group is not None:
            base = contribution or agg.contribution
            contribution = Contribution(
                max_groups if max_groups is not None else base.max_groups,
                max_rows_per_group if max_rows_per_group is not None else base.max_rows_per_group,
            )
        ctx = Context(
            budget=budget,
            privacy_unit=self.privacy_unit,
            bounds={**self.bounds, **_bounds(bounds)},
            contribution=contribution,
            quantile_buckets=self.quantile_buckets,
        )
        compiled = apply_rules(plan, ctx)
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
        bounds: BoundsArg = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        domains: DomainsArg = None,
        consistent: bool = False,
        source: RandomSource | None = None,
        progress: Progress | None = None,
    ) -> Result:
        """Answer SQL ``text`` with noise, error bars and a charged budget.

        ``epsilon`` (and ``delta``, needed when group keys are not public; by default the
        grant's δ in proportion to ε) is the query's cost; ``bounds``, ``domains``,
        ``max_groups`` and ``max_rows_per_group`` override the session's for this query;
        ``consistent=True`` makes released group counts add up to their noisy total;
        ``progress`` is called with the scan's progress (see :meth:`run`).
        """
        plan = self.plan(text, bounds=bounds, domains=domains)
        return self.run(
            plan,
            epsilon=epsilon,
            delta=delta,
            bounds=bounds,
            max_groups=max_groups,
            max_rows_per_group=max_rows_per_group,
            consistent=consistent,
            source=source,
            progress=progress,
            text=text,
        )

    def run(
        self,
        plan: Plan,
        *,
        epsilon: Number | Budget | None = None,
        delta: Number | None = None,
        bounds: BoundsArg = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        consistent: bool = False,
        source: RandomSource | None = None,
        progress: Progress | None = None,
        text: str | None = None,
    ) -> Result:
        """Answer ``plan`` (see the module docstring for the protocol).

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
        if progress is not None and not callable(progress):
            raise InvalidArgumentError(
                f"progress must be a function taking a fraction (or None), got {progress!r}"
            )
        _refuse_replayable(source, self.ledger)
        compiled = self._compile(plan, epsilon, delta, bounds, max_groups, max_rows_per_group)
        agg = aggregate_of(compiled)
        if agg.budget is None:
            raise InternalError("the compiled aggregation has no charged loss")
        loss = agg.budget
        # the cache key is what is measured: a query that differs only in post-processing
        # (HAVING, ORDER BY, LIMIT, aliases, consistent=) is answered from the cache, free
        fp = measurement_fingerprint(agg)
        sql_dialect = dialect_of(self.engine.dialect)
        # lowered once before reserving: every constant it writes is checked here, free
        probe = lower(agg, sql_dialect, salt=0)
        checker = getattr(self.engine, "check", None)
        if callable(checker):  # type and name errors are refused here, free and unhidden
            for tree in (probe.main, *(t for _, t in probe.quantiles)):
                checker(tree)
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
        reservation = self.ledger.reserve(
            self.analyst, self.dataset, loss, fingerprint=fp, data_version=version, query=text
        )
        try:  # nothing here reads private data: a failure refunds
            check_loss(agg, reservation.loss)
            salt = int.from_bytes(src.random_bytes(8), "big") >> 1
            lowered = lower(agg, sql_dialect, salt=salt)
        except BaseException:
            reservation.refund()
            raise
        # The engine reads private data from here on. The path is total by construction (the
        # SQL cannot fail on a value, keys arrive losslessly, every decode is defined); if it
        # still fails, the charge stays and the error says nothing the engine or the release
        # said (not even as __cause__).
        try:
            trees = (lowered.main, *(tree for _, tree in lowered.quantiles))
            tables = _execute_all(self.engine, trees, progress)
            main = tables[0]
            if sql_dialect.sum_wraps and _may_wrap(agg, main):
                # a group too large to certify 64-bit sums: the same statement (same salt,
                # same rows) with exact wide sums — the same values, only slower
                wide = lower(agg, sql_dialect, salt=salt, exact_sums=True)
                main = self.engine.execute(wide.main)
            buckets = {name: t for (name, _), t in zip(lowered.quantiles, tables[1:], strict=True)}
            exact = _exact_stats(agg, main, dict(lowered.columns), lowered.keys)
            counts = {name: _bucket_counts(agg, t, lowered.keys) for name, t in buckets.items()}
            measured: Measured | None = measure(agg, exact, counts, src, private=is_private(chosen))
        except Exception:
            measured = None
        result: Result | None = None
        if measured is not None:
            try:  # post-processing of the measurement: a failure here is a bug
                result = finish(compiled, agg, measured, fp, consistent=consistent)
            except Exception:
                result = None
        if result is None:
            reservation.commit(None if measured is None else measured.to_json())
            raise QueryFailedError(
                f"the query failed after the engine began reading the data; the charge stays "
                f"({loss}), because a failure that depends on the data would otherwise leak it "
                "for free. The engine's message is withheld for the same reason: check the "
                "query on synthetic or public data with the same schema"
            )
        reservation.commit(measured.to_json() if measured is not None else None)
        return result

    def explain(
        self,
        query: str | Plan,
        *,
        epsilon: Number | Budget | None = None,
        delta: Number | None = None,
        bounds: BoundsArg = None,
        max_groups: int | None = None,
        max_rows_per_group: int | None = None,
        domains: DomainsArg = None,
    ) -> Explanation:
        """What ``query`` would do and cost, without reading private data or charging.

        Without ``epsilon`` the explanation assumes ε = 1 (and, for unknown keys without a δ
        to take from the grant, δ = 10⁻⁶); ``notes`` says so.
        """
        plan = self.plan(query, bounds=bounds, domains=domains) if isinstance(query, str) else query
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
        compiled = self._compile(plan, epsilon, delta, bounds, max_groups, max_rows_per_group)
        agg = aggregate_of(compiled)
        if agg.budget is None:
            raise InternalError("the compiled aggregation has no charged loss")
        check_loss(agg, agg.budget)
        if isinstance(self.engine, SchemaNotes):
            notes.extend(self.engine.notes(_table(agg)))
        # the bounding salt is secret and drawn per run: explain shows a placeholder
        lowered = lower(agg, dialect_of(self.engine.dialect), salt=None)
        unit = agg.privacy_unit or "each row"
        contribution = (
            f"privacy unit {unit}: at most {agg.contribution.max_groups} group(s) and "
            f"{agg.contribution.max_rows_per_group} row(s) per group"
            if agg.privacy_unit
            else "row-level privacy (each row is a unit)"
        )
        remaining: Budget | None = None
        covered: bool | None = None
        if self.ledger.has_grant(self.analyst, self.dataset):
            remaining = self.ledger.remaining(self.analyst, self.dataset)
            covered = self.ledger.covers(self.analyst, self.dataset, agg.budget)
        return Explanation(
            remaining=remaining,
            covered=covered,
            plan=compiled,
            sql=to_sql(lowered.main, self.engine.dialect),
            quantile_sql=tuple(to_sql(t, self.engine.dialect) for _, t in lowered.quantiles),
            cost=agg.budget,
            usage=describe_usage(agg),
            errors=expected_errors(agg),
            contribution=contribution,
            notes=tuple(notes),
        )


def _execute_all(
    engine: Engine, trees: Sequence[exp.Expression], progress: Progress | None
) -> list[pa.Table]:
    """Run ``trees`` on ``engine`` in order; ``progress`` sees them as one scan, each tree an
    equal share: ``None`` only before the first fraction, then strictly increasing fractions."""
    if progress is None or not isinstance(engine, ProgressReporting):
        return [engine.execute(tree) for tree in trees]
    report: Progress = progress
    last: list[float] = []  # the largest fraction reported so far

    def share(i: int) -> Progress:
        def part(fraction: float | None) -> None:
            if fraction is None:
                if i == 0 and not last:
                    report(None)
                return
            overall = (i + fraction) / len(trees)
            if not last or overall > last[0]:
                last[:] = [overall]
                report(overall)

        return part

    return [engine.execute_with_progress(tree, share(i)) for i, tree in enumerate(trees)]


_WISE_EPSILON = Fraction(10)
_WISE_DELTA = Fraction(1, 10**5)


def _warn_unwise(budget: Budget, unused_bounds: set[str]) -> None:
    """A ``VeilWarning`` for what is allowed but rarely meant (decided from the query alone:
    whether a warning appears never depends on the data)."""
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


def _refuse_replayable(source: RandomSource | None, ledger: Ledger | ScratchLedger) -> None:
    refuse_replayable(source, persistent=ledger.persistent, ledger=ledger.url)


def _contribution(max_groups: int | None, max_rows: int | None) -> Contribution | None:
    if max_groups is None and max_rows is None:
        return None
    # None means the default (1); any other value, 0 included, is checked by Contribution
    return Contribution(
        1 if max_groups is None else max_groups, 1 if max_rows is None else max_rows
    )


def _table(agg: Aggregate) -> str:
    node: Plan = agg.child
    while not isinstance(node, Scan):
        node = node.children[0]
    return node.table


# -- from engine output to released rows ----------------------------------------------------


_INT64_LIMIT = 1 << 63


def _sums(agg: Aggregate) -> list[Measurement]:
    return [m for m in agg.measurements if m.statistic in ("sum", "sum_squares")]


def _may_wrap(agg: Aggregate, table: pa.Table) -> bool:
    """Whether a 64-bit sum of some group may have wrapped: every term lies in
    ``[-limit, limit]``, so no partial sum, in any order, leaves the 64-bit range while
    ``rows · limit < 2^63``; beyond that the sums must be recomputed exactly."""
    limit = max((m.limit for m in _sums(agg)), default=0)
    if limit == 0 or table.num_rows == 0:
        return False
    rows = max(int(n) for n in table.column(COUNT_COLUMN).to_pylist())
    return rows * limit >= _INT64_LIMIT


def _exact_stats(
    agg: Aggregate,
    table: pa.Table,
    columns: Mapping[str, str],
    keys: Sequence[str],
) -> dict[Key, dict[str, int]]:
    """Exact statistics per group, keyed as the engine grouped them.

    Invariants checked (each a bug if broken: the query then fails, charged): one row per
    group, no NULL sum in a non-empty group, every sum within ``±rows·limit``.
    """
    data = table.to_pydict()
    out: dict[Key, dict[str, int]] = {}
    by_name = {m.name: m for m in agg.measurements}
    for i, key in enumerate(group_keys(agg, table, keys)):
        if key in out:
            raise InternalError("the engine returned one group twice")
        rows = int(data[COUNT_COLUMN][i])
        if rows > 0 and any(data[col][i] is None for col in columns.values()):
            raise InternalError("an exact statistic of a non-empty group came back NULL")
        stats = {name: _integer(data[col][i]) for name, col in columns.items()}
        for name, value in stats.items():
            m = by_name[name]
            if m.statistic in ("sum", "sum_squares") and abs(value) > rows * m.limit:
                raise InternalError(
                    f"the exact sum {name!r} is outside ±rows·limit: an integer overflow"
                )
        out[key] = stats
    return out


def _bucket_counts(
    agg: Aggregate, table: pa.Table, keys: Sequence[str]
) -> dict[Key, dict[int, int]]:
    buckets = table.column(BUCKET_COLUMN).to_pylist()
    counts = table.column(BUCKET_COUNT_COLUMN).to_pylist()
    out: dict[Key, dict[int, int]] = {}
    for key, b, c in zip(group_keys(agg, table, keys), buckets, counts, strict=True):
        out.setdefault(key, {})[int(b)] = int(c)
    return out
