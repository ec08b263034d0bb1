"""Option parsing for the ``veil`` command: light to import (no engine, no ledger), so that
``veil --help`` starts at once. Every bad value is an :class:`InvalidArgumentError` in the CLI's
own syntax (``--bounds expects COLUMN=LOWER:UPPER, got 'income'``)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from enum import StrEnum
from fractions import Fraction
from typing import Any

from veil.accounting.budget import Budget, exact
from veil.accounting.limits import MAX_DELTA, check_spend
from veil.errors import InvalidArgumentError

__all__ = [
    "OutputFormat",
    "budget_json",
    "merge_schemas",
    "parse_bounds",
    "parse_columns",
    "parse_delta",
    "parse_epsilon",
    "parse_number",
    "parse_schema_files",
    "parse_tables",
]


class OutputFormat(StrEnum):
    """How results are printed."""

    table = "table"
    json = "json"
    csv = "csv"


def budget_json(budget: Budget | None) -> dict[str, Any] | None:
    """A Budget as JSON: floats for reading, exact fractions as strings for auditing."""
    if budget is None:
        return None
    out: dict[str, Any] = {"kind": budget.kind}
    if budget.kind == "zcdp":
        out["rho"] = float(budget.rho or 0)
        out["exact"] = {"rho": str(budget.rho)}
    else:
        out["epsilon"] = float(budget.epsilon or 0)
        out["delta"] = float(budget.delta)
        out["exact"] = {"epsilon": str(budget.epsilon), "delta": str(budget.delta)}
    return out


def parse_tables(specs: Sequence[str]) -> dict[str, str]:
    """``["people=people.parquet", …]`` → ``{"people": "people.parquet", …}``."""
    tables: dict[str, str] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise InvalidArgumentError(
                f"--table expects NAME=PATH, got {spec!r}; e.g. --table people=people.parquet"
            )
        if name.strip() in tables:
            raise InvalidArgumentError(f"--table {name.strip()!r} is given twice; name it once")
        tables[name.strip()] = path.strip()
    return tables


def parse_columns(specs: Sequence[str], tables: Sequence[str]) -> dict[str, dict[str, str]]:
    """``["people.income:DOUBLE", "age:INTEGER"]`` → ``{"people": {"income": "DOUBLE", …}}``.

    ``TABLE.`` may be left out when there is one table; the type is checked here (one of
    :data:`veil.engines.declared.ACCEPTED`), so a bad value is refused in the CLI's syntax.
    """
    declared: dict[str, dict[str, str]] = {}
    for spec in specs:
        target, colon, type_name = spec.rpartition(":")
        if not colon or not target.strip() or not type_name.strip():
            raise InvalidArgumentError(
                f"--column expects [TABLE.]COLUMN:TYPE, got {spec!r}; e.g. --column income:DOUBLE"
            )
        table, column = _table_of(target.strip(), tables, spec)
        _declare(declared, table, column, type_name.strip(), f"--column {spec}")
    return declared


def parse_schema_files(specs: Sequence[str], tables: Sequence[str]) -> dict[str, dict[str, str]]:
    """``["people=people.schema.json"]`` → the JSON object of each file (column → type) as
    that table's declarations; ``TABLE=`` may be left out when there is one table."""
    declared: dict[str, dict[str, str]] = {}
    for spec in specs:
        name, eq, path = spec.partition("=")
        if eq and name.strip() in tables:
            table, file = name.strip(), path.strip()
        elif eq and not os.path.exists(spec):
            raise InvalidArgumentError(
                f"--schema {spec!r}: {name.strip()!r} is not a --table (tables: "
                f"{', '.join(tables)}); pass --schema TABLE=FILE.json"
            )
        elif len(tables) == 1:
            table, file = tables[0], spec.strip()
        else:
            raise InvalidArgumentError(
                f"--schema {spec!r} must name its table when there are several (tables: "
                f"{', '.join(tables)}); e.g. --schema {tables[0]}=FILE.json"
            )
        try:
            with open(file, encoding="utf-8") as handle:
                content = json.load(handle)
        except OSError as exc:
            raise InvalidArgumentError(f"--schema: cannot read {file!r}: {exc.strerror}") from None
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidArgumentError(f"--schema: {file!r} is not JSON: {exc}") from None
        if not isinstance(content, dict) or not all(isinstance(v, str) for v in content.values()):
            raise InvalidArgumentError(
                f"--schema expects a JSON object mapping each column to a type, e.g. "
                f'{{"income": "DOUBLE", "born": "DATE"}}; {file!r} holds something else'
            )
        for column, type_name in content.items():
            _declare(declared, table, column, type_name, f"--schema {spec}")
    return declared


