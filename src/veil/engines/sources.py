"""The files of a file table: expanded, held to the table's layout, each deciding only its rows.

A table read from a glob is often one file per person. Whether a query is refused or fails is
released to the analyst (DESIGN §1), so one person's file must not decide it: a CSV whose
first line is not the table's header, or a Parquet file whose columns or storages differ from
the table's, would otherwise change every query's columns or make the reader fail.

So every file table has a *layout* — the header line of a CSV/TSV, the canonical columns of a
Parquet footer (:attr:`veil.engines.footers.Footer.layout`) — fixed by its owner: recorded in
the catalog when the dataset is registered (``Source.layout``), or, for a table registered
directly (``Session.local(tables=…)``), the layout every file shares at registration (files
that differ then are refused there, naming them: the one registering is the owner). Once it is
fixed, a file whose layout differs — one person's file without the header, with one more
column, or another storage — is skipped when the table is read, and the operator's log
(:data:`SOURCES_LOGGER`, ``"veil.sources"``) names it; its rows are not read, nobody else's
change. A file is read from its first line or its footer only (no data row).

A file source's identity (:func:`file_identity`) is the set of (device, inode) of the files it
expands to, so hard links, a glob matching another dataset's file and a second spelling of a
path are the same data.
"""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from veil.engines.footers import Footer, read_footer
from veil.engines.lines import TextFormat, read_first_line
from veil.errors import SchemaError

__all__ = [
    "SOURCES_LOGGER",
    "Kept",
    "expand",
    "file_identity",
    "is_glob",
    "keep",
    "layout_of",
]

SOURCES_LOGGER = "veil.sources"
"""The ``logging`` logger that names the files a table skipped (owner-side details: paths)."""

logger = logging.getLogger(SOURCES_LOGGER)
# nothing is printed (not even by Python's last-resort handler, on an analyst's stderr) until
# whoever runs veil configures logging
logger.addHandler(logging.NullHandler())


def is_glob(source: str) -> bool:
    """Whether ``source`` is a glob pattern (``*``, ``?`` or ``[``)."""
    return any(c in source for c in "*?[")


def expand(source: str) -> list[str]:
    """The files ``source`` names now: a glob's matching regular files, sorted, or the path
    itself when it is a regular file; empty when there is none."""
    if is_glob(source):
        return sorted(f for f in glob.glob(source) if os.path.isfile(f))
    return [source] if os.path.isfile(source) else []


def file_identity(files: Iterable[str]) -> frozenset[tuple[int, int]]:
    """The (device, inode) of each file that exists (hard links and other names of one file
    are one identity)."""
    found: set[tuple[int, int]] = set()
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            continue
        found.add((st.st_dev, st.st_ino))
    return frozenset(found)


def layout_of(file: str, fmt: TextFormat | None) -> tuple[str | None, Footer | None]:
    """``file``'s layout — a CSV/TSV's first line, a Parquet footer's columns — and its
    footer (Parquet). A JSON-lines file has none (each line is an object of its own); a file
    that cannot be read as its format gives ``(None, None)``."""
    if fmt is not None:
        if fmt.kind == "json":
            return None, None
        try:
            return read_first_line(file, fmt), None
        except SchemaError:
            return None, None
    footer = read_footer(file)
    return (None, None) if footer is None else (footer.layout, footer)


@dataclass(frozen=True)
class Kept:
    """The files of a table that are read (sorted), the table's layout, and the footer those
    files share (Parquet; None for text)."""

    files: tuple[str, ...]
    layout: str | None
    footer: Footer | None


def keep(table: str, files: Sequence[str], fmt: TextFormat | None, layout: str | None) -> Kept:
    """The files of ``files`` that ``table`` reads.

    With ``layout`` (the owner's, recorded), a file whose layout differs — or that cannot be
    read as its format — is skipped and logged on :data:`SOURCES_LOGGER`; none kept is an
    empty table. Without it, every file must share the first file's layout, or the
    registration is refused with a ``SchemaError`` naming the files (the one registering the
    table is its owner)."""
    if fmt is not None and fmt.kind == "json":
        return Kept(tuple(files), None, None)
    if layout is None:
        return _all_alike(table, files, fmt)
    kept: list[str] = []
    skipped: list[str] = []
    footer: Footer | None = None
    for f in files:
        found, its_footer = layout_of(f, fmt)
        if found == layout:
            kept.append(f)
            footer = footer or its_footer
        else:
            skipped.append(f)
    if skipped:
        what = "first line is not the table's header" if fmt is not None else "columns differ"
        logger.warning(
            "table %r: skipped %d file(s) whose %s (their rows are not read): %s",
            table,
            len(skipped),
            what,
            ", ".join(skipped),
            extra={"veil_table": table, "veil_skipped": tuple(skipped)},
        )
    return Kept(tuple(kept), layout, footer)


def _all_alike(table: str, files: Sequence[str], fmt: TextFormat | None) -> Kept:
    if fmt is not None:
        first = read_first_line(files[0], fmt)  # unreadable: a SchemaError naming it
        for other in files[1:]:
            if read_first_line(other, fmt) != first:
                raise SchemaError(
                    f"table {table!r}: {other!r} does not start with the header of "
                    f"{files[0]!r}; the files of one table must have the same first line"
                )
        return Kept(tuple(files), first, None)
    layout, footer = layout_of(files[0], None)
    for other in files[1:] if layout is not None else ():
        if layout_of(other, None)[0] != layout:
            raise SchemaError(
                f"table {table!r}: the columns or types of the Parquet file {other!r} differ "
                f"from those of {files[0]!r}; the files of one table must have the same "
                "columns, stored alike"
            )
    return Kept(tuple(files), layout, footer)
