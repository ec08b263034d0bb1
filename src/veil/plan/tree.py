"""Small helpers over a plan chain: find its Aggregate, rebuild it with a replacement, map an
Arrow schema to plan fields."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pyarrow as pa

from veil.errors import UnsupportedQueryError
from veil.plan.nodes import Aggregate, ColumnType, Field, Plan

__all__ = ["aggregate_of", "fields_from_arrow", "is_binary", "is_text", "replace_aggregate"]


def aggregate_of(plan: Plan) -> Aggregate:
    """The one Aggregate node of ``plan``; ``UnsupportedQueryError`` if there is none or
    more than one."""
    found: list[Aggregate] = []
    stack = [plan]
    while stack:
        node = stack.pop()
        if isinstance(node, Aggregate):
            found.append(node)
        stack.extend(node.children)
    if len(found) != 1:
        raise UnsupportedQueryError(
            "a query must have exactly one aggregation (SELECT … FROM table [WHERE …] "
            f"[GROUP BY …]); this plan has {len(found)}"
        )
    return found[0]


def replace_aggregate(plan: Plan, new: Aggregate) -> Plan:
    """``plan`` with its Aggregate node replaced by ``new`` (the nodes above re-validated)."""
    if isinstance(plan, Aggregate):
        return new
    children = plan.children
    if len(children) != 1:
        raise UnsupportedQueryError("this plan has no aggregation to replace")
    node: Any = plan  # every node above the leaf is a dataclass with a ``child`` field
    return cast(Plan, dataclasses.replace(node, child=replace_aggregate(children[0], new)))


def _column_type(t: pa.DataType) -> ColumnType:
    if pa.types.is_dictionary(t):  # a dictionary-encoded column is its values' type
        return _column_type(t.value_type)
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        return "integer"
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return "real"
    if is_text(t):
        return "string"
    if pa.types.is_temporal(t):
        return "temporal"
    if is_binary(t):
        return "binary"
    return "other"


def is_text(t: pa.DataType) -> bool:
    """Whether ``t`` is an Arrow string type (plain, large or view)."""
    view = getattr(pa.types, "is_string_view", None)  # pyarrow ≥ 16
    return bool(
        pa.types.is_string(t) or pa.types.is_large_string(t) or (view is not None and view(t))
    )


def is_binary(t: pa.DataType) -> bool:
    """Whether ``t`` is an Arrow binary type (plain, large, fixed-size or view)."""
    view = getattr(pa.types, "is_binary_view", None)  # pyarrow ≥ 16
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
        or (view is not None and view(t))
    )


def fields_from_arrow(schema: pa.Schema) -> tuple[Field, ...]:
    """Plan fields for an Arrow schema (the engine's ``schema(table)``): each column's name
    and coarse type. The one mapping for the SQL front end, the builder and the catalog: the
    fields are part of the plan's fingerprint (the ledger's cache key), so two front ends
    mapping a type differently would charge one question twice."""
    return tuple(Field(f.name, _column_type(f.type)) for f in schema)
