"""The Python query builder: the same plans as SQL, built by method calls.

>>> from veil.plan.nodes import Field
>>> q = (
...     Query.over("people", [Field("user_id", "integer"), Field("state", "string"),
...                           Field("income", "real")])
...     .where("income > 0")
...     .group_by("state")
...     .count("n")
...     .avg("income")
...     .having("n > 10")
...     .order_by("n", descending=True)
...     .limit(5)
... )
>>> [f.name for f in q.plan(privacy_unit="user_id", bounds={"income": (0, 1e6)}).schema()]
['state', 'n', 'avg_income']

A :class:`Query` is immutable: each method returns a new one. ``plan()`` assembles the plan
chain ``Scan → [Filter] → Aggregate → [Having] → [Sort] → [Limit] → [Project]`` exactly as
:func:`veil.sql.parse` does for the equivalent SQL (``veil.sql`` builds its plans with this
class), so both give equal plans and equal fingerprints.

Options of ``run``/``explain`` are :meth:`veil.Session.run`'s, ``bounds="auto"`` and
``limits="auto"`` included: a built query runs the very steps and charges of its SQL.

The expression policy it shares with the SQL front end (what WHERE and HAVING may hold, how a
column name resolves) is :mod:`veil.plan.expressions`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Protocol

from sqlglot import exp

from veil.aggregates import kind
from veil.errors import InvalidArgumentError
from veil.plan.expressions import (
    DIALECT,
    check_released_expression,
    check_row_expression,
    parse_expression,
    position,
    resolve_column,
)
from veil.plan.nodes import (
    Aggregate,
    AggregateCall,
    AggregateFunction,
    ColumnBounds,
    ColumnType,
    Contribution,
    Field,
    Filter,
    GroupKey,
    Having,
    KeyValue,
    Limit,
    Plan,
    Project,
    Scan,
    Sort,
    SortKey,
    as_fraction,
)
from veil.plan.tree import fields_from_arrow

if TYPE_CHECKING:
    from veil.release.explain import Explanation
    from veil.release.result import Result

__all__ = [
    "DIALECT",
    "BoundsLike",
    "Query",
    "QueryRunner",
    "check_released_expression",
    "check_row_expression",
    "default_alias",
    "domains_from_predicate",
    "fields_from_arrow",
    "parse_expression",
    "position",
    "resolve_column",
]


def default_alias(
    function: AggregateFunction, column: str | None, quantile: Fraction | None = None
) -> str:
    """The output name of an aggregate given no alias: ``count``, ``sum_income``, ``median_age``,
    ``p90_age`` (quantile 0.9), ``count_distinct_user_id``…

    >>> default_alias("quantile", "age", Fraction(999, 1000))
    'p99_9_age'
    """
    return kind(function).default_alias(column, quantile)


# ── the builder ──────────────────────────────────────────────────────────────────────────────


class QueryRunner(Protocol):
    """What a session provides to run or explain a built query (``Session.query(table)``)."""

    def run_query(self, query: Query, **options: Any) -> Result: ...

    def explain_query(self, query: Query, **options: Any) -> Explanation: ...


BoundsLike = Mapping[str, tuple[Any, Any]] | Iterable[ColumnBounds]


@dataclass(frozen=True)
class Query:
    """An immutable DP query over one table, built step by step (see the module docstring)."""

    table: str
    columns: tuple[Field, ...]
    predicate: exp.Expression | None = None
    keys: tuple[GroupKey, ...] = ()
    aggregates: tuple[AggregateCall, ...] = ()
    having_predicate: exp.Expression | None = None
    sort_keys: tuple[SortKey, ...] = ()
    limit_count: int | None = None
    limit_offset: int = 0
    selected: tuple[str, ...] | None = None
    declarable: bool = True
    runner: QueryRunner | None = field(default=None, compare=False, repr=False)

    @classmethod
    def over(
        cls,
        table: str,
        columns: Iterable[Field],
        *,
        runner: QueryRunner | None = None,
        declarable: bool = True,
    ) -> Query:
        """A query over ``table`` whose schema is ``columns``; ``declarable`` says whether its
        engine takes declared column types (:class:`veil.plan.nodes.Scan`)."""
        scan = Scan(table, tuple(columns), declarable)
        return cls(table=table, columns=scan.columns, declarable=declarable, runner=runner)

    # rows ------------------------------------------------------------------------------------

    def where(self, predicate: str | exp.Expression) -> Query:
        """Keep the rows where ``predicate`` holds (SQL text or a sqlglot expression); several
        calls are combined with AND."""
        text = predicate if isinstance(predicate, str) else ""
        node = parse_expression(predicate, "where()") if isinstance(predicate, str) else predicate
        if not isinstance(node, exp.Expression):
            raise InvalidArgumentError(
                f"where() takes SQL text or a sqlglot expression, got {predicate!r}"
            )
        return self.where_checked(
            check_row_expression(node, self.columns, table=self.table, text=text)
        )

    def where_checked(self, checked: exp.Expression) -> Query:
        """:meth:`where` for a predicate that :func:`veil.plan.expressions.check_row_expression`
        returned for this query's table (the SQL reader's, which checked it against the
        query's qualifiers and text): not checked again."""
        if self.predicate is not None:
            checked = exp.and_(self.predicate, checked, copy=True).assert_is(exp.Expression)
        return replace(self, predicate=checked)

    def group_by(self, *keys: str | GroupKey) -> Query:
        """Group by columns (names) or :class:`GroupKey` s (public domains, histogram bins)."""
        out = list(self.keys)
        for key in keys:
            if isinstance(key, str):
                name = resolve_column(key, self.columns, table=self.table).name
                out.append(GroupKey(name))
            elif isinstance(key, GroupKey):
                name = resolve_column(key.column, self.columns, table=self.table).name
                out.append(replace(key, column=name) if name != key.column else key)
            else:
                raise InvalidArgumentError(
                    f"group_by() takes column names or GroupKey objects, got {key!r}"
                )
        return replace(self, keys=tuple(out))

    def bin(self, column: str, *edges: Any, alias: str | None = None) -> Query:
        """Group by histogram bins ``[e0, e1), …, [e_{n-1}, en]`` of ``column`` — SQL's
        ``GROUP BY BIN(column, e0, …, en)``; every bin is released, empty ones included."""
        return self.group_by(GroupKey(column, edges=tuple(edges), alias=alias or ""))

    def group_by_keys(
        self, column: str, keys: Iterable[KeyValue], alias: str | None = None
    ) -> Query:
        """Group by ``column`` over the public list ``keys``: every key is released (empty ones
        included) and rows with other keys are dropped; no δ is spent on partition selection."""
        return self.group_by(GroupKey(column, domain=tuple(keys), alias=alias or ""))

    # aggregates ------------------------------------------------------------------------------

    def agg(
        self,
        function: AggregateFunction,
        column: str | None = None,
        alias: str | None = None,
        *,
        quantile: Any = None,
        weight: Any = None,
        top: tuple[int, int] | None = None,
    ) -> Query:
        """Add any aggregate by its plan name (``"count"``, ``"sum"``, ``"quantile"``…);
        ``top`` is a TOP_K column's (rank, k)."""
        name = None
        if column is not None:
            name = resolve_column(column, self.columns, table=self.table).name
        q = None if quantile is None else as_fraction(quantile, "the quantile")
        call = AggregateCall(
            alias=alias or default_alias(function, name, q),
            function=function,
            column=name,
            quantile=q,
            weight=weight,
            top=top,
        )
        return replace(self, aggregates=(*self.aggregates, call))

    def count(
        self, alias: str | None = None, *, column: str | None = None, weight: Any = None
    ) -> Query:
        """COUNT(*) (or COUNT(column): rows where ``column`` is not NULL)."""
        return self.agg("count", column, alias, weight=weight)

    def count_distinct(self, column: str, alias: str | None = None, *, weight: Any = None) -> Query:
        """COUNT(DISTINCT column) — only for the privacy unit: the number of units."""
        return self.agg("count_distinct", column, alias, weight=weight)

    def sum(self, column: str, alias: str | None = None, *, weight: Any = None) -> Query:
        """SUM(column) of values clamped to the column's bounds."""
        return self.agg("sum", column, alias, weight=weight)

    def avg(self, column: str, alias: str | None = None, *, weight: Any = None) -> Query:
        """AVG(column) of values clamped to the column's bounds."""
        return self.agg("avg", column, alias, weight=weight)

    def variance(self, column: str, alias: str | None = None, *, weight: Any = None) -> Query:
        """VARIANCE / VAR_SAMP(column): the sample variance of clamped values."""
        return self.agg("variance", column, alias, weight=weight)

    def stddev(self, column: str, alias: str | None = None, *, weight: Any = None) -> Query:
        """STDDEV / STDDEV_SAMP(column): the sample standard deviation of clamped values."""
        return self.agg("stddev", column, alias, weight=weight)

    def quantile(
        self, column: str, q: Any, alias: str | None = None, *, weight: Any = None
    ) -> Query:
        """QUANTILE_CONT(column, q) / PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY column)."""
        return self.agg("quantile", column, alias, quantile=q, weight=weight)

    def median(self, column: str, alias: str | None = None, *, weight: Any = None) -> Query:
        """MEDIAN(column): the quantile 1/2."""
        return self.agg("quantile", column, alias, quantile=Fraction(1, 2), weight=weight)

    def min(self, column: str, alias: str | None = None, *, weight: Any = None) -> Query:
        """MIN(column): the 0-quantile of clamped values."""
        return self.agg("min", column, alias, weight=weight)

    def max(self, column: str, alias: str | None = None, *, weight: Any = None) -> Query:
        """MAX(column): the 1-quantile of clamped values."""
        return self.agg("max", column, alias, weight=weight)

    # released values -------------------------------------------------------------------------

    def _output_names(self) -> list[str]:
        return [k.alias for k in self.keys] + [a.alias for a in self.aggregates]

    def having(self, predicate: str | exp.Expression) -> Query:
        """Keep released groups where ``predicate`` over output columns holds (post-processing);
        several calls are combined with AND."""
        text = predicate if isinstance(predicate, str) else ""
        node = parse_expression(predicate, "having()") if isinstance(predicate, str) else predicate
        if not isinstance(node, exp.Expression):
            raise InvalidArgumentError(
                f"having() takes SQL text or a sqlglot expression, got {predicate!r}"
            )
        checked = check_released_expression(node, self._output_names(), text=text)
        if self.having_predicate is not None:
            checked = exp.and_(self.having_predicate, checked, copy=True).assert_is(exp.Expression)
        return replace(self, having_predicate=checked)

    def order_by(self, *columns: str | SortKey, descending: bool = False) -> Query:
        """Order released rows by output columns (``descending`` applies to names given here)."""
        keys = list(self.sort_keys)
        for c in columns:
            keys.append(c if isinstance(c, SortKey) else SortKey(str(c), descending))
        return replace(self, sort_keys=tuple(keys))

    def limit(self, count: int, offset: int = 0) -> Query:
        """Keep the first ``count`` released rows after ``offset``."""
        return replace(self, limit_count=count, limit_offset=offset)

    def select(self, *columns: str) -> Query:
        """Choose and order the output columns (default: keys, then aggregates)."""
        return replace(self, selected=tuple(columns))

    # assembly --------------------------------------------------------------------------------

    def plan(
        self,
        *,
        privacy_unit: str | None = None,
        bounds: BoundsLike | None = None,
        contribution: Contribution | None = None,
        domains: Mapping[str, Sequence[KeyValue]] | None = None,
    ) -> Plan:
        """The plan chain of this query.

        ``bounds`` may name any columns; only those read by an aggregate that clamps enter the
        plan. ``domains`` gives public key sets for grouped columns declared without one; a
        grouped column that the WHERE condition restricts to listed values (``col IN ('a',
        'b')`` or ``col = 'a'``, as a top-level AND term) has those values as its public domain.
        """
        node: Plan = Scan(self.table, self.columns, self.declarable)
        if self.predicate is not None:
            node = Filter(node, self.predicate)
        unit = None
        if privacy_unit is not None:
            unit = resolve_column(privacy_unit, self.columns, table=self.table).name
        aggregates = self.aggregates
        known = {**domains_from_predicate(self.predicate, self.columns), **(domains or {})}
        aggregates = _mode_candidates(aggregates, known)
        node = Aggregate(
            node,
            keys=_with_domains(
                self.keys,
                {**domains_from_predicate(self.predicate, self.columns), **(domains or {})},
            ),
            aggregates=aggregates,
            privacy_unit=unit,
            contribution=contribution or Contribution(),
            bounds=self._bounds(aggregates, bounds),
        )
        if self.having_predicate is not None:
            node = Having(node, self.having_predicate)
        if self.sort_keys:
            node = Sort(node, self.sort_keys)
        if self.limit_count is not None:
            node = Limit(node, self.limit_count, self.limit_offset)
        if self.selected is not None and self.selected != node.column_names():
            node = Project(node, self.selected)
        return node

    def _bounds(
        self, aggregates: Sequence[AggregateCall], bounds: BoundsLike | None
    ) -> tuple[ColumnBounds, ...]:
        given: dict[str, ColumnBounds] = {}
        items: Iterable[ColumnBounds]
        if bounds is None:
            items = ()
        elif isinstance(bounds, Mapping):
            items = [_bounds_entry(c, v) for c, v in bounds.items()]
        else:
            items = list(bounds)
        for b in items:
            if not isinstance(b, ColumnBounds):
                raise InvalidArgumentError(f"bounds must map column → (lower, upper), got {b!r}")
            name = resolve_column(b.column, self.columns, table=self.table).name
            given[name] = replace(b, column=name)
        used = {a.column for a in aggregates if a.needs_bounds and a.column is not None}
        return tuple(given[c] for c in sorted(used) if c in given)

    # running (through the session that made this query) ---------------------------------------

    def _runner(self) -> QueryRunner:
        if self.runner is None:
            raise InvalidArgumentError(
                "this query is not bound to a session; build it with session.query(table) "
                "or call .plan() and run the plan yourself"
            )
        return self.runner

    def run(self, **options: Any) -> Result:
        """Run through the session that made this query (``epsilon=…, delta=…, bounds=…``).

        ``bounds="auto"`` (or ``{"income": "auto"}``, ``{"income": {"auto": KEY}}``) with
        ``bounds_share=``, and ``limits="auto"`` / ``"auto_groups"`` with ``limits_share=``,
        choose the bounds and the limits under DP first (:mod:`veil.autobounds`,
        :mod:`veil.autoboth`): the same steps, charges, fingerprints and cached answers as the
        SQL of the same question through :meth:`veil.Session.sql`; with ``target=`` instead of
        ε, either one's step ε is set by the targets (:mod:`veil.autolimits_target`,
        :mod:`veil.autobounds_target`)."""
        return self._runner().run_query(self, **options)

    def explain(self, **options: Any) -> Explanation:
        """Explain through the session that made this query, without reading private data
        (with ``bounds="auto"`` / ``limits="auto"``: the whole cost of their steps and the
        query, as :meth:`run` would charge it)."""
        return self._runner().explain_query(self, **options)


