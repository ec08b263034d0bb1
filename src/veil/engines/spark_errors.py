"""What Spark says, in veil's words: its exceptions as veil errors, its messages without paths.

:func:`translate` maps a Spark exception to a veil error by its condition, as
:class:`veil.engines.duckdb.DuckDBEngine` maps DuckDB's; :func:`scrub` writes every path of an
engine's file tables ``…`` in a message, so that what the engine says after registration names
tables, never files (the operator's log, ``veil.sources``, gets the message as Spark wrote it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from types import ModuleType

from veil.engines.sources import is_glob
from veil.engines.sources import logger as sources_logger
from veil.errors import (
    InternalError,
    InvalidArgumentError,
    SchemaError,
    UnsupportedQueryError,
    VeilError,
)

__all__ = ["condition", "scrub", "translate"]

_REST = r"(?:/[^\s'\"`,;()\[\]]*)?"  # the rest of a path under a known one


def scrub(text: str, sources: Iterable[str], files: Iterable[str]) -> str:
    """``text`` with every path of ``sources`` (the paths and globs of an engine's file
    tables; a glob's folder too) and of ``files`` (the files Spark lists for them, as URIs)
    written ``…`` — as given, absolute, and as a ``file:`` URI or its local path — together
    with any path under one of them (a file of the folder Spark did not list names no one
    either). A message that changed is logged on ``veil.sources`` as it was."""
    from urllib.parse import unquote, urlparse

    paths: set[str] = set(files)
    for source in sources:
        paths |= {source, os.path.abspath(source)}
        if is_glob(source):  # the folder of a glob's files
            cut = min((k for k in map(source.find, "*?[") if k >= 0), default=len(source))
            folder = os.path.dirname(source[:cut])
            if len(folder) > 1:
                paths |= {folder, os.path.abspath(folder)}
    for path in list(paths):
        if path.startswith("file:"):
            paths.add(unquote(urlparse(path).path))
        elif "://" not in path:
            absolute = os.path.abspath(path)
            paths |= {f"file:{absolute}", f"file://{absolute}"}
    known = sorted((p for p in paths if len(p) > 1), key=len, reverse=True)
    if not known:
        return text
    # each path, and whatever path goes on from it (a file of a folder: its name too)
    pattern = "|".join(re.escape(p.rstrip("/")) + _REST for p in known)
    scrubbed = re.sub(pattern, "…", text)
    if scrubbed != text:
        sources_logger.warning("a message about a file table, as Spark wrote it: %s", text)
    return scrubbed


_OVERFLOW = ("ARITHMETIC_OVERFLOW", "NUMERIC_VALUE_OUT_OF_RANGE", "DECIMAL_PRECISION")
_BAD_CAST = ("CAST_INVALID_INPUT", "CAST_OVERFLOW")
_UNSUPPORTED = ("UNSUPPORTED_", "_UNSUPPORTED", "NOT_SUPPORTED")


def condition(exc: BaseException) -> str:
    """Spark's error condition (``getCondition`` on Spark ≥ 4, ``getErrorClass`` before)."""
    for getter in ("getCondition", "getErrorClass"):
        method = getattr(exc, getter, None)
        if method is not None:
            return str(method() or "")
    return ""


def translate(
    exc: Exception,
    errors: ModuleType,
    scrub: Callable[[str], str],
    *,
    checking: bool = False,
) -> VeilError:
    """The veil error for a Spark exception, as :class:`veil.engines.duckdb.DuckDBEngine`
    maps DuckDB's: an analysis error (unknown table or column, a type error) is a
    ``SchemaError``, an unsupported construct an ``UnsupportedQueryError``, a value that does
    not convert a ``SchemaError``, an exact sum out of range an ``InvalidArgumentError`` naming
    the fix, anything else an ``InternalError`` (Spark failed to run veil's SQL: a bug or the
    cluster). Spark's message is kept with every path of the engine's tables written ``…``
    (``scrub``; the session withholds every message of a query that already read data)."""
    found = condition(exc)
    text = scrub(str(exc))
    if found.startswith(_OVERFLOW):
        return InvalidArgumentError(
            f"an aggregate overflowed on Spark ({found}); the fixed-point sum no longer fits "
            "DECIMAL(38): declare narrower bounds for the summed column"
        )
    if found.startswith(_BAD_CAST):
        return SchemaError(
            f"Spark could not convert a value to a number ({found}); a numeric aggregate "
            "needs numeric data: clean or cast the column before querying it"
        )
    if any(part in found for part in _UNSUPPORTED):
        return UnsupportedQueryError(f"Spark does not support this query ({found}): {text}")
    if isinstance(exc, errors.ParseException):
        return InternalError(f"Spark could not parse veil's SQL (this is a bug): {text}")
    if isinstance(exc, errors.AnalysisException):
        return SchemaError(f"the query does not fit the table's columns: {text}")
    if checking:
        return SchemaError(f"Spark refused the query while analysing it: {text}")
    return InternalError(f"Spark failed to run veil's SQL: {text}")
