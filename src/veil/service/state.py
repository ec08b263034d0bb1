"""What one worker process holds: the catalog (and its ledger), the principals, the jobs, the
metrics, the rate limiter and the thread pool queries run in; and the request's caller."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ParamSpec, TypeVar

from fastapi import Request

from veil.accounting.ledger import Ledger, Standing
from veil.catalog import Catalog, Dataset, parse_entry
from veil.engines.base import Engine
from veil.service import logs
from veil.service.config import ServiceConfig
from veil.service.hot import HotAnswers
from veil.service.jobs import JobStore
from veil.service.metrics import Metrics
from veil.service.principals import Principal, Principals
from veil.service.problems import Problem
from veil.service.ratelimit import RateLimiter
from veil.service.reads import LocalReads

__all__ = [
    "ServiceState",
    "admin",
    "arrival",
    "authenticated",
    "bearer",
    "bearer_key",
    "caller",
    "state_of",
]

T = TypeVar("T")
P = ParamSpec("P")

QUERY_THREADS = 16
IDLE_ENGINES = QUERY_THREADS  # per dataset: engines kept open (a query thread holds one at most)


class EnginePool:
    """Engines on the catalog's sources, lent to one request at a time (a request never shares
    its engine's connection with another); returned engines are kept for the next request of
    the same dataset, as long as its catalog entry is unchanged (a changed entry opens new
    ones). Opening a DuckDB engine costs more than answering a cached query, so a server
    without this pool spends most of its time opening engines."""

    def __init__(self, catalog: Catalog, idle: int = IDLE_ENGINES) -> None:
        self._catalog = catalog
        self._idle: dict[str, list[tuple[Dataset, Engine]]] = {}
        self._keep = idle
        self._lock = threading.Lock()

    @contextmanager
    def borrow(self, ds: Dataset) -> Iterator[Engine]:
        """An engine on ``ds`` for the caller alone until the block ends."""
        engine: Engine | None = None
        with self._lock:
            idle = self._idle.get(ds.name, [])
            while idle and engine is None:
                kept_ds, kept = idle.pop()
                if kept_ds is ds or kept_ds == ds:  # the same catalog entry (parsed once)
                    engine = kept
                else:
                    kept.close()
        if engine is None:
            engine = self._catalog.open_engine(ds.name)
        healthy = False
        try:
            yield engine
            healthy = True
        finally:
            with self._lock:
                idle = self._idle.setdefault(ds.name, [])
                if healthy and len(idle) < self._keep:
                    idle.append((ds, engine))
                    engine = None
            if engine is not None:
                engine.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for engines in idle.values():
            for _, engine in engines:
                engine.close()


class ContextPool(ThreadPoolExecutor):
    """A thread pool whose tasks run in a copy of the submitter's context, so that what a
    query thread logs carries its request's fields (:mod:`veil.service.logs`)."""

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        context = contextvars.copy_context()
        return super().submit(lambda: context.run(fn, *args, **kwargs))


def _pool() -> ThreadPoolExecutor:
    return ContextPool(QUERY_THREADS, thread_name_prefix="veil-query")


@dataclass
class ServiceState:
    config: ServiceConfig
    catalog: Catalog
    principals: Principals
    jobs: JobStore
    limiter: RateLimiter
    metrics: Metrics = field(default_factory=Metrics)
    pool: ThreadPoolExecutor = field(default_factory=_pool)
    engines: EnginePool = field(init=False)
    hot: HotAnswers = field(default_factory=HotAnswers)
    reads: LocalReads | None = field(init=False)

    def __post_init__(self) -> None:
        self.engines = EnginePool(self.catalog)
        # the same database holds the principals and the ledger (the service's config.ledger)
        engine = self.principals.engine
        self.reads = LocalReads(engine) if LocalReads.usable(engine) else None

    @property
    def ledger_reads_are_local(self) -> bool:
        """Whether reading the ledger is a local, lock-free file read (SQLite in WAL mode), short
        enough to do on the event loop; PostgreSQL reads are round trips, done in a thread."""
        return self.ledger.url.startswith("sqlite")

    @property
    def ledger(self) -> Ledger:
        return self.catalog.ledger

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.engines.close()
        if self.reads is not None:
            self.reads.close()
        self.principals.close()
        self.catalog.ledger.close()
        self.metrics.close()

    def authenticate(self, key: str) -> Principal | None:
        """The live principal whose key is ``key``, or None (unknown, revoked, malformed)."""
        return (self.reads or self.principals).authenticate(key)

    def granted_dataset(self, who: Principal, name: str) -> Dataset:
        """The catalog dataset ``name`` if ``who`` holds a grant on it; otherwise the same
        ``not-found`` problem whether it exists or not (no enumeration)."""
        return self.standing(who, name)[0]

    def standing(self, who: Principal, name: str) -> tuple[Dataset, Standing]:
        """The catalog dataset ``name`` and ``who``'s grant on it, in one read; the same
        ``not-found`` problem without a grant or without such a dataset (no enumeration)."""
        logs.note(dataset=name)
        reads = self.reads
        standing = (reads or self.ledger).standing(who.name, name)
        if standing is None or standing.spec is None:
            raise Problem("not-found", "no such dataset")
        return parse_entry(standing.spec), standing

    async def run(self, fn: Callable[[], T]) -> T:
        """``fn()`` in the query thread pool (the event loop stays free)."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn)


def state_of(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.veil
    return state


def arrival(request: Request) -> float:
    """When the request arrived (``time.monotonic()``), set by the middleware."""
    value = request.scope.get("veil_arrival")
    return float(value) if isinstance(value, float) else time.monotonic()


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


_UNAUTHORIZED = (
    "send a live API key as `Authorization: Bearer <key>` (an administrator creates one with "
    "`veil admin analyst add NAME`)"
)


def caller(request: Request) -> Principal:
    """The authenticated principal of ``request`` (a dependency); 401 without a live key,
    429 past its rate limit."""
    return authenticated(request, _key(request))


async def bearer_key(request: Request) -> str:
    """The API key ``request`` carries (a dependency that reads no database: the query route
    checks the key in the same hand-over to a query thread as the query); 401 without one."""
    return _key(request)


def _key(request: Request) -> str:
    key = bearer(request)
    if key is None:
        raise Problem("unauthorized", _UNAUTHORIZED)
    return key


def authenticated(request: Request, key: str) -> Principal:
    """The live principal whose key is ``key`` (401 otherwise), within its rate limit (429
    past it); a database read."""
    state = state_of(request)
    who = state.authenticate(key)
    if who is None:
        raise Problem("unauthorized", _UNAUTHORIZED)
    wait = state.limiter.take(who.name)
    if wait is not None:
        raise Problem(
            "rate-limited",
            f"more than {state.config.limits.rate_limit} requests per minute; retry in {wait} s",
            headers={"Retry-After": str(wait)},
        )
    request.scope["veil_principal"] = who.name
    logs.note(analyst=who.name)
    return who


def admin(request: Request) -> Principal:
    """The caller, who must be an administrator (403 otherwise)."""
    who = caller(request)
    if not who.is_admin:
        raise Problem("forbidden", "this endpoint needs an administrator's key")
    return who
