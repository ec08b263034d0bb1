"""The cached measurement of one aggregation, by column: what the ledger charges for and caches.

A :class:`Measured` holds the released groups' identities and noisy integer statistics as
columns (lists, or numpy arrays straight from the bulk release); the per-group form
(:attr:`Measured.groups`, one key tuple and one dict per group) is built only when read.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from veil.errors import InternalError
from veil.plan.nodes import KeyValue

__all__ = ["FORMAT", "PRODUCT_FORMAT", "Column", "Key", "Measured", "pylist"]

Key = tuple[KeyValue, ...]
# a column: a list, or a numpy array (int64; object for Python ints beyond 64 bits)
Column = NDArray[Any] | list[Any]
FORMAT = 2  # of Measured's JSON (2: by column; 1, by group, is no longer served)
PRODUCT_FORMAT = 3  # FORMAT with the keys as {"product": shape}: every index of a product


def pylist(column: Column) -> list[Any]:
    """``column`` as a list of Python values (numpy's ``tolist`` gives Python ints)."""
    return column.tolist() if isinstance(column, np.ndarray) else list(column)


def _ints(values: Sequence[Any]) -> Column:
    """A cached statistic's values as integers (None kept where a group lacks it): an int64
    array when every value fits, else a list of Python ints."""
    try:
        return np.array(values, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):  # a None, or beyond 64 bits
        return [None if v is None else int(v) for v in values]


def _product_shape(keys: Sequence[Column], size: int) -> list[int] | None:
    """The shape of a product of key spaces when ``keys`` hold every index of it, in product
    order (the last key fastest, as ``itertools.product`` and ``np.unravel_index``): the
    columns of a fully released product of public keys. None for any other columns."""
    if not keys or not size:
        return None
    columns: list[NDArray[np.int64]] = []
    for c in keys:
        if isinstance(c, np.ndarray):
            if c.dtype != np.int64:
                return None
            columns.append(c)
        elif all(type(v) is int for v in c):  # not a bool, not a str of digits
            try:
                columns.append(np.array(c, dtype=np.int64))
            except OverflowError:
                return None
        else:
            return None
    shape = [int(c[-1]) + 1 for c in columns]  # the product's last group: every last index
    if min(shape) < 1 or math.prod(shape) != size:
        return None
    every = np.unravel_index(np.arange(size, dtype=np.int64), shape)
    if all(np.array_equal(c, e) for c, e in zip(columns, every, strict=True)):
        return shape
    return None


class Measured:
    """The released groups of one aggregation, in release order, each with its noisy integer
    statistics (one per measurement; a quantile's is the chosen candidate's index).

    ``keys``: one column per group key (the groups' identities, ``veil.release.keys.
    group_keys``: a public key's index, another key's decoded value); ``stats``: one column per
    statistic, None where a group lacks it; ``size``: the number of groups; ``private`` is
    False when the noise came from a caller-supplied source. ``groups`` is the per-group form,
    built when first read. Immutable; equal when the JSON forms are.
    """

    __slots__ = ("_groups", "_keys", "_private", "_size", "_stats")

    def __init__(
        self, groups: Sequence[tuple[Key, Mapping[str, int]]] = (), private: bool = True
    ) -> None:
        rows = tuple(groups)
        width = len(rows[0][0]) if rows else 0
        names = dict.fromkeys(itertools.chain.from_iterable(s for _, s in rows))
        self._size = len(rows)
        self._keys: tuple[Column, ...] = tuple([k[j] for k, _ in rows] for j in range(width))
        self._stats: dict[str, Column] = {n: [s.get(n) for _, s in rows] for n in names}
        self._private = bool(private)
        self._groups: tuple[tuple[Key, Mapping[str, int]], ...] | None = rows

    @classmethod
    def of_columns(
        cls,
        size: int,
        keys: Sequence[Column],
        stats: Mapping[str, Column],
        private: bool = True,
    ) -> Measured:
        """The measurement of ``size`` groups given by column (each column ``size`` long)."""
        if any(len(c) != size for c in (*keys, *stats.values())):
            raise InternalError("a column of the measurement is not one value per group")
        out = cls.__new__(cls)
        out._size = size
        out._keys = tuple(keys)
        out._stats = dict(stats)
        out._private = bool(private)
        out._groups = None
        return out

    @property
    def size(self) -> int:
        return self._size

    @property
    def keys(self) -> tuple[Column, ...]:
        return self._keys

    @property
    def stats(self) -> Mapping[str, Column]:
        return self._stats

    @property
    def private(self) -> bool:
        return self._private

    @property
    def groups(self) -> tuple[tuple[Key, Mapping[str, int]], ...]:
        """Each group's identity and statistics (a statistic it lacks is absent)."""
        groups = self._groups
        if groups is None:
            size = self._size
            keys: list[Key] = (
                list(zip(*(pylist(c) for c in self._keys), strict=True))
                if self._keys
                else [()] * size
            )
            names = list(self._stats)
            lists = [pylist(self._stats[n]) for n in names]
            stats: list[dict[str, int]]
            if not names:
                stats = [{} for _ in range(size)]
            elif any(None in values for values in lists):
                stats = [
                    {n: v for n, v in zip(names, row, strict=True) if v is not None}
                    for row in zip(*lists, strict=True)
                ]
            else:
                stats = [dict(zip(names, row, strict=True)) for row in zip(*lists, strict=True)]
            groups = tuple(zip(keys, stats, strict=True))
            object.__setattr__(self, "_groups", groups)
        return groups

    def __setattr__(self, name: str, value: Any) -> None:
        if name in Measured.__slots__ and not hasattr(self, name):  # set once, in construction
            object.__setattr__(self, name, value)
            return
        raise AttributeError(f"a Measured is immutable (cannot set {name!r})")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Measured):
            return NotImplemented
        return self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Measured({self.groups!r}, private={self._private!r})"

    def to_json(self) -> dict[str, Any]:
        """The measurement by column (the form the ledger caches): ``keys``, one list per
        group key; ``stats``, one list per statistic (null where a group lacks it); ``rows``,
        the number of groups. When the keys are every index of a product of key spaces in
        product order (every public key released), ``keys`` is ``{"product": shape}`` instead
        and the form is ``PRODUCT_FORMAT`` (a release that cannot read it serves nothing)."""
        size = self._size
        shape = _product_shape(self._keys, size)
        if shape is not None:  # every index of a product (public keys): its shape says them
            return {
                "veil_measured": PRODUCT_FORMAT,
                "rows": size,
                "keys": {"product": shape},
                "stats": {n: pylist(c) for n, c in self._stats.items()},
                "private": self._private,
            }
        return {
            "veil_measured": FORMAT,
            "rows": size,
            "keys": [pylist(c) for c in self._keys] if size else [],
            "stats": {n: pylist(c) for n, c in self._stats.items()} if size else {},
            "private": self._private,
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Measured | None:
        """The measurement cached as ``d`` (:meth:`to_json`'s form, ``FORMAT`` or
        ``PRODUCT_FORMAT``), or None for any other form (an older release's cached answer —
        FORMAT 1, by group — or columns that are not one value per group: not served)."""
        form = d.get("veil_measured")
        if form not in (FORMAT, PRODUCT_FORMAT):
            return None
        rows = int(d["rows"])
        keys: list[Column]
        if form == PRODUCT_FORMAT and isinstance(d["keys"], Mapping):
            shape = [int(n) for n in d["keys"]["product"]]
            if not shape or min(shape) < 1 or math.prod(shape) != rows:
                return None
            keys = list(np.unravel_index(np.arange(rows, dtype=np.int64), shape))
        else:
            keys = [list(c) for c in d["keys"]]
        stats = {str(name): _ints(values) for name, values in d["stats"].items()}
        if any(len(c) != rows for c in (*keys, *stats.values())):
            return None
        return Measured.of_columns(rows, keys, stats, bool(d.get("private", True)))
