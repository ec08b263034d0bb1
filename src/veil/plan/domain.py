"""A declared domain as a typed column, and its canonical JSON written a column at a time.

A public key's domain may hold a million values; the fingerprint writes each with its type
(``[["int", 1], ["str", "a"], …]``) and the release places the engine's rows on it. Both are
done here in bulk for the domains that allow it (64-bit ints, strings), with the same result
as value by value, and remembered per domain *object*: a tuple is immutable, so the same
object always holds the same values, whatever they are (``1``, ``True``, ``1.0``, ``0.0`` and
``-0.0`` included) — the memo is never keyed by the values themselves, where ``0.0 == -0.0``
and ``1 == True`` would conflate domains.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from veil.plan.memo import MEMO_SIZE, ByIdentity
from veil.plan.nodes import KeyValue

__all__ = ["MEMO_SIZE", "domain_digest", "domain_json", "int64_values"]

Domain = tuple[KeyValue, ...]

_TEXT = pa.large_string()
_ESCAPED = r'[\x00-\x1f"\\]'
"""What ``json.dumps(..., ensure_ascii=False)`` escapes in a string: a string without these is
written as itself between double quotes."""


def _int64_values(domain: Domain) -> NDArray[np.int64] | None:
    if set(map(type, domain)) != {int}:  # a bool is not an int here: True is its own key
        return None
    try:
        return np.fromiter(domain, dtype=np.int64, count=len(domain))
    except OverflowError:  # beyond 64 bits
        return None


int64_values = ByIdentity(_int64_values)
"""``domain`` as an int64 array when every value is an ``int`` (not a bool) within 64 bits,
else None (remembered per domain object)."""


def _arrow_json(domain: Domain) -> bytes | None:
    """:func:`domain_json` by Arrow kernels, or None for a domain they cannot write exactly."""
    ints = int64_values(domain)
    if ints is not None:  # Arrow writes an int64 as Python does: optional '-', then digits
        values = pc.cast(pa.array(ints), _TEXT)
        head, tail = ',["int",', "]"
    elif set(map(type, domain)) == {str}:
        try:
            values = pa.array(domain, type=_TEXT)
        except UnicodeError:  # a lone surrogate: not UTF-8 (value by value, as before)
            return None
        if pc.any(pc.match_substring_regex(values, _ESCAPED)).as_py():
            return None
        head, tail = ',["str","', '"]'
    else:
        return None
    rows = pc.binary_join_element_wise(
        pa.scalar(head, _TEXT), values, pa.scalar(tail, _TEXT), pa.scalar("", _TEXT)
    )
    # rows: one ',["int",v]' (or ',["str","v"]') per value, back to back in one buffer
    offsets = np.frombuffer(rows.buffers()[1], dtype=np.int64)[rows.offset :]
    data = memoryview(rows.buffers()[2])[int(offsets[0]) + 1 : int(offsets[len(rows)])]
    return b"[" + data + b"]"


def _domain_json(domain: Domain) -> bytes:
    fast = _arrow_json(domain)
    if fast is not None:
        return fast
    typed = [[type(v).__name__, v] for v in domain]
    return json.dumps(typed, separators=(",", ":"), ensure_ascii=False).encode()


domain_json = ByIdentity(_domain_json)
"""The UTF-8 text ``json.dumps([[type(v).__name__, v] for v in domain], separators=(",", ":"),
ensure_ascii=False)``, byte for byte: a domain of 64-bit ints or of strings JSON writes as
they are is written by Arrow a column at a time, any other value by value (remembered per
domain object)."""


def _domain_digest(domain: Domain) -> bytes:
    return hashlib.sha256(domain_json(domain)).digest()


domain_digest = ByIdentity(_domain_digest)
"""The SHA-256 of :func:`domain_json`: equal for two domains exactly when they hold the same
values of the same types in the same order (``1``, ``True`` and ``1.0`` apart, ``0.0`` and
``-0.0`` apart, as the fingerprints tell them) — a memo key where ``==`` on the tuples would
conflate them (remembered per domain object)."""
