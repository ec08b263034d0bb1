"""What DuckDB engines remember beyond one engine, so that a new session asks again only what
may have changed: per process, the text of a statement tree (:func:`written`); per
connection, DuckDB's parse of that text (:func:`parsed`), the Arrow schemas of its tables
(:func:`arrow_schema`), and which of its catalog versions are one state (:func:`catalog_state`).

Each entry is keyed by everything its value is computed from: a tree by its identity (the
entry holds the tree, so its id names no other; the trees prepared are a template's, which
nothing changes), a connection by a weak reference to it (gone with it), a schema by the
catalog state, the table and its bound columns' names and types.
"""

from __future__ import annotations

import threading
import weakref
from contextlib import suppress
from typing import Any, TypeVar

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil.compile.lower import to_sql

__all__ = [
    "LARGE_SETTING",
    "Written",
    "arrow_schema",
    "catalog_state",
    "lists",
    "parsed",
    "same_state",
    "weak_get",
    "written",
]

_HELD = 64  # entries remembered per process (texts) and per connection (parses, schemas)
_V = TypeVar("_V")


def lists(query: exp.Expression) -> bool:
    """Whether ``query`` returns lists (``ARRAY_AGG``: a fine quantile grid's cells)."""
    return query.find(exp.ArrayAgg) is not None


class Written:
    """What :func:`written` remembers of a tree: its DuckDB text, whether it holds the
    placeholder ``salt``, the table names it reads (not its CTEs') and whether it returns
    lists — each a function of the tree alone."""

    __slots__ = ("listed", "named", "query", "salted", "text")

    def __init__(self, query: exp.Expression) -> None:
        self.query = query
        self.text = to_sql(query, "duckdb")
        self.salted = any(p.name == "salt" for p in query.find_all(exp.Placeholder))
        ctes = {c.alias_or_name for c in query.find_all(exp.CTE)}
        self.named = frozenset(
            t.name for t in query.find_all(exp.Table) if t.name not in ctes or t.db
        )
        self.listed = lists(query)


_WRITTEN: dict[int, Written] = {}
_PARSES: weakref.WeakKeyDictionary[Any, dict[int, tuple[Written, Any]]] = (
    weakref.WeakKeyDictionary()
)
_SHARED_LOCK = threading.Lock()


def written(query: exp.Expression) -> Written:
    """``query``'s text and names (:class:`Written`), generated once per process and
    remembered by the tree itself: the entry holds the tree, so its id names no other tree
    while it is remembered, and the identity is checked. The trees veil prepares are a
    template's (:func:`veil.compile.templates.template`), which nothing changes and which
    every session of the process shares — so a new session's engine asks for the text of a
    question the process has seen without generating it again (~1 ms a statement)."""
    held = _WRITTEN.get(id(query))
    if held is not None and held.query is query:
        return held
    entry = Written(query)
    with _SHARED_LOCK:
        _WRITTEN[id(query)] = entry
        while len(_WRITTEN) > _HELD:
            _WRITTEN.pop(next(iter(_WRITTEN)))
    return entry


# per connection: (a raw catalog version, the state it counts as) — see catalog_state
_SAME_STATE: weakref.WeakKeyDictionary[Any, tuple[int, int | None]] = weakref.WeakKeyDictionary()
# per connection: (the raw catalog version veil restored arrow_large_buffer_size at, its value)
LARGE_SETTING: weakref.WeakKeyDictionary[Any, tuple[int, bool]] = weakref.WeakKeyDictionary()


def weak_get(held: weakref.WeakKeyDictionary[Any, _V], con: Any) -> _V | None:
    """What ``held`` remembers for connection ``con`` (None for one that cannot be weakly
    referenced: nothing is remembered for it)."""
    try:
        return held.get(con)
    except TypeError:  # a connection that cannot be weakly referenced: nothing remembered
        return None


