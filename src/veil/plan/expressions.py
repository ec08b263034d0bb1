"""The expression policy shared by the SQL front end and the builder: which expressions may
appear in a row predicate (WHERE) or in a predicate on released values (HAVING), how predicates
are parsed, where a node sits in the query text, and how a column name is resolved against a
table (exact name first, then a unique case-insensitive match).

Whether an expression is allowed is decided from the query and the schema alone, before
anything is charged.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Sequence

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from veil.errors import InvalidArgumentError, SchemaError, UnsupportedQueryError
from veil.plan.nodes import Field

__all__ = [
    "DEPTH_FIX",
    "DIALECT",
    "MAX_BRACKETS",
    "MAX_DEPTH",
    "Position",
    "check_depth",
    "check_released_expression",
    "check_row_expression",
    "check_text",
    "offset_position",
    "parse_expression",
    "position",
    "resolve_column",
]

DIALECT = "duckdb"
"""The SQL dialect veil reads (queries and predicates); DuckDB's is close to ANSI."""

Position = tuple[int, int]

MAX_BRACKETS = 32
"""The deepest nesting of brackets veil reads in a query or a predicate (function calls
count): sqlglot's reader recurses per bracket, so deeper text is refused, free, before it is
parsed."""

MAX_DEPTH = 100
"""The deepest expression tree veil takes: each operator, function, NOT, CASE or bracket is
a level, except that a chain of one connective (``a AND b AND c …``, ``a OR b OR …``) is
one level however long. Deeper trees are refused, free (the engines have limits of their own:
DuckDB's is 1,000)."""

MAX_CHAIN = 1_024
"""The most terms one chain of one connective (``a AND b AND …``) may hold in a WHERE or
HAVING. veil reads a chain of any length without recursion, but an engine may not: Spark's
planner keeps the chain as a tree as deep as it is long, and a 5,000-term chain ran its driver
out of memory after the charge. So a longer chain is refused, free, on every engine alike."""

DEPTH_FIX = (  # the fix every refusal of depth names
    "write it flatter (a chain of AND or OR terms may be as long as the query's size limit "
    "allows; use IN (…) for many values)"
)

# ── text ─────────────────────────────────────────────────────────────────────────────────────


