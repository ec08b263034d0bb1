"""Declared schemas: the data owner's column types, never inferred from private values.

A declaration maps a table to ``{column: SQL type name}``::

    schema={"people": {"income": "DOUBLE", "age": "INTEGER", "born": "DATE"}}

Type names are parsed with sqlglot (DuckDB spelling) and must be one of:

========================  =========================================================
``BOOLEAN`` (``BOOL``)    ``TINYINT``, ``SMALLINT``, ``INTEGER`` (``INT``), ``BIGINT``
``FLOAT`` (``REAL``)      4-byte floating point; ``DOUBLE`` is 8-byte
``DECIMAL(p, s)``         ``NUMERIC`` too; 1 ≤ p ≤ 38, 0 ≤ s ≤ p (bare ``DECIMAL`` is (18, 3))
``VARCHAR``               ``TEXT``, ``STRING``: text
``DATE``                  ``TIMESTAMP`` (``DATETIME``): a timestamp without time zone
========================  =========================================================

Both engines have every one of them (Spark spells them ``INT``, ``STRING``, ``TIMESTAMP_NTZ``…;
the text is generated per dialect by sqlglot). Anything else — ``HUGEINT``, ``TIMESTAMPTZ``,
lists, structs, a column name given as a type — is refused with an
:class:`~veil.errors.InvalidArgumentError` naming the table, the column, the value and the
accepted names.

The engines read a declared column with its declared type through a *total* cast
(``TRY_CAST``): a value that does not convert becomes NULL — never a failure, never a type
change — so which queries are refused depends on the declaration alone (DESIGN §1, "Failure is
an output"). Which texts convert: for DATE and TIMESTAMP one fixed rule on both engines, ISO
8601 only (:data:`ISO_DATE`: ``2024-01-31``; :data:`ISO_TIMESTAMP`: that date alone or with
``T`` or a space and ``12:00``, ``12:00:00`` or ``12:00:00.123456``; no time zone, no spaces
around) — ``2024/01/31``, ``2024-1-31``, ``2024`` or ``31.01.2024`` are NULL; for numbers the
engine's cast: decimal numbers, and DuckDB also reads ``47.0`` as the INTEGER 47 (rounding),
Spark reads it as NULL — declare ``DOUBLE`` for such columns.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from sqlglot import exp
from sqlglot.errors import SqlglotError

from veil.errors import InvalidArgumentError, SchemaError

__all__ = [
    "ACCEPTED",
    "ISO_DATE",
    "ISO_TIMESTAMP",
    "Declared",
    "SchemaArg",
    "match_columns",
    "parse_schema",
    "parse_type",
    "try_cast",
    "type_sql",
]

SchemaArg = Mapping[str, Mapping[str, str]] | None
"""``{table: {column: type name}}`` as a caller passes it (``None``: nothing declared)."""

Declared = dict[str, exp.DataType]
"""One table's declarations, parsed: ``{column: sqlglot DataType}``."""

ACCEPTED = (
    "BOOLEAN, TINYINT, SMALLINT, INTEGER, BIGINT, FLOAT (REAL), DOUBLE, DECIMAL(p, s) with "
    "p <= 38, VARCHAR (TEXT, STRING), DATE, TIMESTAMP"
)
"""The accepted type names, as error messages list them."""

_T = exp.DataType.Type
_PLAIN = frozenset(
    {
        _T.BOOLEAN,
        _T.TINYINT,
        _T.SMALLINT,
        _T.INT,
        _T.BIGINT,
        _T.FLOAT,
        _T.DOUBLE,
        _T.VARCHAR,
        _T.TEXT,
        _T.DATE,
        _T.TIMESTAMP,
        _T.TIMESTAMPNTZ,
    }
)
_MAX_PRECISION = 38


def parse_type(
    table: str, column: str, name: object, *, example: str | None = None
) -> exp.DataType:
    """The sqlglot type of ``name`` declared for ``table.column``; refuses unaccepted names.

    Raises :class:`InvalidArgumentError` naming the table, the column, the value and the
    accepted names, with ``example`` as the fix (a declaration in the caller's syntax;
    default ``{'column': 'DOUBLE'}``). Text types come back as ``TEXT``, timestamps as
    ``TIMESTAMPNTZ``.
    """
    where = f"table {table!r}, column {column!r}"
    if example is None:
        example = f"{{{column!r}: 'DOUBLE'}}"
    fix = f"; declare one of {ACCEPTED}, e.g. {example}"
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgumentError(f"{where}: a type must be a type name, got {name!r}{fix}")
    try:
        parsed = exp.DataType.build(name, dialect="duckdb")
    except (SqlglotError, ValueError, AttributeError, TypeError):  # sqlglot's parse failures
        raise InvalidArgumentError(f"{where}: {name!r} is not a type{fix}") from None
    if parsed.this is _T.DECIMAL:
        return _decimal(parsed, where, name, fix)
    if parsed.this not in _PLAIN:
        raise InvalidArgumentError(f"{where}: type {name!r} is not supported{fix}")
    if parsed.expressions:
        raise InvalidArgumentError(
            f"{where}: {name!r} takes no parameters (only DECIMAL(p, s) does){fix}"
        )
    if parsed.this is _T.VARCHAR:
        return exp.DataType.build("TEXT")
    if parsed.this is _T.TIMESTAMP:
        return exp.DataType(this=_T.TIMESTAMPNTZ)
    return parsed


