"""The cached measurement of one aggregation, by column: what the ledger charges for and caches.

A :class:`Measured` holds the released groups' identities and noisy integer statistics as
columns (lists, or numpy arrays straight from the bulk release); the per-group form
(:attr:`Measured.groups`, one key tuple and one dict per group) is built only when read.

Its JSON form (:meth:`Measured.to_json`, which the ledger stores as text) comes in three
versions, each still read:

- ``FORMAT`` 2: ``{"veil_measured": 2, "rows": n, "keys": [column, …], "stats": {name:
  column, …}, "private": bool}``, every column a JSON list of ``n`` values (a statistic's
  ``null`` where a group lacks it).
- ``PRODUCT_FORMAT`` 3: FORMAT 2 with ``"keys": {"product": shape}`` when the key columns are
  every index of a product of key spaces in product order (every public key released).
- ``PACKED_FORMAT`` 4: FORMAT 2 or 3 where a column of at least :data:`PACKED_ROWS` values,
  each an ``int`` (not a bool, not ``null``) within 64 bits, is written packed:
  ``{"int": w, "base64": text}`` — the values as ``w``-byte two's-complement little-endian
  integers back to back (``w`` the narrowest of 1, 2, 4 and 8 bytes that holds the column's
  least and greatest values), in base64 (RFC 4648, padded): about a third of a JSON list's
  size for small counts, and far faster to write. The packing is exact (the same integers come
  back) and decided by the values alone, so equal measurements have equal forms; shorter
  columns stay lists, readable in the ledger's export. A form is written as 4 only when a
  column is packed, so a release that reads 2 and 3 but not 4 still serves every answer
  without a packed column (and serves none with one: a miss, never a wrong answer).
"""

from __future__ import annotations

import binascii
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from veil.errors import InternalError
from veil.plan.nodes import KeyValue

__all__ = [
    "FORMAT",
    "PACKED_FORMAT",
    "PACKED_ROWS",
    "PRODUCT_FORMAT",
    "Column",
    "Key",
    "Measured",
    "pylist",
]

Key = tuple[KeyValue, ...]
# a column: a list, or a numpy array (int64; object for Python ints beyond 64 bits)
Column = NDArray[Any] | list[Any]
FORMAT = 2  # of Measured's JSON (2: by column; 1, by group, is no longer served)
PRODUCT_FORMAT = 3  # FORMAT with the keys as {"product": shape}: every index of a product
PACKED_FORMAT = 4  # FORMAT or PRODUCT_FORMAT with long integer columns packed (module docstring)
PACKED_ROWS = 1024
"""The fewest values a column has to be written packed (``PACKED_FORMAT``)."""
_WIDTHS = (1, 2, 4, 8)  # bytes per packed value


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


def _packed(column: Column) -> dict[str, Any] | None:
    """``column`` packed (``{"int": w, "base64": text}``, see the module docstring) when it
    has at least :data:`PACKED_ROWS` values, each an ``int`` within 64 bits; else None."""
    if len(column) < PACKED_ROWS:
        return None
    if isinstance(column, np.ndarray) and column.dtype == np.int64:
        values: NDArray[np.int64] = column
    else:  # a list, or an array of another type: by its Python values, as a list's
        listed = pylist(column)
        if not all(type(v) is int for v in listed):  # not a bool, not None
            return None
        try:
            values = np.array(listed, dtype=np.int64)
        except OverflowError:  # beyond 64 bits
            return None
    low, high = int(values.min()), int(values.max())
    width = next(w for w in _WIDTHS if -(1 << (8 * w - 1)) <= low and high < 1 << (8 * w - 1))
    data = values.astype(f"<i{width}").tobytes()
    return {"int": width, "base64": binascii.b2a_base64(data, newline=False).decode("ascii")}


def _unpacked(form: Mapping[str, Any], rows: int) -> NDArray[np.int64] | None:
    """The int64 column ``form`` (:func:`_packed`'s) packs, or None when it is not one of
    ``rows`` values of a width it may have (a form this release does not read)."""
    width, text = form.get("int"), form.get("base64")
    if type(width) is not int or width not in _WIDTHS or not isinstance(text, str):
        return None
    try:
        data = binascii.a2b_base64(text.encode("ascii"), strict_mode=True)
    except (UnicodeEncodeError, binascii.Error):
        return None
    if len(data) != rows * width:
        return None
    return np.frombuffer(data, dtype=f"<i{width}").astype(np.int64)


def _written(column: Column) -> tuple[Any, bool]:
    """``column`` as its JSON form writes it, and whether packed."""
    packed = _packed(column)
    return (pylist(column), False) if packed is None else (packed, True)


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
        """The measurement by column (the form the ledger caches; see the module docstring):
        ``keys``, one list per group key; ``stats``, one list per statistic (null where a
        group lacks it); ``rows``, the number of groups. When the keys are every index of a
        product of key spaces in product order (every public key released), ``keys`` is
        ``{"product": shape}`` instead and the form is ``PRODUCT_FORMAT``; a column of at
        least ``PACKED_ROWS`` 64-bit ints is packed, and the form is then ``PACKED_FORMAT``
        (a release that cannot read a form serves nothing from it)."""
        size = self._size
        shape = _product_shape(self._keys, size)
        packs = False
        keys: Any
        if shape is not None:  # every index of a product (public keys): its shape says them
            keys = {"product": shape}
        else:
            keys = []
            for c in self._keys if size else ():
                written, packed = _written(c)
                keys.append(written)
                packs |= packed
        stats: dict[str, Any] = {}
        for name, c in self._stats.items() if size else ():
            stats[name], packed = _written(c)
            packs |= packed
        form = PACKED_FORMAT if packs else FORMAT if shape is None else PRODUCT_FORMAT
        return {
            "veil_measured": form,
            "rows": size,
            "keys": keys,
            "stats": stats,
            "private": self._private,
        }

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Measured | None:
        """The measurement cached as ``d`` (:meth:`to_json`'s form: ``FORMAT``,
        ``PRODUCT_FORMAT`` or ``PACKED_FORMAT``), or None for any other form (an older
        release's cached answer — FORMAT 1, by group — columns that are not one value per
        group, or a packed column this release does not read: not served)."""
        form = d.get("veil_measured")
        if form not in (FORMAT, PRODUCT_FORMAT, PACKED_FORMAT):
            return None
        rows = int(d["rows"])
        keys: list[Column]
        if form != FORMAT and isinstance(d["keys"], Mapping):
            shape = [int(n) for n in d["keys"]["product"]]
            if not shape or min(shape) < 1 or math.prod(shape) != rows:
                return None
            keys = list(np.unravel_index(np.arange(rows, dtype=np.int64), shape))
        else:
            keys = []
            for c in d["keys"]:
                column = _read(c, rows, form, list)
                if column is None:
                    return None
                keys.append(column)
        stats: dict[str, Column] = {}
        for name, values in d["stats"].items():
            column = _read(values, rows, form, _ints)
            if column is None:
                return None
            stats[str(name)] = column
        if any(len(c) != rows for c in (*keys, *stats.values())):
            return None
        return Measured.of_columns(rows, keys, stats, bool(d.get("private", True)))


def _read(
    column: Any, rows: int, form: object, listed: Callable[[Sequence[Any]], Column]
) -> Column | None:
    """A column of a cached form: ``listed`` of a JSON list, or a packed column's int64
    values (``PACKED_FORMAT`` only); None for a packed column this release does not read."""
    if isinstance(column, Mapping):
        return _unpacked(column, rows) if form == PACKED_FORMAT else None
    return listed(column)
