"""SQL text → validated plan: veil's DP subset of SQL, read with sqlglot.

The subset (anything else is refused with ``UnsupportedQueryError`` and its line and column)::

    SELECT <key | aggregate> [AS name], …
    FROM <table> [[AS] alias]
    [WHERE <condition on row values>]
    [GROUP BY <column | BIN(column, e0, e1, …, en) | output position | alias>, …]
    [HAVING <condition on released values>]
    [ORDER BY <released column | aggregate | position> [ASC | DESC], …]
    [LIMIT n [OFFSET m]]

Aggregates: ``COUNT(*)`` (= ``COUNT(1)``), ``COUNT(col)`` (reads ``col``: see the NULL rule in
:mod:`veil.session`), ``COUNT(DISTINCT <privacy unit>)``,
``SUM``, ``AVG``, ``VARIANCE``/``VAR_SAMP``, ``STDDEV``/``STDDEV_SAMP``, ``MEDIAN``,
``QUANTILE(col, q)``/``QUANTILE_CONT(col, q)``/``PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY
col)``, ``MIN``, ``MAX`` — each over a plain column. ``BIN(col, e0, …, en)`` groups by the
histogram bins ``[e0, e1), …, [e_{n-1}, en]``; every bin is released, empty ones included. A
grouped column restricted by a top-level ``WHERE col IN (literals)`` / ``col = literal`` has
those literals as its public domain (see :func:`veil.plan.builder.domains_from_predicate`).

Refused: joins, sub-queries, CTEs (WITH), UNION/INTERSECT/EXCEPT, window functions, SELECT *,
SELECT DISTINCT, a selected column that is neither grouped nor aggregated, aggregates of
expressions, DISTINCT on anything but the privacy unit, arithmetic on aggregates, FILTER
clauses, and every clause not listed above. Unknown tables and columns raise ``SchemaError``
with a did-you-mean.
"""

from __future__ import annotations

import difflib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

import pyarrow as pa
import sqlglot
from sqlglot import TokenType, exp
from sqlglot.errors import ParseError, TokenError

from veil.aggregates import by_sql_node, supported_sql
from veil.errors import SchemaError, UnsupportedQueryError
from veil.plan.builder import BoundsLike, Query, default_alias
from veil.plan.expressions import (
    DEPTH_FIX,
    DIALECT,
    check_released_expression,
    check_row_expression,
    check_text,
    resolve_column,
)
from veil.plan.nodes import (
    MAX_TOP_K,
    AggregateCall,
    AggregateFunction,
    Contribution,
    Field,
    GroupKey,
    KeyValue,
    Plan,
    SortKey,
    as_fraction,
    declare_hint,
)
from veil.plan.tree import fields_from_arrow
from veil.sql.positions import Locator, Position, parse_error

__all__ = ["Schemas", "parse", "parse_query"]

Schemas = Mapping[str, Sequence[Field] | pa.Schema]
"""The tables a query may read: name → columns (veil Fields or an Arrow schema)."""


_ALLOWED_CLAUSES = frozenset(
    {"expressions", "from_", "from", "where", "group", "having", "order", "limit", "offset"}
)
_CLAUSE_NAMES = {
    "with_": "WITH (common table expressions)",
    "joins": "joins",
    "laterals": "LATERAL",
    "qualify": "QUALIFY",
    "windows": "WINDOW",
    "pivots": "PIVOT",
    "sample": "TABLESAMPLE",
    "distinct": "SELECT DISTINCT",
    "into": "SELECT INTO",
    "connect": "CONNECT BY",
    "prewhere": "PREWHERE",
    "distribute": "DISTRIBUTE BY",
    "sort": "SORT BY",
    "cluster": "CLUSTER BY",
    "locks": "FOR UPDATE",
    "settings": "SETTINGS",
}
SUPPORTED_AGGREGATES = supported_sql()
BIN_FUNCTION = "BIN"
_GROUPINGS = (exp.Rollup, exp.Cube, exp.GroupingSets)


