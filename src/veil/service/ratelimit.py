"""A per-principal token bucket, in each worker process.

Each API key's name has a bucket of ``rate`` tokens refilled at ``rate`` per minute; a request
takes one, and a request that finds none is refused with 429 and ``Retry-After`` (whole seconds
until a token is back). The buckets live in the process: with N uvicorn workers a principal
may get up to N × ``rate`` per minute in the worst case (each worker its own bucket), so set
``rate_limit`` to the per-worker share you want. The limit protects the service's capacity;
privacy does not rest on it (the budget does).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

__all__ = ["RateLimiter"]


class RateLimiter:
    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._capacity = float(per_minute)
        self._refill = per_minute / 60.0  # tokens per second
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # name -> (tokens, at)

    def take(self, name: str) -> int | None:
        """Take a token for ``name``: None if granted, else the seconds to wait."""
        with self._lock:
            t = self._clock()
            tokens, at = self._buckets.get(name, (self._capacity, t))
            tokens = min(self._capacity, tokens + (t - at) * self._refill)
            if tokens >= 1:
                self._buckets[name] = (tokens - 1, t)
                return None
            self._buckets[name] = (tokens, t)
            return max(1, math.ceil((1 - tokens) / self._refill))