def catalog_state(con: duckdb.DuckDBPyConnection) -> int | None:
    """The connection's catalog version (None when DuckDB does not say): DuckDB counts every
    statement that may change what a name binds to or how a result is exported — DDL,
    ``SET``, registrations — so an unchanged version means unchanged names, columns and
    settings. A version reached only by veil's own setting and restoring of a setting
    (``DuckDBEngine._large_lists``) counts as the state before them, which it is."""
    version = getattr(con, "_catalog_version", None)
    if version is None:
        return None
    now: int = version()
    same = weak_get(_SAME_STATE, con)
    if same is not None and same[0] == now and same[1] is not None:
        return same[1]
    return now


def same_state(con: Any, version: int, state: int | None, large: bool) -> None:
    """Remember that raw catalog ``version`` of ``con`` is catalog state ``state`` and that
    ``arrow_large_buffer_size`` is ``large`` there."""
    with suppress(TypeError), _SHARED_LOCK:
        _SAME_STATE[con] = (version, state)
        LARGE_SETTING[con] = (version, large)


_ARROW_SCHEMAS: weakref.WeakKeyDictionary[Any, dict[tuple[object, ...], pa.Schema]] = (
    weakref.WeakKeyDictionary()
)


def arrow_schema(
    con: duckdb.DuckDBPyConnection,
    version: int | None,
    table: str,
    relation: duckdb.DuckDBPyRelation,
) -> pa.Schema:
    """The Arrow schema of ``relation``, a bound zero-row read of ``table`` on ``con``, whose
    catalog state (:func:`catalog_state`) was ``version`` before the bind (None: DuckDB does
    not say; then the read is run).

    The schema of a zero-row result is a function of the bound columns' names and DuckDB
    types and of the connection's settings (the Arrow export's: string and list offsets,
    lossless types, the time zone of a TIMESTAMPTZ). Settings change only by statements that
    move the catalog version (``SET``, as DDL and registrations do), so a schema made in the
    same catalog state for the same names and types (their full spelling: a DECIMAL's precision,
    an ENUM's values, a STRUCT's fields) is the one running the read would make; anything
    else runs it (the table's name is in the key too, so a constraint that only its own
    read might show is never taken from another table's). Remembered per connection: a new
    session on it asks for the same tables."""
    if version is None:
        schema: pa.Schema = relation.to_arrow_table().schema
        return schema
    key = (version, table, tuple(relation.columns), tuple(str(t) for t in relation.types))
    try:
        held = _ARROW_SCHEMAS.get(con)
    except TypeError:  # a connection that cannot be weakly referenced
        held = None
    found = held.get(key) if held is not None else None
    if found is not None:
        return found
    schema = relation.to_arrow_table().schema
    with _SHARED_LOCK:
        try:
            held = _ARROW_SCHEMAS.setdefault(con, {})
        except TypeError:
            return schema
        held[key] = schema
        while len(held) > _HELD:
            held.pop(next(iter(held)))
    return schema


def parsed(con: duckdb.DuckDBPyConnection, written: Written) -> Any:
    """``written``'s text as DuckDB's connection ``con`` parses it (the text itself if it
    does not parse as one statement: binding it then raises the parser's error), once per
    connection and text: every engine on ``con`` (a new session per query on one
    connection) shares the parse, as one engine's queries do."""
    try:
        held = _PARSES.get(con)
    except TypeError:  # a connection that cannot be weakly referenced: parsed each time
        held = None
    found = held.get(id(written)) if held is not None else None
    if found is not None and found[0] is written:
        return found[1]
    parsed: Any = written.text
    try:
        (parsed,) = con.extract_statements(written.text)
    except (duckdb.Error, ValueError):
        parsed = written.text
    with _SHARED_LOCK:
        try:
            held = _PARSES.setdefault(con, {})
        except TypeError:
            return parsed
        held[id(written)] = (written, parsed)
        while len(held) > _HELD:
            held.pop(next(iter(held)))
    return parsed
