"""A small memo keyed by an immutable object's identity (a plan's domain, a tuple).

A declared domain may hold a million values: hashing it, writing its JSON or converting it
costs milliseconds each time, and a plan is hashed and fingerprinted on every query. A tuple
is immutable, so the same object always holds the same values, whatever they are; the memo
is keyed by the object's identity, never by its values (``1``, ``True`` and ``1.0`` are
equal values, and so are ``0.0`` and ``-0.0``). Each entry keeps its object, so its id is
not reused while remembered.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["MEMO_SIZE", "ByIdentity"]

K = TypeVar("K")
T = TypeVar("T")

MEMO_SIZE = 8
"""How many objects each memo remembers (the most recently used)."""


class ByIdentity(Generic[K, T]):
    """``compute(obj)``, remembered for the :data:`MEMO_SIZE` objects last asked about, by
    identity. ``compute`` must depend only on the object's (immutable) contents."""

    def __init__(self, compute: Callable[[K], T]) -> None:
        self._compute = compute
        self._lock = threading.Lock()
        self._found: dict[int, tuple[K, T]] = {}

    def __call__(self, obj: K) -> T:
        with self._lock:
            hit = self._found.pop(id(obj), None)
            if hit is not None and hit[0] is obj:
                self._found[id(obj)] = hit  # most recent last
                return hit[1]
        value = self._compute(obj)
        with self._lock:
            self._found[id(obj)] = (obj, value)
            while len(self._found) > MEMO_SIZE:
                del self._found[next(iter(self._found))]
        return value
