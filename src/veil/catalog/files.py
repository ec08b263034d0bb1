"""The local files a catalog source reads: their identity and, for a glob, their layout.

A dataset's name is its unit of accounting (DESIGN §4), so one file must never be registered
under two names: :func:`source_files` is the set of (device, inode) a source expands to now —
a hard link, a second spelling of the path or a glob that matches the file are the same file
— and :meth:`veil.catalog.Catalog.add_dataset` refuses a source whose set meets another
dataset's. A DuckDB database's table or view is what it reads (:func:`duckdb_reads`): the
base tables behind its views, the files a view reads, and each base table's content, so a
view of another dataset's table, or a copy of it, is that dataset. Remote sources
(PostgreSQL, a Spark catalog table, a path on another file system) have no local files and
are compared by their names (``Source.identity``).

:func:`with_layout` fixes, when a glob is registered, the layout its files share (a CSV
header line, or the columns of a Parquet footer; :mod:`veil.engines.sources`): the engines
then skip any later file whose layout differs, so one person's file never decides how the
others are read. Both read metadata only: file names, (device, inode), a first line, a footer.
"""

from __future__ import annotations

import os
from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from veil.engines.lines import text_format
from veil.engines.sources import expand, file_identity, is_glob, keep
from veil.errors import InvalidArgumentError, SchemaError

if TYPE_CHECKING:
    from veil.catalog import Source

__all__ = ["duckdb_reads", "local_files", "source_files", "with_layout"]

_PARQUET = (".parquet", ".pq")


def _names_files(table: str) -> bool:
    """Whether the DuckDB engine reads ``table`` (a DuckDB source's table) as files."""
    try:
        fmt = text_format(table)
    except SchemaError:
        return True  # a compressed text file: a file all the same
    return (
        fmt is not None
        or table.lower().endswith(_PARQUET)
        or is_glob(table)
        or (os.path.exists(table))
    )


def _spark_files(path: str) -> list[str]:
    """The local files Spark reads for ``path``: a glob's files, a directory's (hidden and
    ``_``-prefixed names left out, as Spark does), or the file; none for a remote path."""
    if path.startswith("file:"):
        path = path.removeprefix("file:").removeprefix("//")
    elif "://" in path:
        return []
    if os.path.isdir(path):
        found = []
        for root, dirs, names in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
            found += [os.path.join(root, n) for n in names if not n.startswith(("_", "."))]
        return sorted(found)
    return expand(path)


def local_files(source: Source) -> list[str]:
    """The local data files ``source`` reads now (none for a remote source)."""
    if source.kind == "file" and source.path:
        return expand(source.path)
    if source.kind == "duckdb" and source.table and _names_files(source.table):
        return expand(source.table)
    if source.kind == "spark" and source.path and not source.table:
        return _spark_files(source.path)
    return []


def source_files(source: Source) -> frozenset[object]:
    """What ``source`` reads, as identities: the (device, inode) of each local file, and for
    a DuckDB database's table or view what it reads (:func:`duckdb_reads`)."""
    found: set[object] = set(file_identity(local_files(source)))
    if source.kind == "duckdb" and source.path and source.table and not found:
        found |= duckdb_reads(source.path, source.table)
    return frozenset(found)


def duckdb_reads(database: str, table: str) -> frozenset[object]:
    """What ``table`` of the DuckDB database file ``database`` reads, as identities:

    * each base table it reads — the table itself, or every table a view reads, through
      other views (the view's SQL as DuckDB keeps it, parsed by sqlglot) — as the database
      file's (device, inode) with the table's name;
    * the (device, inode) of each local file a view reads (``read_parquet('…')``,
      ``FROM 'people.csv'``…);
    * the content of each non-empty base table — its row count and the sum of its rows'
      hashes — so that a copy (``CREATE TABLE copy AS SELECT * FROM people``), in this
      database or another, is the same data.

    A database that cannot be opened read-only counts as its file and the table's name.
    Read at registration (owner-side): it reads the tables, not one row of which any
    analyst sees."""
    try:
        st = os.stat(database)
    except OSError:
        return frozenset()
    return _duckdb_reads(database, table, (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns))