def check_text(text: str, what: str) -> None:
    """Refuse, free, text veil cannot read: a lone surrogate (a character that cannot be
    encoded, which JSON can escape as ``\\ud800``) or brackets nested deeper than
    :data:`MAX_BRACKETS`. ``what`` names the text in the message (``"the query"``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        shown = text[err.start].encode("utf-8", "backslashreplace").decode("ascii")
        raise UnsupportedQueryError(
            f"{what} holds a lone surrogate {shown}, which is no character; send valid "
            "Unicode text",
            position=offset_position(text, err.start),
        ) from None
    if text.count("(") <= MAX_BRACKETS:
        return
    try:
        tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(text)
    except Exception:  # unreadable text: the parser refuses it with its own words
        return
    depth = 0
    for token in tokens:
        if token.token_type == sqlglot.TokenType.L_PAREN:
            depth += 1
            if depth > MAX_BRACKETS:
                raise UnsupportedQueryError(
                    f"{what} nests brackets more than {MAX_BRACKETS} deep, the most veil "
                    f"reads; {DEPTH_FIX}",
                    position=offset_position(text, token.start),
                )
        elif token.token_type == sqlglot.TokenType.R_PAREN:
            depth -= 1


def check_depth(node: exp.Expression, clause: str, text: str = "") -> None:
    """Refuse, free, an expression tree deeper than :data:`MAX_DEPTH` (a chain of one
    connective counting once) or a chain of more than :data:`MAX_CHAIN` terms. Iterative: a
    tree of any depth is measured without recursion."""
    # each entry: the node, its depth, the chain it belongs to (its root's id; 0: none), and
    # whether it is a link of that chain (an AND under an AND) rather than one of its terms
    stack: list[tuple[exp.Expression, int, int, bool]] = [(node, 1, 0, False)]
    terms: dict[int, int] = {}
    while stack:
        sub, depth, chain, link = stack.pop()
        if depth > MAX_DEPTH:
            raise UnsupportedQueryError(
                f"the {clause} expression nests more than {MAX_DEPTH} levels deep, the most "
                f"veil takes; {DEPTH_FIX}",
                position=position(sub, text),
            )
        if chain and not link:
            terms[chain] = terms.get(chain, 0) + 1
            if terms[chain] > MAX_CHAIN:
                raise UnsupportedQueryError(
                    f"the {clause} expression joins more than {MAX_CHAIN} terms with one "
                    "connective, the most veil sends to an engine; use IN (…) for many values "
                    "(or a public table or domains= for a large set of keys)",
                    position=position(sub, text),
                )
        own = (chain if link else id(sub)) if isinstance(sub, exp.Connector) else 0
        for child in sub.iter_expressions():
            chained = isinstance(child, exp.Connector) and type(child) is type(sub)
            stack.append((child, depth if chained else depth + 1, own, chained))


# ── positions and names ──────────────────────────────────────────────────────────────────────


def position(node: exp.Expr, text: str) -> Position | None:
    """The 1-based (line, column) in ``text`` where ``node`` starts, from sqlglot token metadata.

    sqlglot records the character offsets of identifiers, literals and function names; the
    earliest one inside ``node`` is its start. ``None`` when no token inside carries one.
    """
    if not text:
        return None
    starts = [
        n.meta["start"]
        for n in node.walk()
        if isinstance(n.meta.get("start") if n.meta else None, int)
    ]
    if not starts:
        return None
    return offset_position(text, min(starts))


def offset_position(text: str, offset: int) -> Position:
    """The 1-based (line, column) of character ``offset`` in ``text``."""
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, column


def _at(message: str, pos: Position | None) -> str:
    return f"{message} (at line {pos[0]}, column {pos[1]})" if pos else message


def resolve_column(
    name: str, columns: Sequence[Field], *, table: str, pos: Position | None = None
) -> Field:
    """The field of ``table`` called ``name`` (exact match, else a unique case-insensitive one).

    Raises ``SchemaError`` naming the table's columns and the closest match.
    """
    for f in columns:
        if f.name == name:
            return f
    folded = [f for f in columns if f.name.lower() == name.lower()]
    if len(folded) == 1:
        return folded[0]
    names = [f.name for f in columns]
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(name.lower(), [n.lower() for n in names], n=1)
        close = [n for n in names if close and n.lower() == close[0]][:1]
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise SchemaError(
        _at(f"unknown column {name!r} in table {table!r}{hint} (columns: {', '.join(names)})", pos)
    )


# ── expressions ──────────────────────────────────────────────────────────────────────────────

_LOGIC: tuple[type[exp.Expression], ...] = (
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
    exp.Neg,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.IntDiv,
    exp.Mod,
    exp.Abs,
    exp.Round,
    exp.Floor,
    exp.Ceil,
    exp.Coalesce,
    exp.Case,
    exp.If,
    exp.Tuple,
)
"""Expressions allowed in any predicate: logic, comparison, arithmetic, literals, CASE."""

_ROW_ONLY: tuple[type[exp.Expression], ...] = (
    exp.Like,
    exp.ILike,
    exp.Cast,
    exp.TryCast,
    exp.DataType,
    exp.Lower,
    exp.Upper,
    exp.Length,
    exp.Substring,
    exp.Trim,
    exp.Concat,
    exp.DPipe,
    exp.Extract,
    exp.Var,
    exp.Year,
    exp.Month,
    exp.Day,
    exp.Sqrt,
    exp.Ln,
    exp.Exp,
    exp.Pow,
    exp.Greatest,
    exp.Least,
    exp.StartsWith,
    exp.RegexpLike,
    exp.Nullif,
    exp.StrPosition,
    exp.Replace,
    exp.Left,
    exp.Right,
    exp.Sign,
    exp.Log,
    exp.Quarter,
    exp.Week,
    exp.DayOfWeek,
    exp.Hour,
    exp.Minute,
    exp.Date,
    exp.DateTrunc,
    exp.TimestampTrunc,
    exp.TimeToStr,
    exp.DateAdd,
    exp.DateSub,
    exp.Interval,
    exp.CurrentDate,
)
"""Scalar functions allowed on row values (WHERE) besides :data:`_LOGIC`: deterministic,
row-local, reading nothing but the row."""


def _describe(node: exp.Expr, text: str) -> str:
    meta = node.meta if isinstance(node, exp.Expression) and node.meta else {}
    start, end = meta.get("start"), meta.get("end")
    if isinstance(node, exp.Func) and isinstance(start, int) and isinstance(end, int) and text:
        return f"function {text[start : end + 1].upper()}()"
    if isinstance(node, exp.Anonymous):
        return f"function {node.name.upper()}()"
    if isinstance(node, exp.Func):
        return f"function {node.sql_name()}()"
    return f"{node.key.upper()} ({node.sql(dialect=DIALECT)[:40]})"


def _check_node_kinds(
    node: exp.Expression, allowed: tuple[type[exp.Expression], ...], clause: str, text: str
) -> None:
    for sub in node.walk():
        if isinstance(sub, exp.Column | exp.Identifier | exp.Star):
            continue
        if isinstance(sub, exp.Subquery | exp.Select | exp.Query):
            raise UnsupportedQueryError(
                f"sub-queries are not supported in {clause}; veil answers one query over one table",
                position=position(sub, text),
            )
        if isinstance(sub, exp.Window):
            raise UnsupportedQueryError(
                f"window functions (OVER …) are not supported in {clause}",
                position=position(sub, text),
            )
        if isinstance(sub, exp.AggFunc) and clause == "WHERE":
            raise UnsupportedQueryError(
                "WHERE may only use row values, not aggregates; use HAVING for conditions on "
                "released aggregates",
                position=position(sub, text),
            )
        if not isinstance(sub, allowed):
            raise UnsupportedQueryError(
                f"{_describe(sub, text)} is not supported in {clause}; use comparisons, "
                "AND/OR/NOT, IN, BETWEEN, IS NULL, LIKE, arithmetic and simple scalar functions",
                position=position(sub, text),
            )
        if isinstance(sub, _PATTERN_MATCHES) and not _is_string_literal(sub.expression):
            # a pattern read from the data could be invalid on some rows only: the query's
            # failure would then depend on private values
            raise UnsupportedQueryError(
                f"in {_describe(sub, text)} the pattern must be a literal string, not "
                f"{sub.expression.sql(dialect=DIALECT)!r}",
                position=position(sub, text),
            )


_PATTERN_MATCHES = (exp.Like, exp.ILike, exp.RegexpLike)


def _is_string_literal(node: exp.Expr | None) -> bool:
    return isinstance(node, exp.Literal) and node.is_string


def _column_node(name: str) -> exp.Column:
    return exp.column(name, quoted=True)


def check_row_expression(
    node: exp.Expression,
    columns: Sequence[Field],
    *,
    table: str,
    qualifiers: Iterable[str] = (),
    text: str = "",
) -> exp.Expression:
    """Validate a row predicate (WHERE) and return it with every column resolved.

    Only :data:`_LOGIC` and :data:`_ROW_ONLY` constructs may appear; columns must belong to
    ``table`` (``qualifiers`` are the names the table may be referred to by). The copy returned
    has unqualified, quoted column names exactly as in the table (canonical form).
    """
    check_depth(node, "WHERE", text)
    _check_node_kinds(node, _LOGIC + _ROW_ONLY, "WHERE", text)
    allowed = {q.lower() for q in qualifiers} | {table.lower()}

    def fix(sub: exp.Column) -> exp.Expression:
        pos = position(sub, text)
        if sub.table and sub.table.lower() not in allowed:
            raise SchemaError(
                _at(
                    f"unknown table or alias {sub.table!r} in {sub.sql()!r}; the query reads "
                    f"only {table!r}",
                    pos,
                )
            )
        return _column_node(resolve_column(sub.name, columns, table=table, pos=pos).name)

    return _strip_meta(_with_columns(node, fix))


def _with_columns(
    node: exp.Expression, fix: Callable[[exp.Column], exp.Expression]
) -> exp.Expression:
    """A copy of ``node`` with each column replaced by ``fix(column)``: one copy and one walk,
    linear in the tree's size (an IN list of 100,000 literals holds one column)."""
    out = _bare_copy(node)
    if isinstance(out, exp.Column):
        return fix(out)
    for column in list(out.find_all(exp.Column)):
        column.replace(fix(column))
    return out


