"""The SQL DuckDB reads a file table through: text files line by line, Parquet files totally.

* Text (CSV/TSV, JSON lines): :func:`text_query`, the exact ``read_csv`` call and projection
  described in :mod:`veil.engines.duckdb` (every line its own row, nothing sniffed).
* Parquet: :func:`parquet_scan` reads the table's files (an explicit list: those whose layout
  is the table's, :mod:`veil.engines.sources`) with ``utf8_validation='replace'``, so a string
  that is not UTF-8 reads with each invalid byte as ``?`` instead of failing the query (Spark,
  Hive and Java writers do not check their strings); :func:`decimal_guard` clamps a top-level
  DECIMAL(p, s) whose stored integer lies beyond p digits into its type's range (DuckDB's
  casts of such a value fail, −2^127 in a DECIMAL(38, s) even aborts the database),
  comparing in the column's own type, which never fails. Storages DuckDB cannot read totally
  are refused from the footer (:mod:`veil.engines.footers`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqlglot import exp

from veil.engines.declared import Declared, match_columns, try_cast
from veil.engines.lines import (
    MAX_LINE_BYTES,
    TextFormat,
    cell,
    header_names,
    line_cells,
    require_declared_json,
)

__all__ = ["LINE", "decimal_guard", "parquet_scan", "text_query"]

LINE = "line"


def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _opt(name: str, value: exp.Expression) -> exp.PropertyEQ:
    return exp.PropertyEQ(this=exp.to_identifier(name), expression=value)


def _line_reader(files: Sequence[str], fmt: TextFormat) -> exp.Expression:
    """``read_csv`` reading each physical line of ``files`` as one VARCHAR, nothing sniffed."""
    text = exp.Literal.string
    columns = exp.Struct(expressions=[_opt(LINE, text("VARCHAR"))])
    return exp.Anonymous(
        this="read_csv",
        expressions=[
            exp.Array(expressions=[text(f) for f in files]),
            _opt("columns", columns),
            _opt("header", exp.false()),
            _opt("auto_detect", exp.false()),
            _opt("delim", text("\n")),
            _opt("quote", text("")),
            _opt("escape", text("")),
            _opt("comment", text("")),
            _opt("strict_mode", exp.false()),
            _opt("ignore_errors", exp.true()),
            _opt("null_padding", exp.false()),
            _opt("max_line_size", exp.Literal.number(MAX_LINE_BYTES)),
            _opt("encoding", text("utf-8")),
            _opt("compression", text("gzip" if fmt.gzip else "none")),
        ],
    )


def _lines(files: Sequence[str], fmt: TextFormat) -> exp.Expression:
    """The lines of ``files`` as rows of one VARCHAR column; no file: no row."""
    if files:
        return exp.Table(this=_line_reader(files, fmt))
    none = exp.select(
        exp.alias_(exp.cast(exp.null(), exp.DataType.build("VARCHAR")), _ident(LINE))
    ).where(exp.false())
    return none.subquery("__veil_no_file")


def _json_pointer(key: str) -> str:
    return "/" + key.replace("~", "~0").replace("/", "~1")


def text_query(
    name: str,
    files: Sequence[str],
    fmt: TextFormat,
    declared: Declared,
    header: str | None,
    where: str,
) -> tuple[exp.Select, dict[str, exp.DataType], tuple[str, ...]]:
    """The query reading ``files`` line by line (:mod:`veil.engines.lines`) under the
    ``header`` line (CSV/TSV; ``where`` names its file for messages), its declared casts, and
    its columns (the header's names, or the declared keys of JSON lines)."""
    line = exp.column(LINE, quoted=True)
    keep: exp.Expr = exp.Not(this=exp.Is(this=line, expression=exp.Null()))
    if fmt.kind == "json":
        require_declared_json(name, declared)
        columns = tuple(declared)
        casts = dict(declared)
        valid = exp.Anonymous(this="json_valid", expressions=[line.copy()])
        kind = exp.Anonymous(this="json_type", expressions=[line.copy()])
        keep = exp.and_(keep, valid, exp.EQ(this=kind, expression=exp.Literal.string("OBJECT")))
        raws: list[exp.Expression] = [
            exp.Anonymous(
                this="json_extract_string",
                expressions=[line.copy(), exp.Literal.string(_json_pointer(c))],
            )
            for c in columns
        ]
    else:
        text = header or ""
        columns = header_names(name, text, fmt, where)
        casts = match_columns(name, declared, columns, f"the header of {where}")
        keep = exp.and_(keep, exp.NEQ(this=line.copy(), expression=exp.Literal.string(text)))
        listed = exp.column(_ident("__veil_cells"))
        raws = [cell(listed, k, "duckdb", casts.get(c)) for k, c in enumerate(columns, 1)]
    lines: exp.Select = (
        exp.select(line.copy(), copy=False)
        .from_(_lines(files, fmt), copy=False)
        .where(keep, copy=False)
    )
    if fmt.kind == "csv":
        # rows: one per kept line, with its cells split once (no quote) or tokenized once
        split = exp.alias_(line_cells(line, fmt.delimiter, "duckdb"), _ident("__veil_cells"))
        lines = exp.select(split, copy=False).from_(lines.subquery(copy=False), copy=False)
    # rows: one per kept line; each column its cell (CSV) or key (JSON) as text, then cast
    items: list[exp.Expr] = []
    for column, raw in zip(columns, raws, strict=True):
        dtype = casts.get(column) if fmt.kind == "json" else None  # CSV cells are typed
        typed = try_cast(raw, dtype, text=True) if dtype else raw  # JSON: text
        items.append(exp.alias_(typed, _ident(column), copy=False))
    query = exp.select(*items, copy=False).from_(lines.subquery(copy=False), copy=False)
    return query, casts, columns


def parquet_scan(files: Sequence[str]) -> exp.Expression:
    """``read_parquet`` over ``files``, strings that are not UTF-8 read with each invalid byte
    as ``?`` (never a failure)."""
    paths = exp.Array(expressions=[exp.Literal.string(f) for f in files])
    return exp.Anonymous(
        this="read_parquet",
        expressions=[paths, _opt("utf8_validation", exp.Literal.string("replace"))],
    )


def decimal_guard(column: str, precision: int, scale: int) -> exp.Expression:
    """``column`` — a DECIMAL(precision, scale) as stored — clamped into its type's range: a
    stored integer beyond ``precision`` digits reads as the nearest end (±(10^p − 1)/10^s).
    The comparisons are with literals of the column's own type, so they compare the stored
    integers and cannot fail, whatever the value.

    Clamped rather than made NULL: DuckDB rewrites ``CASE WHEN in_range THEN c END IS NOT
    NULL`` (veil's NULL rule) into the range test and then reads ``c`` itself, casting it in
    the scan before the filter — the very cast that fails. A guard that is never NULL leaves
    DuckDB nothing to rewrite."""
    top = "9" * precision
    text = top if scale == 0 else f"{top[: precision - scale] or '0'}.{top[-scale:]}"
    dtype = exp.DataType.build(f"DECIMAL({precision}, {scale})")
    high = exp.cast(exp.Literal.string(text), dtype)
    low = exp.cast(exp.Literal.string(f"-{text}"), dtype)
    ref = exp.column(_ident(column))
    return exp.Case(
        ifs=[
            exp.If(this=exp.LT(this=ref.copy(), expression=low), true=low.copy()),
            exp.If(this=exp.GT(this=ref.copy(), expression=high), true=high.copy()),
        ],
        default=ref,
    )


def guarded_items(
    names: Sequence[str], decimals: Mapping[str, tuple[int, int]]
) -> list[exp.Expr] | None:
    """The projection of ``names`` with every DECIMAL of ``decimals`` guarded (see
    :func:`decimal_guard`); None when no column needs a guard."""
    if not any(n in decimals for n in names):
        return None
    items: list[exp.Expr] = []
    for n in names:
        ref = exp.column(_ident(n))
        items.append(
            exp.alias_(decimal_guard(n, *decimals[n]), _ident(n)) if n in decimals else ref
        )
    return items