@lru_cache(maxsize=256)
def _duckdb_reads(database: str, table: str, version: tuple[int, ...]) -> frozenset[object]:
    """:func:`duckdb_reads` of the database file at ``version`` (device, inode, size and
    modification time): each table's content is hashed once per version and process, not
    for every dataset registered after it (``Catalog.load_toml`` adds them all)."""
    import duckdb

    base = frozenset({(version[0], version[1])})
    named = {(device, inode, table.lower()) for device, inode in base}
    try:
        con = duckdb.connect(database, read_only=True)
    except duckdb.Error:
        return frozenset(named)
    try:
        found: set[object] = set()
        _reads(con, table, base, found, set())
        return frozenset(found or named)
    except duckdb.Error:
        return frozenset(named)
    finally:
        con.close()


def _reads(
    con: Any, table: str, base: frozenset[tuple[int, int]], found: set[object], seen: set[str]
) -> None:
    """Add to ``found`` what ``table`` of ``con`` reads (see :func:`duckdb_reads`)."""
    import sqlglot
    from sqlglot import exp

    key = table.lower()
    if key in seen:
        return
    seen.add(key)
    view = con.execute(
        "SELECT sql FROM duckdb_views() WHERE lower(view_name) = $1 AND NOT internal "
        "AND NOT temporary LIMIT 1",
        [key],
    ).fetchall()
    if not view:
        kind = con.execute(
            "SELECT 1 FROM duckdb_tables() WHERE lower(table_name) = $1 AND NOT temporary LIMIT 1",
            [key],
        ).fetchall()
        if not kind:
            if _names_files(table):
                found.update(file_identity(expand(table)))
            return
        found.update((device, inode, key) for device, inode in base)
        quoted = exp.to_identifier(table, quoted=True).sql(dialect="duckdb")
        rows = con.execute(f"SELECT count(*), sum(hash(t)::HUGEINT) FROM {quoted} AS t").fetchall()
        if rows and rows[0][0]:
            found.add(("content", int(rows[0][0]), str(rows[0][1])))
        return
    tree = sqlglot.parse_one(str(view[0][0]), read="duckdb")
    target = tree.this if isinstance(tree, exp.Create) else None
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for node in tree.find_all(exp.Table):
        if node is target or (isinstance(target, exp.Schema) and node is target.this):
            continue
        if isinstance(node.this, exp.Identifier):
            if node.name.lower() not in ctes:
                _reads(con, node.name, base, found, seen)
            continue
        for literal in node.this.find_all(exp.Literal) if node.this is not None else ():
            if literal.is_string:
                found.update(file_identity(expand(literal.this)))


def _pattern(source: Source) -> str | None:
    """The path or glob whose files are held to a layout (a glob, or a Spark directory)."""
    if source.kind == "file" and source.path and is_glob(source.path):
        return source.path
    if source.kind == "duckdb" and source.table and is_glob(source.table):
        return source.table
    if source.kind == "spark" and source.path and not source.table:
        path = source.path
        if is_glob(path) or os.path.isdir(path.removeprefix("file:").removeprefix("//")):
            return path
    return None


def with_layout(source: Source, previous: Source | None) -> Source:
    """``source`` with its layout: as given; else, for a glob (or a Spark directory) of local
    CSV or Parquet files, the one its files share now — or the one ``previous`` (the entry
    registered before under the same name) recorded for the same source, so that registering
    it again does not depend on the files there now. Files that differ are refused here,
    naming them (the one registering is the data owner)."""
    pattern = _pattern(source)
    if source.layout is not None or pattern is None:
        return source
    if (
        previous is not None
        and previous.layout is not None
        and (
            (previous.kind, previous.path, previous.table, previous.url)
            == (source.kind, source.path, source.table, source.url)
        )
    ):
        return replace(source, layout=previous.layout)
    try:
        fmt = text_format(pattern, any_compression=source.kind == "spark")
    except SchemaError:
        return source  # the engine refuses the format itself
    if fmt is not None and fmt.kind == "json":
        return source  # every line is its own object: no layout
    files = local_files(source)
    if fmt is None and source.kind == "spark" and not files:
        return source  # Parquet on a file system Spark reaches: held to its layout by the engine
    if not files:
        raise InvalidArgumentError(
            f"no file matches {pattern!r}: the layout of a glob's files (its CSV header or its "
            "Parquet columns) is fixed from them when the dataset is registered; add a file "
            "first, or give a CSV's header line as the source's layout"
        )
    try:
        kept = keep(pattern, files, fmt, None)
    except SchemaError as exc:
        fix = (
            "; or give the header line as the source's layout (the files that do not start "
            "with it are then skipped)"
            if fmt is not None
            else ""
        )
        raise SchemaError(f"{exc}{fix}") from None
    return replace(source, layout=kept.layout)