def _table_of(target: str, tables: Sequence[str], spec: str) -> tuple[str, str]:
    """``(table, column)`` of ``TABLE.COLUMN``, or of a bare ``COLUMN`` when there is one
    table (a column name may hold dots: ``TABLE.`` counts only if it names a table)."""
    table, dot, column = target.partition(".")
    if dot and table in tables and column:
        return table, column
    if len(tables) == 1:
        return tables[0], target
    raise InvalidArgumentError(
        f"--column {spec!r} must name its table when there are several (tables: "
        f"{', '.join(tables)}); e.g. --column {tables[0]}.{spec}"
    )


def _declare(
    declared: dict[str, dict[str, str]], table: str, column: str, type_name: str, where: str
) -> None:
    from veil.engines.declared import ACCEPTED, parse_type  # sqlglot: only when declaring

    try:
        parse_type(table, column, type_name)
    except InvalidArgumentError:
        raise InvalidArgumentError(
            f"{where}: {type_name!r} is not a type veil reads; use one of {ACCEPTED}"
        ) from None
    columns = declared.setdefault(table, {})
    if column in columns and columns[column] != type_name:
        raise InvalidArgumentError(
            f"{where}: column {column!r} of table {table!r} is already declared "
            f"{columns[column]}; declare it once"
        )
    columns[column] = type_name


def merge_schemas(*schemas: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """``--schema`` and ``--column`` declarations together; a column declared twice with two
    types is refused."""
    merged: dict[str, dict[str, str]] = {}
    for schema in schemas:
        for table, columns in schema.items():
            for column, type_name in columns.items():
                _declare(merged, table, column, type_name, "--schema/--column")
    return merged


def parse_bounds(specs: Sequence[str]) -> dict[str, tuple[Fraction, Fraction]]:
    """``["income=0:1000000", …]`` → ``{"income": (0, 1000000), …}`` (exact numbers)."""
    bounds: dict[str, tuple[Fraction, Fraction]] = {}
    for spec in specs:
        column, sep, interval = spec.partition("=")
        lower, colon, upper = interval.partition(":")
        if not sep or not colon or not column.strip() or not lower.strip() or not upper.strip():
            raise InvalidArgumentError(
                f"--bounds expects COLUMN=LOWER:UPPER, got {spec!r}; e.g. --bounds income=0:1000000"
            )
        name = column.strip()
        if name in bounds:
            raise InvalidArgumentError(
                f"--bounds for {name!r} is given twice ({name}={bounds[name][0]}:"
                f"{bounds[name][1]} and {spec}); give each column's bounds once"
            )
        lo = exact(lower, f"the lower bound of {name!r}")
        hi = exact(upper, f"the upper bound of {name!r}")
        if lo > hi:
            raise InvalidArgumentError(
                f"--bounds {spec.strip()} is empty: the lower bound {lower.strip()} is above "
                f"the upper {upper.strip()}; pass --bounds {name}={upper.strip()}:{lower.strip()}"
            )
        bounds[name] = (lo, hi)
    return bounds


def parse_number(value: str | None, name: str) -> Fraction | None:
    """An exact number from the command line (``0.5``, ``1e-6``, ``1/3``), or None."""
    if value is None:
        return None
    text = value.strip()
    try:
        number = exact(float(text), name) if _looks_float(text) else exact(text, name)
    except ValueError:
        raise InvalidArgumentError(
            f"{name} must be a number such as 0.5, 1e-6 or 1/3, got {value!r}"
        ) from None
    if number < 0:
        raise InvalidArgumentError(f"{name} must not be negative, got {value}")
    return number


def parse_epsilon(value: str, name: str = "--epsilon") -> Fraction:
    """ε of one query from the command line: > 0 and in the range a query may spend
    (``veil.accounting.limits``), refused quoting the value as written."""
    eps = parse_number(value, name)
    if eps is None or eps == 0:
        raise InvalidArgumentError(f"{name} must be > 0, e.g. {name} 0.5; got {value}")
    check_spend(Budget(epsilon=eps), written={"epsilon": value.strip()})
    return eps


def parse_delta(value: str | None, name: str = "--delta") -> Fraction | None:
    """δ from the command line (None when not given), refused quoting the value as written
    when it is 1/2 or more: such a δ allows releasing a person's row outright."""
    delta = parse_number(value, name)
    if value is not None and delta is not None and delta >= MAX_DELTA:
        raise InvalidArgumentError(
            f"{name} {value.strip()} protects nothing (δ ≥ 1/2 allows releasing a person's row "
            f"outright); pass a delta far below 1/n, e.g. {name} 1e-6"
        )
    return delta


def _looks_float(text: str) -> bool:
    return "/" not in text and any(c in text for c in "eE") and not text.lower().startswith("inf")
