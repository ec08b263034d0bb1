"""The one narrow interface every engine implements: :class:`Engine` is the whole contract.

An engine holds the private tables, runs a sqlglot tree in its own dialect and returns a small
Arrow table of *exact* aggregates. It never adds noise and never decides what is released: the
session does (DESIGN §3). Every member of :class:`Engine` is required — the session calls each
of them directly — and ``tests/engines/test_conformance.py`` runs one suite against every
engine (the fake one, DuckDB, Spark, PostgreSQL).

Optional capabilities are separate runtime-checkable protocols, used only when an engine has
them: :class:`ProgressReporting` (how far a running query is), :class:`SchemaNotes` (what
``explain`` should say about how a table is read) and :class:`DeclaredTypes` (column types
its owner declares).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol, runtime_checkable

import pyarrow as pa
from sqlglot import exp

__all__ = [
    "DeclaredTypes",
    "Engine",
    "Prepared",
    "Preparing",
    "Progress",
    "ProgressReporting",
    "SchemaNotes",
    "StoredTypes",
]

Progress = Callable[[float | None], None]
"""A progress callback: ``None`` while the engine cannot tell, then fractions of the query done
in ``[0, 1]``, strictly increasing, ending with ``1.0`` when the query succeeded."""


@runtime_checkable
class Engine(Protocol):
    """Runs SQL trees against private tables: the whole contract the session relies on.

    Failure is an output (DESIGN §1): ``tables``, ``schema``, ``data_version`` and ``check``
    read no data row, so whatever they raise is decided by registrations and schemas alone and
    is refused before anything is charged; only ``execute`` reads private values.
    """

    @property
    def dialect(self) -> str:
        """The sqlglot dialect name the tree is generated in (``"duckdb"``, ``"spark"``,
        ``"postgres"``), also the key of its :class:`veil.compile.dialect.Dialect` record."""
        ...

    @property
    def tables(self) -> tuple[str, ...]:
        """The names queries may use, as registered."""
        ...

    def schema(self, table: str) -> pa.Schema:
        """The Arrow schema of a registered table; raises ``SchemaError`` if it is unknown.

        Reading a schema reads no private values.
        """
        ...

    def data_version(self, table: str) -> str:
        """A string that changes whenever the table's contents may have changed (the cache
        key: the same version must mean the same rows). Raises ``SchemaError`` for an unknown
        table; reads no data row."""
        ...

    def check(self, query: exp.Expression) -> None:
        """Refuse, for free, every error of ``query`` decidable from the schema without reading
        a data row (an unknown table or column, a type error): raises ``SchemaError`` (or
        ``UnsupportedQueryError``) and otherwise returns. A query ``check`` accepts may still
        fail in ``execute`` only for reasons that are not decidable from the schema."""
        ...

    def execute(self, query: exp.Expression) -> pa.Table:
        """Run ``query`` (generated in :attr:`dialect`, unsupported constructs raising) and
        return its result as an Arrow table; engine errors become veil errors."""
        ...

    def close(self) -> None:
        """Release what the engine holds (connections, registered views); idempotent."""
        ...


@runtime_checkable
class ProgressReporting(Protocol):
    """An engine that can report how far a running query is (optional, besides :class:`Engine`).

    What the fraction is: the engine's own progress estimate — for DuckDB the share of its
    pipelines' source rows processed, weighted by the row counts its planner expects (from the
    table's size); for Spark the share of finished tasks of the query's stages. Privacy: table
    sizes are treated as public, like the schema, but the *trajectory* of the fraction over
    time is a fine-grained timing trace of the query, and timing depends on private data (how
    many rows pass the WHERE, how large the groups are) just as the query's elapsed time does.
    veil does not hide timing; show progress only to someone who may see how long the query
    takes (the person at the terminal), and do not forward it to remote analysts who must not.
    """

    def execute_with_progress(self, query: exp.Expression, progress: Progress) -> pa.Table:
        """:meth:`Engine.execute`, calling ``progress`` while the query runs.

        ``progress`` is called from a watcher thread (the final ``1.0`` from the calling thread,
        never two at once): ``None`` once if the fraction is unknown at first, then only
        strictly increasing fractions in ``[0, 1]``, then ``1.0`` after the query succeeded.
        The watcher stops before this method returns or raises; engine errors propagate
        unchanged; an exception raised by ``progress`` stops the reports and is raised after
        the query ends. The result is the same as ``execute(query)``'s.
        """
        ...


class Prepared(Protocol):
    """A statement bound by :meth:`Preparing.prepare`, run at most once."""

    def run(self, progress: Progress | None) -> pa.Table:
        """Run the bound statement: the result, errors and progress of
        :meth:`Engine.execute` / :meth:`ProgressReporting.execute_with_progress` on its tree."""
        ...


@runtime_checkable
class Preparing(Protocol):
    """An engine that binds a statement once and runs the bound statement later (optional,
    besides :class:`Engine`): the session binds the statement it will run, with its secret
    salt, before anything is charged — the check and the preparation are one parse and one
    bind, not two.

    ``prepare(query, salt=…)`` reads no data row and raises exactly what ``check(query)``
    raises (a ``SchemaError`` decided by the schema alone); the returned statement's ``run``
    is the only step that reads private values. ``query`` may hold the bounding salt as the
    placeholder ``salt`` (:func:`veil.compile.templates.template`): the engine binds ``salt``
    there as a parameter, so the statement is the one ``lower(…, salt=salt)`` writes. The
    engine never changes ``query`` (a template's trees are shared by queries).
    """

    def prepare(self, query: exp.Expression, *, salt: int | None = None) -> Prepared:
        """Bind ``query`` (see the class docstring)."""
        ...


@runtime_checkable
class StoredTypes(Protocol):
    """An engine that refuses, in ``check``, columns by how a file stores them rather than by
    their Arrow type (optional, besides :class:`Engine`): a Parquet TIMESTAMP in milliseconds
    reads as microseconds but overflows converting a far value, so the refusal depends on what
    the schema hides, and whatever remembers a passed check must key it by these too."""

    def unreadable_columns(self, table: str) -> frozenset[str]:
        """The columns (lower-cased) of ``table`` that ``check`` refuses to read, from the
        files' metadata alone (no data row)."""
        ...


@runtime_checkable
class SchemaNotes(Protocol):
    """An engine that can say, from its registrations alone, what a person should know about a
    table's schema (optional, besides :class:`Engine`): a CSV read without declared types has
    only text columns, and how to declare them. ``explain`` shows these notes."""

    def notes(self, table: str) -> tuple[str, ...]:
        """Sentences about ``table``'s schema (empty when there is nothing to say); reads no
        data row."""
        ...


@runtime_checkable
class DeclaredTypes(Protocol):
    """An engine that reads columns with the types their owner declares (``schema=``; optional,
    besides :class:`Engine`): DuckDB and Spark. Errors about a text column used as a number then
    say how to declare its type; an engine without it (PostgreSQL, whose tables carry their own
    types and take no declarations) gets no such advice."""

    def declared(self, table: str) -> Mapping[str, str]:
        """``{column: type}`` declared for ``table`` (the source's column names, the types in
        the engine's spelling); empty when nothing is. Reads no data row."""
        ...
