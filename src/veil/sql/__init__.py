"""veil's SQL front end: a documented DP subset of SQL, parsed with sqlglot into a plan."""

from __future__ import annotations

from veil.sql.parser import Schemas, parse, parse_query

__all__ = ["Schemas", "parse", "parse_query"]