def _decimal(parsed: exp.DataType, where: str, name: str, fix: str) -> exp.DataType:
    params: list[int] = []
    for param in parsed.expressions:
        text = param.name if isinstance(param, exp.DataTypeParam) else param.sql()
        if not text.isdigit():
            raise InvalidArgumentError(
                f"{where}: {name!r} needs whole numbers as precision and scale, "
                f"e.g. DECIMAL(18, 2){fix}"
            )
        params.append(int(text))
    precision, scale = [*params, 0, 0][:2] if len(params) <= 2 else (-1, -1)
    if not 1 <= precision <= _MAX_PRECISION or not 0 <= scale <= precision:
        raise InvalidArgumentError(
            f"{where}: {name!r} needs 1 <= precision <= {_MAX_PRECISION} and "
            f"0 <= scale <= precision, e.g. DECIMAL(18, 2){fix}"
        )
    return exp.DataType.build(f"DECIMAL({precision}, {scale})")


def parse_schema(schema: SchemaArg, tables: Iterable[str]) -> dict[str, Declared]:
    """``schema`` checked against the registered ``tables`` and parsed, table by table.

    Raises :class:`InvalidArgumentError` for a malformed mapping, a table that is not
    registered or a type that is not accepted (see :func:`parse_type`).
    """
    if schema is None:
        return {}
    known = list(tables)
    if not isinstance(schema, Mapping):
        raise InvalidArgumentError(
            f"schema must map tables to {{column: type}}, got a {type(schema).__name__}; "
            "e.g. schema={'people': {'income': 'DOUBLE'}}"
        )
    parsed: dict[str, Declared] = {}
    for table, columns in schema.items():
        if table not in known:
            raise InvalidArgumentError(
                f"schema declares table {table!r}, which is not among the tables "
                f"({', '.join(map(repr, known))}); declare the types of a table you pass"
            )
        if not isinstance(columns, Mapping):
            raise InvalidArgumentError(
                f"schema[{table!r}] must map columns to type names, got a "
                f"{type(columns).__name__}; e.g. schema={{{table!r}: {{'income': 'DOUBLE'}}}}"
            )
        declared: Declared = {}
        for column, name in columns.items():
            if not isinstance(column, str) or not column:
                raise InvalidArgumentError(
                    f"schema[{table!r}]: column names must be non-empty strings, got {column!r}"
                )
            declared[column] = parse_type(table, column, name)
        parsed[table] = declared
    return parsed


def match_columns(
    table: str, declared: Mapping[str, exp.DataType], available: Sequence[str], source: str
) -> dict[str, exp.DataType]:
    """``declared`` keyed by the source's own column names (matched case-insensitively, as
    both engines resolve identifiers); a declared column the source lacks is a
    :class:`SchemaError` naming it and the columns ``source`` has."""
    by_lower: dict[str, str] = {}
    for name in available:
        by_lower.setdefault(name.lower(), name)
    matched: dict[str, exp.DataType] = {}
    for column, dtype in declared.items():
        found = by_lower.get(column.lower())
        if found is None:
            shown = ", ".join(repr(c) for c in available[:20])
            more = f" and {len(available) - 20} more" if len(available) > 20 else ""
            raise SchemaError(
                f"table {table!r}: the declared column {column!r} is not in {source}, which "
                f"has {shown}{more}; declare only columns the source has"
            )
        if found in matched:
            raise InvalidArgumentError(
                f"table {table!r}: column {found!r} is declared twice (names are "
                "case-insensitive); declare it once"
            )
        matched[found] = dtype
    return matched


def type_sql(dtype: exp.DataType, dialect: str) -> str:
    """The type as ``dialect`` spells it (``REAL``/``FLOAT``, ``TEXT``/``STRING``…)."""
    return dtype.sql(dialect=dialect)


ISO_DATE = r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}\z"
"""The texts a declared DATE reads: ``YYYY-MM-DD``, nothing around it."""

ISO_TIMESTAMP = (
    r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}"
    r"(?:[T ](?:[01][0-9]|2[0-3]):[0-5][0-9](?::[0-5][0-9](?:\.[0-9]{1,6})?)?)?\z"
)
"""The texts a declared TIMESTAMP reads: ``YYYY-MM-DD``, optionally ``T`` or one space and
``hh:mm``, ``hh:mm:ss`` or ``hh:mm:ss.f`` (1 to 6 digits); no time zone, nothing around it."""


def try_cast(value: exp.Expression, dtype: exp.DataType, *, text: bool = False) -> exp.Expression:
    """A cast that gives NULL, never an error, for a value that does not convert (DuckDB
    ``TRY_CAST``; Spark ``TRY_CAST``, whatever its ANSI setting).

    ``text``: the value is text. A text becomes a DATE or TIMESTAMP only if it matches
    :data:`ISO_DATE` / :data:`ISO_TIMESTAMP` (else NULL): the engines' own casts accept
    different texts (DuckDB reads ``2020/01/05``, Spark ``2020`` and ``2020-01-05 BC``, only
    DuckDB ``24:00:00``), and within these patterns both give the same value. The patterns
    are in the syntax RE2 and Java share, anchored at both ends of the text.
    """
    cast = exp.TryCast(this=value, to=dtype.copy(), safe=True)
    if not text or not dtype.is_type(_T.DATE, _T.TIMESTAMPNTZ, _T.TIMESTAMP):
        return cast
    pattern = ISO_DATE if dtype.is_type(_T.DATE) else ISO_TIMESTAMP
    # the text cast is a no-op on text, and keeps the guard well-typed (a view the value
    # comes from may be replaced by a typed one after registration)
    as_text = exp.Cast(this=value.copy(), to=exp.DataType.build("TEXT"))
    iso = exp.RegexpLike(this=as_text, expression=exp.Literal.string(pattern))
    return exp.Case(ifs=[exp.If(this=iso, true=cast)], default=exp.Null())