def parse(
    text: str,
    tables: Schemas,
    *,
    privacy_unit: str | None = None,
    bounds: BoundsLike | None = None,
    contribution: Contribution | None = None,
    domains: Mapping[str, Sequence[KeyValue]] | None = None,
    declarable: bool = True,
) -> Plan:
    """Parse ``text`` (veil's SQL subset) into a plan over one of ``tables``.

    ``privacy_unit``, ``bounds``, ``contribution`` and ``domains`` are the session's settings
    (see :meth:`veil.plan.builder.Query.plan`); ``declarable`` whether its engine takes declared
    column types (errors then say how to declare one). Raises ``UnsupportedQueryError`` (with
    the position) for SQL outside the subset and ``SchemaError`` for unknown tables or columns.
    """
    query = parse_query(text, tables, privacy_unit=privacy_unit, declarable=declarable)
    return query.plan(
        privacy_unit=privacy_unit, bounds=bounds, contribution=contribution, domains=domains
    )


def parse_query(
    text: str, tables: Schemas, *, privacy_unit: str | None = None, declarable: bool = True
) -> Query:
    """Parse ``text`` into the equivalent :class:`veil.plan.builder.Query` (not yet a plan)."""
    return _Reader(text, tables, privacy_unit, declarable).read()


@dataclass(frozen=True)
class _Spec:
    """What an aggregate call asks: comparable between SELECT, HAVING and ORDER BY."""

    function: AggregateFunction
    column: str | None
    quantile: Fraction | None


@dataclass
class _Key:
    column: str
    edges: tuple[Fraction, ...] | None
    alias: str | None = None


