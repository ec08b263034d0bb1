"""CSV, TSV and JSON-lines files, read so that every line decides its own row and no other.

Whether a query is refused or fails is released to the analyst (DESIGN §1), and one person's
line must not change how other lines are read — nor delete them: a CSV reader that lets a
quote run on across line breaks lets one unterminated quote swallow the following people's
rows. So no type, dialect, date format or header is ever sniffed from the data rows, and
reading is a pure function of each physical line, applied line by line:

**Lines.** A line ends at LF, CRLF or a lone CR — always, even inside quotes: a quoted line
break is not supported and splits the record in two, each part a line of its own (declare the
privacy unit's type, e.g. INTEGER, so that the second part's unit — whatever text starts it —
is NULL rather than a unit of its own). Empty lines are
skipped; a line that is not valid UTF-8 is skipped; a line longer than :data:`MAX_LINE_BYTES`
(2 MiB) is skipped. The first line is the header and is schema, not a person's data: it names
the columns (and the engines skip every line identical to it, e.g. the headers of the other
files of a glob). The files of a glob or directory are held to the table's header: the one its
owner recorded (a catalog records it when the dataset is registered), a file that starts
otherwise skipped, its rows unread (:mod:`veil.engines.sources`); or, for a table registered
directly, the one its files share then, files that differ being refused there. Each file's
first line is read on its own, before any query — with Python's standard library (DuckDB) or
Hadoop's file system and line reader (Spark) — so neither a data row nor the files' sizes
decide it.

**Cells (CSV/TSV).** The delimiter is ``,`` (tab for ``.tsv``), the quote ``"`` and a quote
inside a quoted cell is doubled (``""``). A line is read cell by cell from the left:

* an *unquoted* cell starts with any character but ``"`` (or is empty) and runs to the next
  delimiter; its text is kept as is (a ``"`` inside it is data);
* a *quoted* cell starts with ``"`` and ends at the first lone ``"``, which must be followed by
  the delimiter or the end of the line; its value is the text between the quotes with every
  ``""`` made ``"`` (a delimiter inside is data);
* a cell that starts with ``"`` but is not a quoted cell — an unterminated quote, text after
  the closing quote, a lone ``"`` inside — is *malformed*: it and every later cell of the line
  are NULL, the earlier cells keep their values;
* an empty cell (``,,`` or ``""``) is NULL; a line with fewer cells than the header has NULL
  for the missing ones; cells beyond the header's count are ignored.

Every cell is text; a declared column is then cast with a total cast (see
:mod:`veil.engines.declared`): a text that does not convert is NULL. Both engines implement
these rules the same way (:func:`line_cells`): a line without ``"`` is split at the delimiter;
a line with one is cut by one regular expression whose successive matches are its cells (RE2
on DuckDB; the same language in Java's syntax, possessive so that no line can exhaust the
stack, on Spark), then unquoted. The same file gives the same rows on both.

**JSON lines** (``.json``, ``.jsonl``, ``.ndjson``): one JSON object per line. Only declared
columns are read — their names are never taken from the data — each as the text of the key of
that name (case-sensitive; objects and arrays as JSON text, numbers as the engine writes them,
``null`` as NULL, ``""`` as an empty text), then cast; a line that is not a JSON object is
skipped (on Spark also one nested too deeply for its parser). A JSON array spanning lines is
not supported: its lines are not objects, so it reads as no rows.

Compression: ``.gz`` (gzip) is read; on DuckDB other compressed text files are refused at
registration (their header could not be read without DuckDB parsing data rows), on Spark any
codec Hadoop reads is.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sqlglot import exp

from veil.engines.declared import try_cast
from veil.errors import SchemaError

__all__ = [
    "MAX_LINE_BYTES",
    "TextFormat",
    "cell",
    "cells",
    "decode_first_line",
    "header_names",
    "line_cells",
    "read_first_line",
    "require_declared_json",
    "text_format",
    "text_notes",
]

MAX_LINE_BYTES = 2 * 1024 * 1024
"""Longer lines are skipped (DuckDB's ``max_line_size``; Hadoop's ``maxlength`` on Spark)."""

_CSV_SUFFIXES = {".csv": ",", ".tsv": "\t", ".txt": ","}
_JSON_SUFFIXES = (".json", ".jsonl", ".ndjson")
_COMPRESSIONS = {
    ".gz": "gzip",
    ".zst": "zstd",
    ".bz2": "bzip2",
    ".xz": "xz",
    ".zip": "zip",
    ".deflate": "deflate",
    ".lz4": "lz4",
    ".snappy": "snappy",
}
_BOM = "\ufeff"


@dataclass(frozen=True)
class TextFormat:
    """How a text file is read: CSV with ``delimiter``, or JSON lines (``delimiter`` empty)."""

    kind: Literal["csv", "json"]
    delimiter: str
    gzip: bool

    @property
    def label(self) -> str:
        """``CSV``, ``TSV`` or ``JSON-lines``, for messages."""
        if self.kind == "json":
            return "JSON-lines"
        return "TSV" if self.delimiter == "\t" else "CSV"


def text_format(path: str, *, any_compression: bool = False) -> TextFormat | None:
    """The text format of ``path`` from its suffix (``.csv``, ``.tsv.gz``…), None if it is not
    a text file. A text file compressed other than with gzip is a :class:`SchemaError` unless
    ``any_compression`` (Spark: Hadoop decompresses it and the header is read through it)."""
    name = Path(path.rstrip("/")).name.lower()
    for suffix, codec in _COMPRESSIONS.items():
        stem = name.removesuffix(suffix)
        if stem == name or _kind(stem) is None:
            continue
        if codec != "gzip" and not any_compression:
            raise SchemaError(
                f"{path!r} is a {codec}-compressed text file, which veil does not read (its "
                "header is read with Python's standard library); recompress it with gzip "
                "(.csv.gz) or convert it to Parquet"
            )
        kind = _kind(stem)
        return None if kind is None else TextFormat(kind[0], kind[1], codec == "gzip")
    kind = _kind(name)
    return None if kind is None else TextFormat(kind[0], kind[1], False)


def _kind(name: str) -> tuple[Literal["csv", "json"], str] | None:
    for suffix, delimiter in _CSV_SUFFIXES.items():
        if name.endswith(suffix):
            return "csv", delimiter
    if name.endswith(_JSON_SUFFIXES):
        return "json", ""
    return None


# -- the header ------------------------------------------------------------------------------


def read_first_line(path: str, fmt: TextFormat) -> str:
    """The first line of a local file, decoded as UTF-8 with a byte-order mark dropped: the
    bytes before the first CR or LF. Decompresses and reads no further than that line (in
    blocks of at most 64 KiB), so no data row can make it fail. A first line that is longer
    than :data:`MAX_LINE_BYTES` or not UTF-8 is a :class:`SchemaError`."""
    try:
        with open(path, "rb") as raw:
            head = _first_line(_blocks(raw.read, fmt.gzip))
    except (OSError, zlib.error) as exc:  # unreadable, or not a gzip stream at all
        raise SchemaError(f"cannot read the first line of {path!r}: {exc}") from None
    return decode_first_line(head, repr(path))


def decode_first_line(head: bytes, where: str) -> str:
    """``head``, the bytes of the first line of ``where``, as text: UTF-8 with a byte-order
    mark dropped. Longer than :data:`MAX_LINE_BYTES` or not UTF-8 is a :class:`SchemaError`
    (which quotes none of it)."""
    if len(head) > MAX_LINE_BYTES:
        raise SchemaError(
            f"the first line of {where} is longer than {MAX_LINE_BYTES} bytes; the header "
            "must be one line naming the columns"
        )
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError(
            f"the first line of {where} is not UTF-8 ({exc.reason} at byte {exc.start}); "
            "save the file as UTF-8"
        ) from None
    return text.removeprefix(_BOM)


def _blocks(read: Callable[[int], bytes], gzipped: bool) -> Iterator[bytes]:
    """The file's bytes in small blocks, inflated lazily for gzip."""
    inflate = zlib.decompressobj(zlib.MAX_WBITS | 16) if gzipped else None
    while block := read(4_096):
        if inflate is None:
            yield block
            continue
        while block:
            yield inflate.decompress(block, 65_536)
            block = inflate.unconsumed_tail
            if inflate.eof:
                return


