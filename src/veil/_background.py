"""Worker threads for work that can overlap an engine's run (``veil.session``): the caller
submits it, runs its statement (the engines release the interpreter while they read), then
waits for the result.

Up to ``WORKERS`` threads, made as needed (so that a small query's work does not wait behind
a large one's from another thread). They are stopped before the process forks (the child
then starts with no thread of veil's, and Python has no threads to warn about) and made again
when next needed, in the parent as in the child.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["WORKERS", "settle", "submit"]

T = TypeVar("T")

WORKERS = 4

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_pid = 0


def submit(fn: Callable[..., T], *args: object) -> Future[T]:
    """``fn(*args)`` on a worker thread, as a future; run here, at once, when the interpreter
    no longer starts work on threads (at its exit)."""
    global _pool, _pid
    with _lock:
        if _pool is None or _pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="veil-overlap")
            _pid = os.getpid()
        pool = _pool
    try:
        return pool.submit(fn, *args)
    except RuntimeError:  # shutting down: no new work on threads
        done: Future[T] = Future()
        try:
            done.set_result(fn(*args))
        except BaseException as exc:
            done.set_exception(exc)
        return done


def _stop() -> None:
    """Before a fork: the workers finish what they run and stop (made again when needed)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True)


if hasattr(os, "register_at_fork"):  # (not on Windows, which does not fork)
    os.register_at_fork(before=_stop)


def settle(future: Future[Any] | None) -> None:
    """Wait until ``future`` is done, whatever its outcome (a caller that no longer needs
    it must not leave it running: it may be using a source the caller uses next)."""
    if future is not None:
        future.exception()