def _bounds_entry(column: object, value: object) -> ColumnBounds:
    if not isinstance(column, str):
        raise InvalidArgumentError(f"bounds keys must be column names, got {column!r}")
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise InvalidArgumentError(
            f"bounds for {column!r} must be a (lower, upper) pair, got {value!r}; "
            f"e.g. bounds={{{column!r}: (0, 100)}}"
        )
    return ColumnBounds(column, value[0], value[1])


def domains_from_predicate(
    predicate: exp.Expression | None, columns: Sequence[Field]
) -> dict[str, tuple[KeyValue, ...]]:
    """Public key sets a row condition declares: ``col IN (literals)`` or ``col = literal``
    as a term of the top-level AND. Only rows with these keys pass the condition, so releasing
    every listed key (empty ones included) reveals nothing about the data.

    >>> fields = [Field("state", "string"), Field("age", "integer")]
    >>> domains_from_predicate(parse_expression("state IN ('CA', 'NY') AND age > 3", "p"), fields)
    {'state': ('CA', 'NY')}
    """
    if predicate is None:
        return {}
    types = {f.name: f.type for f in columns}
    found: dict[str, tuple[KeyValue, ...]] = {}
    for term in _and_terms(predicate):
        column: exp.Expr | None = None
        literals: list[exp.Expr] = []
        if isinstance(term, exp.In) and not term.args.get("query"):
            column, literals = term.this, list(term.expressions)
        elif isinstance(term, exp.EQ):
            column, literals = term.this, [term.expression]
            if not isinstance(column, exp.Column):
                column, literals = term.expression, [term.this]
        if not isinstance(column, exp.Column) or column.name not in types or not literals:
            continue
        values = [_key_literal(v, types[column.name]) for v in literals]
        if any(v is None for v in values):
            continue
        domain = tuple(dict.fromkeys(values))
        if column.name in found:  # two restrictions on one column: keep the common keys
            domain = tuple(v for v in found[column.name] if v in domain)
            if not domain:
                continue
        found[column.name] = domain
    return found