def _first_line(blocks: Iterator[bytes]) -> bytes:
    buf = bytearray()
    for block in blocks:
        cut = min((i for i in (block.find(b"\n"), block.find(b"\r")) if i >= 0), default=-1)
        if cut >= 0:
            return bytes(buf + block[:cut])
        buf += block
        if len(buf) > MAX_LINE_BYTES:
            break
    return bytes(buf)


def require_declared_json(table: str, declared: Mapping[str, object]) -> None:
    """A JSON-lines file's column names would come from the data: refuse one read without a
    declaration (``SchemaError`` saying how to declare its columns)."""
    if not declared:
        raise SchemaError(
            f"table {table!r} is a JSON-lines file, whose column names would come from "
            f"the data; declare the columns to read: schema={{{table!r}: {{'income': "
            f"'DOUBLE', 'city': 'VARCHAR'}}}} (Python) or --schema/--column (CLI)"
        )


def header_names(table: str, line: str, fmt: TextFormat, where: str) -> tuple[str, ...]:
    """The column names the header ``line`` gives, by the cell rules; an empty, malformed or
    repeated name (case-insensitively) is a :class:`SchemaError` naming it and ``where``."""
    if not line.strip():
        raise SchemaError(
            f"table {table!r}: the first line of {where} is empty; the first line of a "
            f"{fmt.label} must be the header naming the columns"
        )
    texts, malformed = _tokens(line, fmt.delimiter)
    if malformed:
        raise SchemaError(
            f"table {table!r}: cell {len(texts) + 1} of the header of {where} opens a quote "
            'it does not close (quote a name as "name", doubling a " inside it)'
        )
    seen: dict[str, int] = {}
    for i, name in enumerate(texts, 1):
        if not name:
            raise SchemaError(
                f"table {table!r}: column {i} of the header of {where} has no name; name "
                "every column in the first line"
            )
        if name.lower() in seen:
            raise SchemaError(
                f"table {table!r}: the header of {where} names {name!r} twice (columns "
                f"{seen[name.lower()]} and {i}; names are case-insensitive); rename one"
            )
        seen[name.lower()] = i
    return tuple(texts)


