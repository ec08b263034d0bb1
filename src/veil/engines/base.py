"""The one narrow interface every engine implements.

An engine holds the private tables, runs a sqlglot tree in its own dialect and returns a small
Arrow table of *exact* aggregates. It never adds noise and never decides what is released: the
session does (DESIGN §3). Tests use a fake engine that implements the same protocol.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import pyarrow as pa
from sqlglot import exp

__all__ = ["Engine"]


@runtime_checkable
class Engine(Protocol):
    """Runs SQL trees against private tables."""

    @property
    def dialect(self) -> str:
        """The sqlglot dialect name the tree is generated in (``"duckdb"``, ``"spark"``)."""
        ...

    def schema(self, table: str) -> pa.Schema:
        """The Arrow schema of a registered table; raises ``SchemaError`` if it is unknown.

        Reading a schema reads no private values.
        """
        ...

    def data_version(self, table: str) -> str:
        """A string that changes whenever the table's contents may have changed (cache key)."""
        ...

    def execute(self, query: exp.Expression) -> pa.Table:
        """Run ``query`` (generated in :attr:`dialect`, unsupported constructs raising) and
        return its result as an Arrow table."""
        ...