def check_released_expression(
    node: exp.Expression, names: Sequence[str], *, text: str = ""
) -> exp.Expression:
    """Validate a predicate on released values (HAVING): output ``names``, literals, logic and
    arithmetic only. Returns a copy with the names resolved (case-insensitively) and quoted."""
    check_depth(node, "HAVING", text)
    _check_node_kinds(node, _LOGIC, "HAVING", text)

    def fix(sub: exp.Column) -> exp.Expression:
        return _column_node(_released_name(sub, names, text))

    return _strip_meta(_with_columns(node, fix))


def _released_name(col: exp.Column, names: Sequence[str], text: str) -> str:
    pos = position(col, text)
    if col.table:
        raise UnsupportedQueryError(
            f"{col.sql()!r}: refer to released columns by their output name alone",
            position=pos,
        )
    if col.name in names:
        return col.name
    folded = [n for n in names if n.lower() == col.name.lower()]
    if len(folded) == 1:
        return folded[0]
    raise UnsupportedQueryError(
        f"{col.name!r} is not a released column; conditions after aggregation may use only "
        f"the query's output columns ({', '.join(names)})",
        position=pos,
    )


def _bare_copy(node: exp.Expression) -> exp.Expression:
    """A deep copy of ``node`` (iterative) without the comments, types and positions sqlglot's
    copy deep-copies node by node — the positions of columns and identifiers excepted, which
    refusals quote. What a checked predicate keeps: its canonical form has none of them."""
    root = node.__class__()
    stack: list[tuple[exp.Expression, exp.Expression]] = [(node, root)]
    while stack:
        source, target = stack.pop()
        if source._meta is not None and isinstance(source, exp.Column | exp.Identifier):
            target._meta = dict(source._meta)
        for key, value in source.args.items():
            if isinstance(value, exp.Expression):
                child = value.__class__()
                target.set(key, child)
                stack.append((value, child))
            elif type(value) is list:
                items: list[object] = []
                for item in value:
                    if isinstance(item, exp.Expression):
                        child = item.__class__()
                        stack.append((item, child))
                        items.append(child)
                    else:
                        items.append(item)
                target.set(key, items)
            else:
                target.args[key] = value
    return root