# -- cells: the Python reference and the SQL ---------------------------------------------------

_QUOTED = re.compile(r'"[^"]*(?:""[^"]*)*"')


def _tokens(line: str, delimiter: str) -> tuple[list[str], bool]:
    """The cells of ``line`` (quotes removed, ``""`` made ``"``) up to the first malformed one,
    and whether there was one."""
    texts: list[str] = []
    pos = 0
    while True:
        if line.startswith('"', pos):
            m = _QUOTED.match(line, pos)
            end = m.end() if m is not None else -1
            if m is None or (end < len(line) and line[end] != delimiter):
                return texts, True
            texts.append(m.group()[1:-1].replace('""', '"'))
        else:
            end = line.find(delimiter, pos)
            end = len(line) if end < 0 else end
            texts.append(line[pos:end])
        if end >= len(line):
            return texts, False
        pos = end + 1


def cells(line: str, delimiter: str, count: int) -> list[str | None]:
    """The ``count`` cells of ``line`` as the engines read them (the reference of
    :func:`cell`): texts, with NULL (None) for empty, missing and malformed cells and those
    after a malformed one."""
    texts, _ = _tokens(line, delimiter)
    padded = [t or None for t in texts[:count]]
    return padded + [None] * (count - len(padded))


_END = "\n"  # appended after the line's last delimiter: no line holds one (it ends lines)


def _token_pattern(delimiter: str, dialect: str) -> str:
    """One cell with the delimiter that follows it — quoted, unquoted or empty — or, from a
    malformed cell on, the rest of the text through :data:`_END`. Matched over
    ``line || d || _END``, the successive matches tile it cell by cell (each position where a
    cell starts begins exactly one match, none is empty, ``_END`` alone matches nothing), and
    only a malformed match ends with ``_END``. No capture group: RE2 then needs no submatch
    pass, which halves the time of a line with quotes."""
    d = delimiter  # "," or a tab: neither is special in a regular expression
    if dialect == "spark":  # Java: possessive quantifiers, so no line can exhaust the stack
        return f'(?s)"[^"]*+(?:""[^"]*+)*+"{d}|[^{d}"{_END}][^{d}]*+{d}|{d}|".*+'
    return f'(?s)"[^"]*(?:""[^"]*)*"{d}|[^{d}"{_END}][^{d}]*{d}|{d}|".*'


