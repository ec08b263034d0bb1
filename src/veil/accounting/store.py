"""The ledger's storage: one SQLAlchemy Core schema for SQLite and PostgreSQL.

Exact numbers are stored as text fractions (``"1/10"``), never as floats. The schema is
versioned (table ``veil_schema_version``); :data:`MIGRATIONS` maps a version to the step that
upgrades a database from the version before it, and opening a ledger applies the missing steps.

A ledger is never made by accident nor trusted when it is not one (:func:`open_ledger`): a new
SQLite ledger file appears whole (built aside, then linked into place), so an existing file
that is empty, not a SQLite database, or a database without veil's tables and version is
refused — a failed copy or restore, or a path to someone else's database — unless an explicit
``init`` turns an empty one into a new ledger.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    create_engine,
    create_mock_engine,
    event,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.engine import URL, Dialect, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError
from sqlalchemy.pool import StaticPool

from veil.accounting.failures import unavailable
from veil.errors import LedgerError, MissingDependencyError

__all__ = [
    "MIGRATIONS",
    "READ_ONLY",
    "SCHEMA_VERSION",
    "in_memory",
    "metadata",
    "open_engine",
    "open_ledger",
    "prepare_schema",
    "require_existing",
    "shown_url",
]

SCHEMA_VERSION = 4
SQLITE_BUSY_TIMEOUT_S = 60.0

metadata = MetaData()

schema_version = Table(
    "veil_schema_version",
    metadata,
    Column("version", Integer, nullable=False),
)

budgets = Table(
    "veil_budgets",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("analyst", String(200), nullable=False),
    Column("dataset", String(200), nullable=False),
    Column("kind", String(8), nullable=False),
    # the granted total, exact fractions as text
    Column("epsilon", Text),
    Column("delta", Text, nullable=False),
    Column("rho", Text),
    # the running sums of reserved and committed charges (see veil.accounting.spending)
    Column("spent_epsilon", Text, nullable=False),
    Column("spent_delta", Text, nullable=False),
    Column("spent_rho", Text, nullable=False),
    Column("thresholds", Text, nullable=False),  # JSON list of fractions, e.g. ["1/2", "4/5", "1"]
    Column("created_at", Text, nullable=False),
    Column("updated_at", Text, nullable=False),
    UniqueConstraint("analyst", "dataset", name="veil_budgets_analyst_dataset"),
)

events = Table(
    "veil_events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("budget_id", Integer, ForeignKey("veil_budgets.id"), nullable=False),
    Column("at", Text, nullable=False),
    Column("event", String(16), nullable=False),  # grant | charge | cache_hit | alert
    Column("status", String(16)),  # charges: reserved | committed | refunded
    Column("fingerprint", Text),
    Column("data_version", Text),
    Column("loss_kind", String(8)),
    Column("epsilon", Text),
    Column("delta", Text),
    Column("rho", Text),
    Column("answer_id", Integer),
    Column("detail", Text),
    Column("updated_at", Text),
    Column("query_text", Text),  # charges: the SQL (or plan) that was charged (version 2)
    Index("veil_events_budget", "budget_id", "event", "status"),
)
# version 4: a budget's history read a page at a time, newest first (WHERE budget_id = ? AND
# id < ? ORDER BY id DESC LIMIT ?), of one kind of event too (its charges, counted up to a
# cap), the cache hits of the answers on a page counted, and the reservations still open found
# without a scan (a partial index: only the few charges whose status is 'reserved')
EVENTS_PAGE = Index("veil_events_page", events.c.budget_id, events.c.id)
EVENTS_KIND = Index("veil_events_kind", events.c.budget_id, events.c.event, events.c.id)
EVENTS_ANSWER = Index("veil_events_answer", events.c.answer_id)  # an answer's cache hits
EVENTS_RESERVED = Index(
    "veil_events_reserved",
    events.c.at,
    sqlite_where=events.c.status == "reserved",
    postgresql_where=events.c.status == "reserved",
)

answers = Table(
    "veil_answers",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("budget_id", Integer, ForeignKey("veil_budgets.id"), nullable=False),
    Column("fingerprint", Text, nullable=False),
    Column("data_version", Text, nullable=False),
    Column("loss_key", Text, nullable=False),
    Column("answer", Text, nullable=False),  # JSON
    Column("charge_id", Integer, ForeignKey("veil_events.id"), nullable=False),
    Column("created_at", Text, nullable=False),
    # every released answer is kept; the cache serves the earliest for a key
    Index("veil_answers_key", "budget_id", "fingerprint", "data_version", "loss_key"),
)

alerts = Table(
    "veil_alerts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("budget_id", Integer, ForeignKey("veil_budgets.id"), nullable=False),
    Column("threshold", Text, nullable=False),
    Column("used", Text, nullable=False),
    Column("at", Text, nullable=False),
    Column("notified", Integer, nullable=False),  # 0 until a process has delivered it
    UniqueConstraint("budget_id", "threshold", name="veil_alerts_once"),
)


datasets = Table(
    "veil_datasets",
    metadata,
    # the catalog (version 3): one row per dataset, its owner-set metadata as JSON
    # (veil.catalog.Dataset.to_json)
    Column("name", String(200), primary_key=True),
    Column("spec", Text, nullable=False),
    Column("created_at", Text, nullable=False),
    Column("updated_at", Text, nullable=False),
)

dataset_caps = Table(
    "veil_dataset_caps",
    metadata,
    # a dataset's total budget across all analysts (version 3), with its running sums of
    # reserved and committed charges, kept like a grant's (veil.accounting.spending)
    Column("dataset", String(200), primary_key=True),
    Column("kind", String(8), nullable=False),
    Column("epsilon", Text),
    Column("delta", Text, nullable=False),
    Column("rho", Text),
    Column("spent_epsilon", Text, nullable=False),
    Column("spent_delta", Text, nullable=False),
    Column("spent_rho", Text, nullable=False),
    Column("created_at", Text, nullable=False),
    Column("updated_at", Text, nullable=False),
)

principals = Table(
    "veil_principals",
    metadata,
    # the service's identities (version 3): admins and analysts, each API key stored as its
    # SHA-256 only (the key is shown once, at creation)
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(200), nullable=False),
    Column("role", String(16), nullable=False),  # admin | analyst
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("created_at", Text, nullable=False),
    Column("revoked_at", Text),
    Index("veil_principals_name", "name"),
)


def _add_query_text(conn: Connection) -> None:
    """Version 2: each charge records the query text, for the audit trail."""
    conn.execute(text("ALTER TABLE veil_events ADD COLUMN query_text TEXT"))


def _add_catalog(conn: Connection) -> None:
    """Version 3: the catalog, dataset-wide caps and the service's principals — new tables
    only, which ``prepare_schema`` creates before migrating; nothing to change in old ones."""


def _add_indexes(conn: Connection) -> None:
    """Version 4: the indexes of paged histories and of open reservations (a charge may now
    also be ``abandoned``: older releases, which would not count it, refuse the version)."""
    for index in (EVENTS_PAGE, EVENTS_KIND, EVENTS_ANSWER, EVENTS_RESERVED):
        index.create(conn, checkfirst=True)


# version -> the step that upgrades a database at version - 1 to it
MIGRATIONS: dict[int, Callable[[Connection], None]] = {
    2: _add_query_text,
    3: _add_catalog,
    4: _add_indexes,
}


def _hidden(url: URL) -> str:
    return url.render_as_string(hide_password=True)


def _parse(url: str | os.PathLike[str]) -> URL:
    if isinstance(url, os.PathLike):
        return URL.create("sqlite", database=os.fspath(url))
    if not isinstance(url, str) or "://" not in url:
        raise LedgerError(
            f"malformed ledger URL {url!r}; use 'sqlite:///path/ledger.db', 'sqlite://' "
            "(in memory) or 'postgresql://user@host:5432/db'"
        )
    if url.startswith("postgres://"):
        url = "postgresql://" + url[len("postgres://") :]
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise LedgerError(
            f"malformed ledger URL {url!r} ({exc}); use 'sqlite:///path/ledger.db' or "
            "'postgresql://user@host:5432/db'"
        ) from exc


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # The driver must not open transactions itself: every transaction is BEGIN IMMEDIATE.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
    cursor.execute("PRAGMA foreign_keys = ON")
    cursor.close()


def _on_sqlite_file_connect(dbapi_connection: Any, record: Any) -> None:
    _on_sqlite_connect(dbapi_connection, record)
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode = WAL")
    cursor.execute("PRAGMA synchronous = FULL")
    cursor.close()


SQLITE_POOL = 24  # SQLite file connections kept open per ledger object (and as many more)

READ_ONLY = "veil_read_only"
"""Set to True in ``Connection.info`` for a read-only transaction (no write lock taken)."""


def _begin_immediate(conn: Connection) -> None:
    # A write transaction takes the write lock at its start: the check-and-spend that follows
    # cannot interleave. A read is a plain deferred BEGIN: a snapshot, no lock (WAL mode).
    conn.exec_driver_sql("BEGIN" if conn.info.get(READ_ONLY) else "BEGIN IMMEDIATE")


def open_engine(url: str | os.PathLike[str]) -> tuple[Engine, bool]:
    """An engine for the ledger URL and whether it is a single shared in-memory connection."""
    parsed = _parse(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if parsed.get_driver_name() not in ("pysqlite", ""):
            raise LedgerError(
                f"use the default SQLite driver ('sqlite:///…'), got {_hidden(parsed)}"
            )
        memory = parsed.database in (None, "", ":memory:")
        if memory:
            engine = create_engine(
                parsed,
                poolclass=StaticPool,
                connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_S},
            )
            event.listen(engine, "connect", _on_sqlite_connect)
        else:
            # connections kept for every thread that may hold one at once (a service has
            # 16 query threads and the hit writer): an overflow one is opened (four PRAGMAs)
            # and closed per use
            engine = create_engine(
                parsed,
                connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S},
                pool_size=SQLITE_POOL,
                max_overflow=SQLITE_POOL,
            )
            event.listen(engine, "connect", _on_sqlite_file_connect)
        event.listen(engine, "begin", _begin_immediate)
        return engine, memory
    if backend == "postgresql":
        try:
            import psycopg  # noqa: F401
        except ImportError as exc:
            raise MissingDependencyError(
                "a PostgreSQL ledger needs psycopg 3: pip install 'veil[postgres]'"
            ) from exc
        parsed = parsed.set(drivername="postgresql+psycopg")
        try:
            engine = create_engine(parsed, pool_pre_ping=True)
        except (ArgumentError, NoSuchModuleError, TypeError) as exc:
            raise LedgerError(f"cannot use ledger URL {_hidden(parsed)}: {exc}") from exc
        return engine, False
    raise LedgerError(
        f"unsupported ledger database {backend!r} in {_hidden(parsed)}; "
        "veil keeps ledgers in SQLite ('sqlite:///ledger.db') or PostgreSQL ('postgresql://…')"
    )


_EMPTY_SCHEMA: list[tuple[str, ...]] = []  # create_all's statements for an empty SQLite database
# per SCHEMA_VERSION: a private in-memory SQLite database holding what those statements and
# the version row make, copied page by page into each new in-memory ledger (see _copy_schema)
_TEMPLATES: dict[int, sqlite3.Connection] = {}
_TEMPLATE_LOCK = threading.Lock()


def _create_statements(dialect: Dialect) -> tuple[str, ...]:
    """The statements ``metadata.create_all`` issues on an empty SQLite database, compiled by
    ``dialect`` once per process (each new engine would compile them anew)."""
    if not _EMPTY_SCHEMA:
        elements: list[Any] = []
        mock = create_mock_engine(
            make_url("sqlite://"), lambda ddl, *_a, **_k: elements.append(ddl)
        )
        metadata.create_all(mock, checkfirst=False)
        _EMPTY_SCHEMA.append(tuple(str(e.compile(dialect=dialect)) for e in elements))
    return _EMPTY_SCHEMA[0]


def _schema_template(dialect: Dialect) -> sqlite3.Connection:
    """The in-memory SQLite database that :func:`_create_statements` and the row of
    :data:`SCHEMA_VERSION` make — what an empty in-memory ledger gets —, built once per
    process and schema version, then only read. Call with ``_TEMPLATE_LOCK`` held."""
    held = _TEMPLATES.get(SCHEMA_VERSION)
    if held is None:
        held = sqlite3.connect(":memory:", check_same_thread=False, isolation_level=None)
        held.execute("BEGIN IMMEDIATE")
        for statement in _create_statements(dialect):
            held.execute(statement)
        held.execute("INSERT INTO veil_schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
        held.execute("COMMIT")
        _TEMPLATES[SCHEMA_VERSION] = held
    return held


def _copy_schema(engine: Engine) -> bool:
    """Give the in-memory database of ``engine`` (``open_engine``'s: one shared connection),
    when it is empty, the tables, indexes and version row of a new ledger, by copying the
    pages of :func:`_schema_template` into it with SQLite's online backup — the database the
    statements would make, page for page (~0.1 ms, against ~1 ms for the statements run one
    by one through SQLAlchemy). False, and nothing copied, when it holds something already."""
    raw = engine.raw_connection()
    try:
        target = raw.driver_connection
        if target is None or target.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
            return False  # (a closed connection: the usual path reports it)
        with _TEMPLATE_LOCK:  # built once; one copy at a time out of the shared source
            _schema_template(engine.dialect).backup(target)
        return True
    finally:
        raw.close()


SQLITE_NOTADB = 26  # SQLite's result code for a file that is not a database

_INIT_PY = "veil.Ledger.initialise(URL)"
_INIT_CLI = "veil ledger init --ledger URL"


def _refusal(why: str, fix: str, fix_cli: str) -> LedgerError:
    """A refusal to open a ledger: ``why``, then the fix in Python or in the CLI's words."""
    return LedgerError(f"{why}; {fix}", cli=f"{why}; {fix_cli}")


def _not_a_ledger(where: str, holds: str, *, empty: bool) -> LedgerError:
    why = f"{where} is not a veil ledger: {holds}"
    if empty:  # nothing to lose: an explicit init makes a new ledger of it
        return _refusal(
            why + " (a failed copy or restore leaves this)",
            f"restore the ledger from a backup, or start a new, empty one there with {_INIT_PY}",
            f"restore the ledger from a backup, or start a new, empty one there with {_INIT_CLI}",
        )
    return _refusal(
        why,
        "check the ledger URL (veil keeps its tables in a database of its own or an empty one)",
        "check --ledger (veil keeps its tables in a database of its own or an empty one)",
    )


def _damaged(where: str, holds: str) -> LedgerError:
    why = f"{where} is a damaged veil ledger: {holds}"
    fix = "restore it from a backup; veil will not write to it"
    return _refusal(why, fix, fix)


def prepare_schema(
    engine: Engine, *, memory: bool = False, create: bool = True, init: bool = False
) -> None:
    """Make sure the database of ``engine`` is a veil ledger at :data:`SCHEMA_VERSION`:
    migrate an older one, refuse a newer one, and refuse what is not a ledger.

    A database without veil's version row is made a new ledger only when nothing could be
    lost: an in-memory one (``memory``: ``open_engine``'s; when it holds nothing yet its tables
    are copied from a template made once per process, :func:`_copy_schema`); a PostgreSQL
    database without any of veil's tables, when ``create`` (it may hold other applications'
    tables); a SQLite file without any table, with ``init`` only (a new file is made whole by
    :func:`open_ledger`, so an empty one was not made by veil). Veil tables without the
    version row, or an empty version table, are a damaged ledger: refused, never repaired."""
    if memory and _copy_schema(engine):
        return
    where = f"the database at {_hidden(engine.url)}"
    with engine.begin() as conn:
        postgres = conn.dialect.name == "postgresql"
        if postgres:
            # serialise concurrent first-time setups (DDL is transactional in PostgreSQL)
            conn.execute(text("SELECT pg_advisory_xact_lock(726569)"))
        tables = set(inspect(conn).get_table_names())
        if schema_version.name not in tables:
            ours = sorted(t for t in tables if t.startswith("veil_"))
            if ours:
                raise _damaged(where, f"it holds {', '.join(ours)} but no schema version")
            if not memory:
                if postgres and not (create or init):
                    raise _missing(engine.url)
                if not postgres and not (init and not tables):
                    holds = (
                        f"it holds the tables {', '.join(sorted(tables)[:5])}"
                        + (" …" if len(tables) > 5 else "")
                        + " and none of veil's"
                        if tables
                        else "an empty SQLite database (no tables)"
                    )
                    raise _not_a_ledger(where, holds, empty=not tables)
            metadata.create_all(conn, checkfirst=True)
            conn.execute(insert(schema_version).values(version=SCHEMA_VERSION))
            return
        found = list(conn.execute(select(schema_version.c.version)).scalars())
        if not found:
            raise _damaged(where, "its schema version table is empty")
        version = int(max(found))
        if version > SCHEMA_VERSION:
            raise LedgerError(
                f"this ledger has schema version {version}, newer than this veil understands "
                f"({SCHEMA_VERSION}); upgrade veil"
            )
        if version < SCHEMA_VERSION:
            metadata.create_all(conn, checkfirst=True)  # the tables later versions added
        while version < SCHEMA_VERSION:
            step = MIGRATIONS.get(version + 1)
            if step is None:
                raise LedgerError(
                    f"this ledger has schema version {version} and veil has no migration to "
                    f"version {version + 1}; it cannot be opened by this release"
                )
            step(conn)
            version += 1
            conn.execute(schema_version.update().values(version=version))


def _sqlite_file(parsed: URL) -> str | None:
    """The path of the SQLite file ``parsed`` names (None: PostgreSQL, or in memory)."""
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return str(parsed.database)


def _check_file(path: str, *, init: bool) -> None:
    """Refuse an existing empty file, unless ``init``. (Only its size is read: opening and
    closing a database file would drop every POSIX lock this process's SQLite connections
    hold on it. A file that is not SQLite, SQLite itself refuses: :func:`open_ledger`.)"""
    try:
        size = os.stat(path).st_size
    except OSError as exc:
        raise LedgerError(f"cannot read the ledger file {path!r}: {exc.strerror}") from exc
    if size == 0 and not init:
        raise _not_a_ledger(f"the file {path!r}", "it is empty (0 bytes)", empty=True)


def _create_file(path: str) -> None:
    """Make a new, empty ledger at ``path`` whole: built in a temporary file of the same
    directory (the template's pages, :func:`_schema_template`), then hard-linked into place,
    which fails if ``path`` exists — so a ledger file is never seen half made, and two
    processes creating one at once both open the one that won."""
    directory = os.path.dirname(os.path.abspath(path))
    aside = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    try:  # the mode SQLite gives a file it creates: 0666 less the umask
        os.close(os.open(aside, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    except OSError as exc:
        raise LedgerError(
            f"cannot open the ledger {path!r}: cannot create it there ({exc.strerror})"
        ) from exc
    try:
        target = sqlite3.connect(aside, isolation_level=None)
        try:
            with _TEMPLATE_LOCK:
                _schema_template(_sqlite_dialect()).backup(target)
        finally:
            target.close()
        try:
            os.link(aside, path)
        except FileExistsError:
            pass  # another process made it first: theirs is the ledger
        except OSError as exc:
            raise LedgerError(
                f"cannot open the ledger {path!r}: cannot create it there ({exc.strerror})"
            ) from exc
    finally:
        os.unlink(aside)


def _sqlite_dialect() -> Dialect:
    from sqlalchemy.dialects import sqlite

    return sqlite.dialect()


def _missing(parsed: URL) -> LedgerError:
    """The refusal of a ledger that does not exist (``create=False``)."""
    path = _sqlite_file(parsed)
    if path is not None:
        why = f"no ledger at {path!r}; check the path, or create one by granting a budget: "
        cli = (
            f"veil budget grant --ledger {_hidden(parsed)} --analyst NAME --dataset NAME "
            "--epsilon E"
        )
        return LedgerError(
            f"{why}veil.Ledger({_hidden(parsed)!r}).grant('alice', 'people', "
            f"veil.Budget(epsilon=1)) in Python, or {cli}",
            cli=why + cli,
        )
    why = f"no veil ledger in the database at {_hidden(parsed)}; create one by granting a budget: "
    cli = "veil budget grant --ledger URL --analyst NAME --dataset NAME --epsilon E"
    return LedgerError(
        f"{why}veil.Ledger(URL).grant('alice', 'people', veil.Budget(epsilon=1)) in Python, "
        f"or {cli}",
        cli=why + cli,
    )


def open_ledger(
    url: str | os.PathLike[str], *, create: bool = True, init: bool = False
) -> tuple[Engine, bool]:
    """An engine on the veil ledger at ``url``, its schema ready (:func:`prepare_schema`), and
    whether it is in memory.

    ``create``: a ledger that does not exist yet (no SQLite file; a PostgreSQL database without
    veil's tables) is made; without it, that is a ``LedgerError`` (a mistyped path must not
    become a new, empty ledger). ``init``: an empty SQLite file or database (0 bytes, or no
    tables: a failed copy leaves one) is made a new ledger too — the explicit path. Whatever
    else is not a veil ledger is refused: a file that is not SQLite, foreign tables, veil's
    tables without a schema version, a newer schema. The database failing is a
    :class:`~veil.errors.LedgerUnavailableError`.
    """
    parsed = _parse(url)
    path = _sqlite_file(parsed)
    if path is not None:
        if not os.path.exists(path):
            if not (create or init):
                raise _missing(parsed)
            _create_file(path)
        else:
            _check_file(path, init=init)
    engine, memory = open_engine(url)
    try:
        prepare_schema(engine, memory=memory, create=create, init=init)
    except SQLAlchemyError as exc:
        engine.dispose()
        code = getattr(getattr(exc, "orig", None), "sqlite_errorcode", None)
        if code == SQLITE_NOTADB:
            raise _not_a_ledger(
                f"the file {path!r}", "it is not a SQLite database", empty=False
            ) from exc
        raise unavailable(exc, _hidden(parsed), opening=True) from exc
    except BaseException:
        engine.dispose()
        raise
    return engine, memory


def in_memory(url: str | os.PathLike[str]) -> bool:
    """Whether ``url`` names an in-memory SQLite ledger (gone with the process)."""
    parsed = _parse(url)
    return parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:")


def shown_url(url: str | os.PathLike[str]) -> str:
    """``url`` as messages show it: parsed, its password hidden."""
    return _hidden(_parse(url))


def require_existing(url: str | os.PathLike[str]) -> None:
    """Raise ``LedgerError`` unless a ledger already exists at ``url`` (a SQLite file, or a
    PostgreSQL database that holds veil's tables); in-memory URLs always pass. (Whether what
    exists is a ledger, :func:`open_ledger` checks.)"""
    parsed = _parse(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        path = _sqlite_file(parsed)
        if path is not None and not os.path.exists(path):
            raise _missing(parsed)
        return
    engine, _ = open_engine(url)
    try:
        with engine.connect() as conn:
            found = conn.dialect.has_table(conn, schema_version.name)
    except SQLAlchemyError as exc:  # an unreachable server: the message says why
        raise unavailable(exc, _hidden(parsed), opening=True) from exc
    finally:
        engine.dispose()
    if not found:
        raise _missing(parsed)
