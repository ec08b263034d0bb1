"""A fake engine for tests (like httpx's ``MockTransport``): it records every SQL tree it is
asked to run and answers through a handler — by default an in-memory DuckDB over the given
Arrow tables — or raises the error it was told to raise."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import duckdb
import pyarrow as pa
from sqlglot import exp

from veil.compile.lower import to_sql
from veil.errors import InternalError, SchemaError

__all__ = ["FakeEngine"]

Handler = Callable[[exp.Expression], pa.Table]


class FakeEngine:
    """An :class:`veil.engines.base.Engine` for tests: the whole contract, nothing more.

    ``tables`` are Arrow tables; ``handler`` (optional) answers instead of DuckDB; ``fail`` (if
    set) is raised by ``execute`` after recording the call. ``calls`` lists the trees run,
    ``checked`` the trees given to :meth:`check`; ``closed`` says whether :meth:`close` ran.
    """

    def __init__(
        self,
        tables: Mapping[str, pa.Table],
        *,
        handler: Handler | None = None,
        fail: BaseException | None = None,
        dialect: str = "duckdb",
        version: str = "v1",
    ) -> None:
        self._tables = dict(tables)
        self._handler = handler
        self.fail = fail
        self.version = version
        self.calls: list[exp.Expression] = []
        self.checked: list[exp.Expression] = []
        self.closed = False
        self._dialect = dialect

    @property
    def dialect(self) -> str:
        return self._dialect

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(self._tables)

    def schema(self, table: str) -> pa.Schema:
        if table not in self._tables:
            raise SchemaError(f"unknown table {table!r} (tables: {', '.join(self._tables)})")
        return self._tables[table].schema

    def data_version(self, table: str) -> str:
        self.schema(table)
        return self.version

    def check(self, query: exp.Expression) -> None:
        """Every table the tree reads must be registered; a DuckDB tree is also bound (without
        running it) over the tables' empty schemas, so a type or name error is a
        ``SchemaError`` decided by the schema alone, as on the real engines."""
        self.checked.append(query)
        self._known_tables(query)
        if self._dialect != "duckdb":
            return
        con = duckdb.connect()
        try:
            for name, table in self._tables.items():
                con.register(name, table.schema.empty_table())
            con.sql(to_sql(query, "duckdb"))
        except duckdb.Error as exc:
            raise SchemaError(f"the query does not fit the table's columns: {exc}") from exc
        finally:
            con.close()

    def _known_tables(self, query: exp.Expression) -> None:
        ctes = {cte.alias_or_name for cte in query.find_all(exp.CTE)}
        for table in query.find_all(exp.Table):
            if table.name not in ctes:
                self.schema(table.name)

    def close(self) -> None:
        self.closed = True

    def execute(self, query: exp.Expression) -> pa.Table:
        self.calls.append(query)
        if self.fail is not None:
            raise self.fail
        if self._handler is not None:
            return self._handler(query)
        self._known_tables(query)
        con = duckdb.connect()
        try:
            for name, table in self._tables.items():
                con.register(name, table)
            result: pa.Table = con.sql(to_sql(query, "duckdb")).to_arrow_table()
        except (duckdb.CatalogException, duckdb.BinderException) as exc:
            raise SchemaError(f"unknown table or column: {exc}") from exc
        except duckdb.Error as exc:
            raise InternalError(f"the fake engine's DuckDB failed: {exc}") from exc
        finally:
            con.close()
        return result