def _and_terms(node: exp.Expr) -> Iterable[exp.Expr]:
    """The terms of ``node``'s top-level AND, left to right (iterative: a chain of thousands
    of terms is as deep as it is long)."""
    stack = [node]
    while stack:
        inner = stack.pop()
        inner = inner.unnest() if isinstance(inner, exp.Paren) else inner
        if isinstance(inner, exp.And):
            stack.append(inner.expression)
            stack.append(inner.this)
        else:
            yield inner


def _key_literal(node: exp.Expr, column_type: ColumnType) -> KeyValue:
    """The key value of a literal compared with a column of ``column_type`` (None: not a
    literal of that type, so no domain is inferred)."""
    if isinstance(node, exp.Literal) and node.is_string:
        return str(node.this) if column_type == "string" else None
    if isinstance(node, exp.Literal) and column_type in ("integer", "real"):
        text = str(node.this)
        if column_type == "integer":
            return int(text) if text.lstrip("-").isdigit() else None
        return float(text)
    if isinstance(node, exp.Boolean) and column_type == "boolean":
        return bool(node.this)
    return None


def _with_domains(
    keys: Sequence[GroupKey], domains: Mapping[str, Sequence[KeyValue]]
) -> tuple[GroupKey, ...]:
    out = []
    for key in keys:
        if not key.is_public and key.column in domains:
            out.append(replace(key, domain=tuple(domains[key.column])))
        else:
            out.append(key)
    return tuple(out)


def _mode_candidates(
    calls: Sequence[AggregateCall], domains: Mapping[str, Sequence[KeyValue]]
) -> tuple[AggregateCall, ...]:
    """MODE calls take their column's public domain, when one is declared, as candidates."""
    out = []
    for a in calls:
        if a.function in ("mode", "top_k") and a.domain is None and a.column in domains:
            # NULL is never a candidate: the NULL rule leaves its rows out of the aggregation
            values = tuple(v for v in domains[a.column or ""] if v is not None)
            out.append(replace(a, domain=values))
        else:
            out.append(a)
    return tuple(out)