class _Reader:
    """One pass over one statement; every refusal carries the position of its construct."""

    def __init__(
        self, text: str, tables: Schemas, privacy_unit: str | None, declarable: bool
    ) -> None:
        if not isinstance(text, str) or not text.strip():
            raise UnsupportedQueryError(
                f"the query is empty ({text!r}); write SELECT … FROM <table> …"
            )
        check_text(text, "the query")
        self.text = text
        self.tables = tables
        self.privacy_unit = privacy_unit
        self.declarable = declarable
        self.at = Locator(text)
        self.table = ""
        self.columns: tuple[Field, ...] = ()

    def refuse(self, message: str, at: exp.Expression | Position | None) -> UnsupportedQueryError:
        pos = at if isinstance(at, tuple) or at is None else self.at.pos(at)
        return UnsupportedQueryError(message, position=pos)

    # statement -------------------------------------------------------------------------------

    def read(self) -> Query:
        select = self.statement()
        self.check_clauses(select)
        self.check_tree(select)
        self.from_table(select)
        query = Query.over(self.table, self.columns, declarable=self.declarable)
        where = select.args.get("where")
        if where is not None:
            query = query.where_checked(self.row_condition(where.this))
        keys = self.group_keys(select)
        aggregates, outputs = self.select_list(select, keys)
        for key in keys:
            query = query.group_by(GroupKey(key.column, edges=key.edges, alias=key.alias or ""))
        for call in aggregates:
            query = query.agg(
                call.function, call.column, call.alias, quantile=call.quantile, top=call.top
            )
        specs = {self.spec_of(c): c.alias for c in aggregates}
        key_alias = {k.column: (k.alias or k.column) for k in keys if k.edges is None}
        having = select.args.get("having")
        if having is not None:
            rewritten = self.released(having.this, specs, key_alias, "HAVING")
            names = [k.alias or k.column for k in keys] + [c.alias for c in aggregates]
            query = query.having(check_released_expression(rewritten, names, text=self.text))
        order = select.args.get("order")
        if order is not None:
            query = query.order_by(*self.sort_keys(order, specs, key_alias, outputs))
        query = self.limit(select, query)
        return query.select(*outputs)

    def statement(self) -> exp.Select:
        try:
            statements = sqlglot.parse(
                self.text, read=DIALECT, error_level=sqlglot.ErrorLevel.RAISE
            )
        except ParseError as err:
            raise self.refuse(*parse_error(err)) from None
        except TokenError as err:
            raise self.refuse(f"cannot read the query: {err}", None) from None
        except RecursionError:  # nested deeper than the reader's stack without brackets
            raise self.refuse(
                f"the query nests too deeply to read (NOT NOT …, CASE in CASE); {DEPTH_FIX}", None
            ) from None
        except Exception as err:  # sqlglot itself trips on some malformed text
            raise self.refuse(
                f"cannot parse the query ({type(err).__name__} in the SQL parser); check the "
                "syntax near brackets and operators",
                None,
            ) from None
        present = [s for s in statements if s is not None]
        if len(present) != 1:
            where = self.at.keyword({TokenType.SEMICOLON}) if len(present) > 1 else None
            raise self.refuse(f"give exactly one SELECT statement (found {len(present)})", where)
        stmt = present[0]
        if isinstance(stmt, exp.SetOperation):
            kind = type(stmt).__name__.upper()
            raise self.refuse(
                f"{kind} is not supported: veil answers one SELECT over one table; run the "
                "queries separately",
                self.at.keyword({TokenType.UNION, TokenType.INTERSECT, TokenType.EXCEPT}),
            )
        if not isinstance(stmt, exp.Select):
            raise self.refuse(f"only SELECT queries are supported, not {stmt.key.upper()}", (1, 1))
        return stmt

    def check_clauses(self, select: exp.Select) -> None:
        for name, value in select.args.items():
            if name in _ALLOWED_CLAUSES or value in (None, [], False):
                continue
            label = _CLAUSE_NAMES.get(name, name.upper())
            at: exp.Expression | Position | None = (
                value if isinstance(value, exp.Expression) else None
            )
            if name == "with_":
                at = self.at.keyword({TokenType.WITH})
                raise self.refuse(f"{label} are not supported; query the table directly", at)
            if name == "joins":
                first = value[0]
                begin = self.at.start(first)
                at = self.at.keyword(
                    {TokenType.JOIN, TokenType.COMMA}, before=begin
                ) or self.at.pos(first)
                raise self.refuse(
                    "joins are not supported: veil answers queries over one table", at
                )
            if name == "distinct":
                at = self.at.keyword({TokenType.DISTINCT})
                raise self.refuse(
                    "SELECT DISTINCT is not supported; use GROUP BY to list released keys", at
                )
            if isinstance(value, list) and value and isinstance(value[0], exp.Expression):
                at = value[0]
            raise self.refuse(f"{label} is not supported in veil's SQL subset", at)

    def check_tree(self, select: exp.Select) -> None:
        """Refuse nested queries and window functions wherever they appear."""
        for node in select.walk():
            if node is select:
                continue
            if isinstance(node, exp.Subquery | exp.Select | exp.SetOperation):
                begin = self.at.start(node)
                at = self.at.keyword({TokenType.SELECT}, before=begin) if begin else None
                raise self.refuse(
                    "sub-queries are not supported: veil answers one SELECT over one table",
                    at or self.at.pos(node),
                )
            if isinstance(node, exp.Window):
                raise self.refuse(
                    "window functions (… OVER (…)) are not supported; veil computes one "
                    "aggregate per group",
                    node,
                )

    def from_table(self, select: exp.Select) -> None:
        source = select.args.get("from_") or select.args.get("from")
        if source is None:
            raise self.refuse("the query needs FROM <table>", None)
        table = source.this
        if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
            raise self.refuse("FROM must name one table", table)
        if table.args.get("db") or table.args.get("catalog"):
            raise self.refuse(
                f"name the table alone ({table.name!r}), without a schema or catalog", table
            )
        for name in ("joins", "laterals", "pivots", "sample", "version", "when", "partition"):
            if table.args.get(name):
                raise self.refuse(f"{name.upper()} on the table is not supported", table)
        name = table.name
        known = list(self.tables)
        match = [t for t in known if t == name] or [t for t in known if t.lower() == name.lower()]
        if len(match) != 1:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            pos = self.at.pos(table)
            where = f" (at line {pos[0]}, column {pos[1]})" if pos else ""
            raise SchemaError(
                f"unknown table {name!r}{hint} (tables: {', '.join(known) or 'none'}){where}"
            )
        self.table = match[0]
        cols = self.tables[self.table]
        self.columns = fields_from_arrow(cols) if isinstance(cols, pa.Schema) else tuple(cols)
        self.qualifiers = {self.table}
        if table.alias:
            self.qualifiers.add(table.alias)

    # row values ------------------------------------------------------------------------------

    def row_condition(self, node: exp.Expression) -> exp.Expression:
        return check_row_expression(
            node, self.columns, table=self.table, qualifiers=self.qualifiers, text=self.text
        )

    def column(self, node: exp.Column) -> str:
        """The table column a column reference names (qualifier checked)."""
        pos = self.at.pos(node)
        if node.table and node.table.lower() not in {q.lower() for q in self.qualifiers}:
            where = f" (at line {pos[0]}, column {pos[1]})" if pos else ""
            raise SchemaError(
                f"unknown table or alias {node.table!r} in {node.sql()!r}; the query reads only "
                f"{self.table!r}{where}"
            )
        return resolve_column(node.name, self.columns, table=self.table, pos=pos).name

    def is_table_column(self, node: exp.Column) -> bool:
        if node.table:
            return True
        return any(f.name.lower() == node.name.lower() for f in self.columns)

    # GROUP BY --------------------------------------------------------------------------------

    def group_keys(self, select: exp.Select) -> list[_Key]:
        group = select.args.get("group")
        if group is None:
            return []
        kinds = {TokenType.ROLLUP, TokenType.CUBE, TokenType.GROUPING_SETS, TokenType.ALL}
        nested = [e for e in group.expressions if isinstance(e, _GROUPINGS)]
        for extra in ("grouping_sets", "cube", "rollup", "totals", "all"):
            if group.args.get(extra) or any(e.key == extra.replace("_", "") for e in nested):
                raise self.refuse(
                    f"GROUP BY {extra.upper().replace('_', ' ')} is not supported; list the "
                    "columns",
                    self.at.keyword(kinds) or self.at.keyword({TokenType.GROUP_BY}),
                )
        if not group.expressions:
            raise self.refuse(
                "GROUP BY lists no column; name the columns to group by (GROUP BY state) or "
                "drop GROUP BY",
                self.at.keyword({TokenType.GROUP_BY}),
            )
        items = [(_unalias(e), e) for e in select.expressions]
        aliases = {
            e.alias.lower(): (_unalias(e)) for e in select.expressions if isinstance(e, exp.Alias)
        }
        keys: list[_Key] = []
        for g in group.expressions:
            target: exp.Expression = g
            if isinstance(g, exp.Literal) and not g.is_string:
                index = int(g.this) if g.this.isdigit() else 0
                if not 1 <= index <= len(items):
                    raise self.refuse(
                        f"GROUP BY {g.this} does not name an item of the SELECT list "
                        f"(1…{len(items)})",
                        g,
                    )
                target = items[index - 1][0]
            elif (
                isinstance(g, exp.Column)
                and not self.is_table_column(g)
                and g.name.lower() in aliases
            ):
                target = aliases[g.name.lower()]
            if _has_aggregate(target):
                raise self.refuse(f"cannot GROUP BY an aggregate ({self.at.text_of(target)})", g)
            key = self.key_of(target, g)
            if self.privacy_unit is not None and key.column.lower() == self.privacy_unit.lower():
                raise self.refuse(
                    f"grouping by the privacy unit {key.column!r} would release one group per "
                    "unit; group by another column",
                    g,
                )
            if any(k.column == key.column and k.edges == key.edges for k in keys):
                raise self.refuse(f"GROUP BY lists {self.at.text_of(target)} twice", g)
            keys.append(key)
        return keys

    def key_of(self, node: exp.Expression, at: exp.Expression) -> _Key:
        if isinstance(node, exp.Column):
            return _Key(self.column(node), None)
        if isinstance(node, exp.Anonymous) and node.name.upper() == BIN_FUNCTION:
            args = node.expressions
            if len(args) < 3 or not isinstance(args[0], exp.Column):
                raise self.refuse(
                    "BIN takes a column and at least two edges: BIN(age, 0, 18, 65, 120)", node
                )
            edges = tuple(self.number(a, "a BIN edge") for a in args[1:])
            column = self.column(args[0])
            if any(a >= b for a, b in itertools.pairwise(edges)):
                raise self.refuse(
                    "BIN edges must increase strictly, got "
                    + ", ".join(self.at.text_of(a) for a in args[1:]),
                    node,
                )
            ctype = self.field(column).type
            if ctype not in ("integer", "real"):
                raise self.refuse(
                    f"BIN needs a numeric column; {column!r} is {ctype} (group by it directly)",
                    node,
                )
            return _Key(column, edges)
        raise self.refuse(
            f"GROUP BY supports columns and BIN(column, edges…), not {self.at.text_of(node)!r}", at
        )

    def number(self, node: exp.Expression, what: str) -> Fraction:
        negative = False
        inner = node
        if isinstance(inner, exp.Neg):
            negative, inner = True, inner.this
        if not isinstance(inner, exp.Literal) or inner.is_string:
            raise self.refuse(f"{what} must be a number, got {self.at.text_of(node)!r}", node)
        value = as_fraction(inner.this, what)
        return -value if negative else value

    # SELECT list -----------------------------------------------------------------------------

    def select_list(
        self, select: exp.Select, keys: list[_Key]
    ) -> tuple[list[AggregateCall], list[str]]:
        aggregates: list[AggregateCall] = []
        outputs: list[str] = []
        for item in select.expressions:
            node = _unalias(item)
            alias = item.alias if isinstance(item, exp.Alias) else None
            if isinstance(node, exp.Star) or (isinstance(node, exp.Column) and node.is_star):
                raise self.refuse(
                    "SELECT * is not supported: list the group keys and aggregates to release",
                    node,
                )
            if isinstance(node, exp.Anonymous) and node.name.upper() == "TOP_K":
                column, picks = self.top_k(node)
                self.check_aggregate(_Spec("top_k", column, None), node)
                for rank in range(1, picks + 1):  # k columns, the most frequent first
                    name = f"{alias}{rank}" if alias else f"top{rank}_{column}"
                    if name in outputs:
                        raise self.refuse(f"output column {name!r} is used twice", item)
                    aggregates.append(AggregateCall(name, "top_k", column, top=(rank, picks)))
                    outputs.append(name)
                continue
            if _is_aggregate(node):
                spec = self.aggregate(node)
                self.check_aggregate(spec, node)
                name = alias or default_alias(spec.function, spec.column, spec.quantile)
                if name in outputs:
                    raise self.refuse(
                        f"output column {name!r} is used twice; give each aggregate its own "
                        "alias (AS …)",
                        item,
                    )
                aggregates.append(
                    AggregateCall(name, spec.function, spec.column, quantile=spec.quantile)
                )
                outputs.append(name)
                continue
            if _has_aggregate(node):
                shown = self.at.text_of(node)
                raise self.refuse(
                    f"arithmetic on aggregates ({shown}) is not supported; select each "
                    "aggregate and combine the released values afterwards",
                    node,
                )
            key = self.selected_key(node, keys)
            if key.alias is not None:
                raise self.refuse(
                    f"{self.at.text_of(node)} is selected twice; select it once", node
                )
            key.alias = alias or key.column
            if key.alias in outputs:
                raise self.refuse(f"output column {key.alias!r} is used twice", item)
            outputs.append(key.alias)
        return aggregates, outputs

    def check_aggregate(self, spec: _Spec, node: exp.Expression) -> None:
        """Type and privacy-unit checks that the plan also makes, here with a position."""
        if spec.column is None or spec.function in ("count", "count_distinct"):
            return
        pos = self.at.pos(node)
        if self.privacy_unit is not None and spec.column.lower() == self.privacy_unit.lower():
            raise self.refuse(
                f"{self.at.name_of(node)} of the privacy unit {spec.column!r} is not supported; "
                "count units with COUNT(DISTINCT …)",
                pos,
            )
        ctype = self.field(spec.column).type
        if ctype not in ("integer", "real") and spec.function not in (
            "mode",
            "top_k",
        ):  # MODE: the plan's
            where = f" (at line {pos[0]}, column {pos[1]})" if pos else ""
            raise SchemaError(
                f"{self.at.name_of(node)}({spec.column}) needs a numeric column, but "
                f"{spec.column!r} is {ctype}; aggregate a numeric column, or COUNT(*) per "
                f"{spec.column}"
                f"{declare_hint(spec.column, ctype, self.table, declarable=self.declarable)}"
                f"{where}"
            )

    def field(self, name: str) -> Field:
        return next(f for f in self.columns if f.name == name)

    def selected_key(self, node: exp.Expression, keys: list[_Key]) -> _Key:
        if isinstance(node, exp.Column):
            name = self.column(node)
            for key in keys:
                if key.column == name and key.edges is None:
                    return key
            raise self.refuse(
                f"column {name!r} is neither grouped nor aggregated; add it to GROUP BY or "
                f"aggregate it (e.g. COUNT(*), AVG({name}))",
                node,
            )
        if isinstance(node, exp.Anonymous) and node.name.upper() == BIN_FUNCTION:
            wanted = self.key_of(node, node)
            for key in keys:
                if key.column == wanted.column and key.edges == wanted.edges:
                    return key
            raise self.refuse(
                f"{self.at.text_of(node)} is selected but not grouped; add it to GROUP BY", node
            )
        raise self.refuse(
            f"SELECT may list group keys and aggregates only; {self.at.text_of(node)!r} is neither",
            node,
        )

    def aggregate(self, node: exp.Expression) -> _Spec:
        """The spec of one aggregate call; refuses forms outside the subset."""
        if isinstance(node, exp.Filter):
            raise self.refuse(
                "FILTER (WHERE …) on an aggregate is not supported; put the condition in WHERE",
                node,
            )
        if isinstance(node, exp.WithinGroup):
            return self.within_group(node)
        if isinstance(node, exp.Count):
            arg = node.this
            if isinstance(arg, exp.Star) or arg is None or _non_null_literal(arg):
                return _Spec("count", None, None)  # COUNT(*), COUNT(1): every row
            if isinstance(arg, exp.Distinct):
                return self.count_distinct(node, arg)
            return _Spec("count", self.argument(node, arg, "COUNT"), None)
        simple = by_sql_node(type(node))  # a registered one-column kind (SUM, AVG, VAR_POP…)
        if simple is not None:
            return _Spec(simple.name, self.argument(node, node.this, self.at.name_of(node)), None)
        if isinstance(node, exp.Median):
            return _Spec("quantile", self.argument(node, node.this, "MEDIAN"), Fraction(1, 2))
        if isinstance(node, exp.PercentileCont | exp.Quantile) and not isinstance(
            node, exp.ApproxQuantile
        ):
            q_node = node.args.get("expression") or node.args.get("quantile")
            column = self.argument(node, node.this, "QUANTILE_CONT")
            return _Spec("quantile", column, self.quantile(q_node, node))
        if isinstance(node, exp.PercentileDisc):
            raise self.refuse(
                "discrete quantiles are not supported; use QUANTILE_CONT(col, q) or "
                "PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY col)",
                node,
            )
        name = self.at.name_of(node)
        raise self.refuse(f"aggregate {name} is not supported; use {SUPPORTED_AGGREGATES}", node)

    def argument(self, call: exp.Expression, arg: exp.Expression | None, name: str) -> str:
        if isinstance(arg, exp.Distinct):
            raise self.refuse(
                f"DISTINCT is only supported as COUNT(DISTINCT <privacy unit>), not in {name}",
                call,
            )
        if not isinstance(arg, exp.Column):
            shown = self.at.text_of(arg)
            raise self.refuse(
                f"{name}({shown}): aggregates of expressions are not supported; aggregate a "
                "column (filter rows with WHERE)",
                arg if arg is not None else call,
            )
        if isinstance(call, exp.AggFunc):
            extra = [
                k
                for k, v in call.args.items()
                if k != "this" and isinstance(v, exp.Expression | list) and v
            ]
            if extra and name not in ("QUANTILE_CONT", "COUNT"):
                raise self.refuse(f"{name} takes exactly one column", call)
        return self.column(arg)

    def top_k(self, node: exp.Anonymous) -> tuple[str, int]:
        """TOP_K(col, k): the column and k (an integer literal ≥ 1)."""
        args = node.expressions
        if len(args) != 2:
            raise self.refuse("TOP_K takes a column and k, e.g. TOP_K(education, 3)", node)
        column = self.argument(node, args[0], "TOP_K")
        k = self.number(args[1], "k of TOP_K")
        if k.denominator != 1 or not 1 <= k <= MAX_TOP_K:
            raise self.refuse(
                f"k of TOP_K must be an integer in [1, {MAX_TOP_K}], got "
                f"{self.at.text_of(args[1])}; e.g. TOP_K({column}, 3)",
                args[1],
            )
        return column, int(k)

    def count_distinct(self, call: exp.Count, arg: exp.Distinct) -> _Spec:
        cols = arg.expressions
        if len(cols) != 1 or not isinstance(cols[0], exp.Column):
            raise self.refuse("COUNT(DISTINCT …) takes exactly one column, the privacy unit", call)
        name = self.column(cols[0])
        if self.privacy_unit is None or name.lower() != self.privacy_unit.lower():
            unit = self.privacy_unit or "none declared"
            raise self.refuse(
                f"COUNT(DISTINCT {name}) is only supported on the privacy unit (privacy unit: "
                f"{unit}); use COUNT(*), or declare privacy_unit={name!r}",
                call,
            )
        return _Spec("count_distinct", name, None)

    def within_group(self, node: exp.WithinGroup) -> _Spec:
        inner, order = node.this, node.expression
        if not isinstance(inner, exp.PercentileCont):
            raise self.refuse(
                "only PERCENTILE_CONT(q) WITHIN GROUP (ORDER BY col) is supported", node
            )
        ordered = order.expressions if isinstance(order, exp.Order) else []
        if len(ordered) != 1:
            raise self.refuse("WITHIN GROUP needs ORDER BY exactly one column", node)
        column = self.argument(inner, ordered[0].this, "PERCENTILE_CONT")
        q = self.quantile(inner.this, node)
        if ordered[0].args.get("desc"):
            q = 1 - q
        return _Spec("quantile", column, q)

    def quantile(self, node: exp.Expression | None, call: exp.Expression) -> Fraction:
        if node is None:
            raise self.refuse("a quantile needs q, e.g. QUANTILE_CONT(age, 0.9)", call)
        if isinstance(node, exp.Array):
            raise self.refuse(
                "one quantile per call: write QUANTILE_CONT(col, 0.25), QUANTILE_CONT(col, 0.75)",
                node,
            )
        q = self.number(node, "the quantile q")
        if not 0 <= q <= 1:
            raise self.refuse(
                f"the quantile q must lie in [0, 1], got {self.at.text_of(node)}", node
            )
        return q

    def spec_of(self, call: AggregateCall) -> _Spec:
        return _Spec(call.function, call.column, call.quantile)

    # released values -------------------------------------------------------------------------

    def released(
        self,
        node: exp.Expression,
        specs: Mapping[_Spec, str],
        key_alias: Mapping[str, str],
        clause: str,
    ) -> exp.Expression:
        """Rewrite a HAVING/ORDER BY expression onto released output names."""

        def fix(sub: exp.Expression) -> exp.Expression:
            if _is_aggregate(sub):
                spec = self.aggregate(sub)
                if spec not in specs:
                    shown = self.at.text_of(sub)
                    raise self.refuse(
                        f"{clause} may use only released values, and {shown} is not in the "
                        f"SELECT list; add it (e.g. {shown} AS x) and use x",
                        sub,
                    )
                return exp.column(specs[spec])
            if isinstance(sub, exp.Column) and not sub.table:
                outputs = set(specs.values()) | set(key_alias.values())
                if sub.name not in outputs:
                    for column, alias in key_alias.items():
                        if column.lower() == sub.name.lower():
                            return exp.column(alias)
            return sub

        rewritten = node.copy().transform(fix, copy=False)
        return rewritten

    def sort_keys(
        self,
        order: exp.Order,
        specs: Mapping[_Spec, str],
        key_alias: Mapping[str, str],
        outputs: Sequence[str],
    ) -> list[SortKey]:
        keys: list[SortKey] = []
        names = [*specs.values(), *key_alias.values()]
        for ordered in order.expressions:
            target = ordered.this
            if isinstance(target, exp.Literal) and not target.is_string:
                index = int(target.this) if target.this.isdigit() else 0
                if not 1 <= index <= len(outputs):
                    raise self.refuse(
                        f"ORDER BY {target.this} does not name an output column (1…{len(outputs)})",
                        target,
                    )
                name = outputs[index - 1]
            else:
                rewritten = self.released(target, specs, key_alias, "ORDER BY")
                if not isinstance(rewritten, exp.Column) or rewritten.table:
                    shown = self.at.text_of(target)
                    raise self.refuse(
                        f"ORDER BY may sort by released columns only, not {shown!r}",
                        target,
                    )
                found = _match_name(rewritten.name, [*names, *outputs])
                if found is None:
                    raise self.refuse(
                        f"ORDER BY {rewritten.name!r}: not a released column (columns: "
                        f"{', '.join(outputs)})",
                        target,
                    )
                name = found
            keys.append(SortKey(name, bool(ordered.args.get("desc"))))
        return keys

    def limit(self, select: exp.Select, query: Query) -> Query:
        limit = select.args.get("limit")
        offset = select.args.get("offset")
        if limit is None and offset is None:
            return query
        count = self.integer(limit.expression, "LIMIT") if limit is not None else None
        skip = self.integer(offset.expression, "OFFSET") if offset is not None else 0
        if count is None:
            raise self.refuse("OFFSET needs a LIMIT", offset)
        return query.limit(count, skip)

    def integer(self, node: exp.Expression | None, clause: str) -> int:
        if not isinstance(node, exp.Literal) or node.is_string or not node.this.isdigit():
            text = self.at.text_of(node)
            if isinstance(node, exp.Neg) and not text.lstrip().startswith("-"):
                text = f"-{self.at.text_of(node.this)}"  # the sign is not in the span
            raise self.refuse(f"{clause} takes a whole number ≥ 0, got {text or 'nothing'}", node)
        return int(node.this)


def _non_null_literal(node: exp.Expression) -> bool:
    return isinstance(node, exp.Literal) or (
        isinstance(node, exp.Boolean) and node.this is not None
    )


def _unalias(node: exp.Expression) -> exp.Expression:
    return node.this if isinstance(node, exp.Alias) else node


def _is_aggregate(node: exp.Expr) -> bool:
    return isinstance(node, exp.AggFunc | exp.WithinGroup | exp.Filter) or (
        isinstance(node, exp.Anonymous) and node.name.upper() in {"HISTOGRAM", "MODE"}
    )


def _has_aggregate(node: exp.Expression) -> bool:
    return any(_is_aggregate(n) for n in node.walk())


def _match_name(name: str, names: Sequence[str]) -> str | None:
    if name in names:
        return name
    folded = [n for n in dict.fromkeys(names) if n.lower() == name.lower()]
    return folded[0] if len(folded) == 1 else None