def _strip_meta(node: exp.Expression) -> exp.Expression:
    for sub in node.walk():
        if sub.meta:
            sub._meta = None
    return node


def parse_expression(text: str, what: str) -> exp.Expression:
    """Parse a predicate given as SQL text (builder ``where``/``having``); refuses bad syntax."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgumentError(f"{what} must be a non-empty SQL expression, got {text!r}")
    check_text(text, what)
    try:
        node = sqlglot.parse_one(text, read=DIALECT, error_level=sqlglot.ErrorLevel.RAISE)
    except ParseError as err:
        detail = err.errors[0] if err.errors else {}
        line, col = detail.get("line"), detail.get("col")
        pos = (int(line), int(col)) if isinstance(line, int) and isinstance(col, int) else None
        raise UnsupportedQueryError(
            f"cannot parse {what} {text!r}: {detail.get('description', err)}", position=pos
        ) from None
    except TokenError as err:
        raise UnsupportedQueryError(f"cannot read {what} {text!r}: {err}") from None
    except RecursionError:  # nested deeper than the reader's stack without brackets
        raise UnsupportedQueryError(f"{what} nests too deeply to read; {DEPTH_FIX}") from None
    except Exception as err:  # sqlglot itself trips on some malformed text
        raise UnsupportedQueryError(
            f"cannot parse {what} {text!r} ({type(err).__name__} in the SQL parser)"
        ) from None
    if isinstance(node, exp.Query) or not isinstance(node, exp.Expression):
        raise UnsupportedQueryError(
            f"{what} must be an expression, not a query: {text!r}", position=position(node, text)
        )
    return node
