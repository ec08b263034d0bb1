"""Cached answers shown again without a session: the service's fast path for repeated queries.

The ledger answers a repeated query from its cache, free. Each step of the session's path to
that answer is a pure function of what the request names and of four facts:

- who asks and the request body (the SQL or plan, ε, δ, bounds, limits, ``consistent``);
- the dataset's catalog entry (its source, privacy unit, bounds, limits, per-query caps);
- the analyst's grant (the default δ of a query that gives none is the grant's, pro rata);
- the data version (the cache key's: the same version means the same rows).

Parsing, the compile rules and the post-processing read no data, no ledger beyond the grant and
no randomness; the cache lookup finds the same row again (answers are never updated nor
deleted). So a worker that has shown a cached answer keeps its JSON body under those facts and,
on the next identical request, re-reads only what can have changed — the key is live (as on
every request), the grant and the catalog entry (one read, which also gives the remaining
budget), the data version — records the cache hit in the ledger's history as the session does,
and answers. It never answers a query that was not answered from the cache before, never spends,
and anything unexpected falls back to the full path, which gives its own answer or refusal.
"""

from __future__ import annotations

import json
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Any

from veil.accounting import records
from veil.accounting.budget import Budget
from veil.accounting.ledger import Ledger, Standing
from veil.catalog import Dataset
from veil.cli_options import budget_json
from veil.service.models import QueryRequest

__all__ = ["HOT_ANSWERS", "HOT_MAX_CELLS", "HotAnswers", "hot_key", "render"]

HOT_ANSWERS = 512  # answers a worker keeps
HOT_MAX_CELLS = 20_000  # larger answers are not kept (the full path answers them, still free)

Key = tuple[str, str, str, str, str]


@dataclass(frozen=True)
class _Shown:
    payload: bytes  # the answer's body as JSON, without "remaining" and "dataset"
    fingerprint: str
    loss: Budget  # what its measurement was charged: the cache key's loss


def render(body: dict[str, Any]) -> bytes:
    """``body`` as JSON, as the service's responses encode it (Starlette's ``JSONResponse``)."""
    return json.dumps(
        body, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")
    ).encode("utf-8")


def hot_key(who: str, standing: Standing, body: QueryRequest, data_version: str) -> Key:
    """The facts a cached answer's body depends on (see the module docstring)."""
    return (
        who,
        standing.spec or "",
        records.loss_key(standing.granted),
        _request(body),
        data_version,
    )


def _request(body: QueryRequest) -> str:
    return body.model_dump_json()


class HotAnswers:
    """The cached answers one worker has shown, by :func:`hot_key` (least recently shown
    forgotten first)."""

    def __init__(self, size: int = HOT_ANSWERS) -> None:
        self._shown: OrderedDict[Key, _Shown] = OrderedDict()
        self._requests: Counter[str] = Counter()  # the request bodies of the keys kept
        self._size = size
        self._lock = threading.Lock()

    def holds(self, body: QueryRequest) -> bool:
        """Whether an answer to this request body (by anyone, on any version) is kept: a hint
        read without the database; :meth:`answer` decides."""
        return _request(body) in self._requests

    def __len__(self) -> int:
        with self._lock:
            return len(self._shown)

    def remember(
        self, key: Key, payload: dict[str, Any], *, fingerprint: str, loss: Budget
    ) -> None:
        """Keep the body of a cached answer just shown (``payload["cached"]`` must be true)."""
        if not payload.get("cached"):
            return  # a first release: its body (cost, cached flag) is not a cache hit's
        rows = payload.get("rows", [])
        if len(rows) * max(1, len(payload.get("columns", []))) > HOT_MAX_CELLS:
            return
        kept = {k: v for k, v in payload.items() if k not in ("remaining", "dataset")}
        encoded = render(kept)
        with self._lock:
            if key not in self._shown:
                self._requests[key[3]] += 1
            self._shown[key] = _Shown(encoded, fingerprint, loss)
            self._shown.move_to_end(key)
            while len(self._shown) > self._size:
                self._forget(next(iter(self._shown)))

    def _forget(self, key: Key) -> None:
        """Drop ``key`` (the lock held)."""
        if self._shown.pop(key, None) is not None:
            self._requests[key[3]] -= 1
            if self._requests[key[3]] <= 0:
                del self._requests[key[3]]

    def answer(
        self, ledger: Ledger, key: Key, who: str, ds: Dataset, standing: Standing
    ) -> bytes | None:
        """The body (JSON) of the cached answer kept under ``key``, its hit recorded in the
        ledger, with the remaining budget ``standing`` read; None if none is kept (or the ledger
        no longer has it). The bytes are those the full path's response would carry: the kept
        part was encoded once as it encodes a body, and the two fresh members come last, as
        they do there."""
        with self._lock:
            shown = self._shown.get(key)
            if shown is not None:
                self._shown.move_to_end(key)
        if shown is None:
            return None
        if not ledger.shown_again(
            who, ds.name, fingerprint=shown.fingerprint, data_version=key[4], loss=shown.loss
        ):
            with self._lock:
                self._forget(key)
            return None
        fresh = render({"remaining": budget_json(standing.remaining), "dataset": ds.name})
        return shown.payload[:-1] + b"," + fresh[1:]
