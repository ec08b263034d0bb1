"""The registry of aggregate kinds: one file per kind in this package.

A kind (:class:`veil.aggregates.base.AggregateKind`) says everything about one released
aggregate — its SQL names, the statistics it reads, its budget-split weights, its estimate, its
error bar and its expected error — and the SQL front end, the builder, the plan, the compiler,
the estimators and ``explain`` all read it from here. Adding an aggregate is adding a file
whose class is decorated with :func:`register`; the registry loads every module of the package
and checks each kind when it is registered, so an incomplete kind fails when veil is imported,
before any plan is built or anything charged.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
from fractions import Fraction
from typing import Any, TypeVar

from veil.aggregates.base import AggregateKind, Call
from veil.errors import InternalError, UnsupportedQueryError

__all__ = ["AggregateKind", "by_sql_node", "kind", "kinds", "register", "supported_sql"]

K = TypeVar("K", bound=type[AggregateKind])

_KINDS: dict[str, AggregateKind] = {}
_NODES: dict[type[Any], AggregateKind] = {}


def register(cls: K) -> K:
    """Register the kind ``cls`` (a class decorator); ``InternalError`` if it is incomplete."""
    if inspect.isabstract(cls):
        missing = ", ".join(sorted(cls.__abstractmethods__))
        raise InternalError(f"aggregate kind {cls.__name__} does not define {missing}")
    instance = cls()
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise InternalError(f"aggregate kind {cls.__name__} needs a name (an identifier)")
    if name in _KINDS:
        raise InternalError(f"two aggregate kinds are called {name!r}")
    if not getattr(cls, "sql", ()):
        raise InternalError(f"aggregate kind {name!r} lists no SQL spelling")
    if (cls.quantile == "fixed") != (cls.fixed_q is not None):
        raise InternalError(f"aggregate kind {name!r}: a fixed quantile needs fixed_q, only it")
    for q in (None, Fraction(1, 2)):
        reads = instance.reads(Call("x", q, 1))
        if not reads or len({r.role for r in reads}) != len(reads):
            raise InternalError(f"aggregate kind {name!r} must read statistics in distinct roles")
    for node in cls.sql_nodes:
        if node in _NODES:
            raise InternalError(f"{node.__name__} is claimed by {_NODES[node].name!r} and {name!r}")
    _KINDS[name] = instance
    for node in cls.sql_nodes:
        _NODES[node] = instance
    return cls


def kinds() -> tuple[AggregateKind, ...]:
    """Every registered kind, in listing order (``rank``, then name)."""
    return tuple(sorted(_KINDS.values(), key=lambda k: (k.rank, k.name)))


def kind(name: str) -> AggregateKind:
    """The kind called ``name``; ``UnsupportedQueryError`` naming the known ones otherwise."""
    found = _KINDS.get(name) if isinstance(name, str) else None
    if found is None:
        close = difflib.get_close_matches(str(name), list(_KINDS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnsupportedQueryError(
            f"aggregate {name!r} is not supported{hint} "
            f"(use one of {', '.join(k.name for k in kinds())})"
        )
    return found


def by_sql_node(node: type[Any]) -> AggregateKind | None:
    """The kind the SQL front end reads a one-column call of sqlglot type ``node`` as."""
    return _NODES.get(node)


def supported_sql() -> str:
    """Every SQL spelling of every kind, for messages (a survey-weighted kind is the weighted
    form of COUNT, SUM or AVG, written with ``weights=``, not in SQL)."""
    return ", ".join(s for k in kinds() if k.weighted == "none" for s in k.sql)


def _load() -> None:
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name != "base":
            importlib.import_module(f"{__name__}.{info.name}")


_load()