def line_cells(line: exp.Expression, delimiter: str, dialect: str) -> exp.Expression:
    """The cells of ``line`` as a list of texts (quotes removed, ``""`` made ``"``; '' for an
    empty cell, NULL for a malformed one; the cells after a malformed one left out).

    A line without ``"`` — the common case — is split at the delimiter; a line with one is
    cut by one regular expression whose successive matches are its cells, each then freed of
    its delimiter and quotes. Computed once per row (the engines keep it in a projection of
    its own); every function here is total.
    """
    text = exp.Literal.string
    quote = text('"')
    position = exp.Anonymous(this="instr", expressions=[line.copy(), quote])
    no_quote = exp.EQ(this=position, expression=exp.Literal.number(0))
    split = "string_split" if dialect == "duckdb" else "split"
    plain = exp.Anonymous(this=split, expressions=[line.copy(), text(delimiter)])
    padded = exp.Concat(expressions=[line.copy(), text(delimiter + _END)])
    pattern = text(_token_pattern(delimiter, dialect))
    tokens = exp.Anonymous(
        this="regexp_extract_all", expressions=[padded, pattern, exp.Literal.number(0)]
    )
    token = exp.to_identifier("cell")
    free = exp.Lambda(this=_cell_text(exp.column(token.copy())), expressions=[token])
    transform = "list_transform" if dialect == "duckdb" else "transform"
    texts = exp.Anonymous(this=transform, expressions=[tokens, free])
    return exp.Case(ifs=[exp.If(this=no_quote, true=plain)], default=texts)


def _cell_text(token: exp.Expression) -> exp.Expression:
    """A token's text: NULL for a malformed one (it ends with :data:`_END`); a quoted cell
    without its quotes and delimiter, ``""`` made ``"``; any other without its delimiter.
    Total: only substring, replace and comparisons."""

    def cut(start: int, drop: int) -> exp.Expression:
        length = exp.Sub(this=exp.Length(this=token.copy()), expression=exp.Literal.number(drop))
        return exp.Substring(this=token.copy(), start=exp.Literal.number(start), length=length)

    quote = exp.Literal.string('"')
    return exp.Case(
        ifs=[
            exp.If(
                this=exp.EndsWith(this=token.copy(), expression=exp.Literal.string(_END)),
                true=exp.Null(),
            ),
            exp.If(
                this=exp.StartsWith(this=token.copy(), expression=quote),
                true=exp.func("REPLACE", cut(2, 3), exp.Literal.string('""'), quote.copy()),
            ),
        ],
        default=cut(1, 1),
    )


def cell(
    cells_of_line: exp.Expression,
    index: int,
    dialect: str,
    dtype: exp.DataType | None = None,
) -> exp.Expression:
    """Column ``index`` (1-based) from :func:`line_cells`'s list: the cell's text, NULL when it
    is empty, missing, malformed or after a malformed one; with ``dtype``, that text through
    a total cast (:func:`veil.engines.declared.try_cast`, ISO 8601 only for dates; an empty
    text casts to NULL on both engines, so a typed column needs no ``NULLIF`` — which Spark
    would expand into two reads of the cell).

    Contract: for every line, ``cell(line_cells(line), k)`` equals ``cells(line, d, n)[k - 1]``
    (tests check it on both engines). It never fails: an index past the end gives NULL
    (``list_extract``; Spark's ``try_element_at``, whatever the ANSI setting).
    """
    get = "list_extract" if dialect == "duckdb" else "try_element_at"
    element = exp.Anonymous(this=get, expressions=[cells_of_line.copy(), exp.Literal.number(index)])
    if dtype is not None and not dtype.is_type(*exp.DataType.TEXT_TYPES):
        return try_cast(element, dtype, text=True)
    return exp.Nullif(this=element, expression=exp.Literal.string(""))


# -- notes for explain -------------------------------------------------------------------------


def text_notes(
    table: str, fmt: TextFormat, columns: Sequence[str], declared: Mapping[str, object]
) -> tuple[str, ...]:
    """What ``explain`` should say about a CSV/TSV table: which columns are text because
    nothing declared their type, and how to declare one (empty when all are declared)."""
    if fmt.kind != "csv":
        return ()
    text = [c for c in columns if c not in declared]
    if not text:
        return ()
    example = text[0]
    how = (
        f"declare types with schema={{{table!r}: {{{example!r}: 'DOUBLE'}}}} (Python) or "
        f"--column {example}:DOUBLE (CLI)"
    )
    if len(text) == len(columns):
        return (
            f"table {table!r} is a {fmt.label} read without declared types: every column is "
            f"text; {how}",
        )
    shown = ", ".join(repr(c) for c in text[:5])
    more = f" and {len(text) - 5} more" if len(text) > 5 else ""
    which = f"column {shown} is" if len(text) == 1 else f"columns {shown}{more} are"
    return (f"table {table!r} is a {fmt.label}: the undeclared {which} text; {how}",)
