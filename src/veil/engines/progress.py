"""A watcher thread that polls a running query's progress and reports it (engines share it).

:func:`watching` wraps the code that runs the query: it polls ``poll()`` every ``interval``
seconds and turns the engine's raw answers into the :data:`veil.engines.base.Progress`
contract — ``None`` once while unknown, then strictly increasing fractions in ``[0, 1]``, then
``1.0`` after success. It never touches the query: the result and the engine's errors are
whatever the wrapped code returns or raises.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from veil.engines.base import Progress

__all__ = ["POLL_INTERVAL", "watching"]

POLL_INTERVAL = 0.1
"""Seconds between two polls of the engine."""


class _Watcher:
    """Polls ``poll`` on a daemon thread until stopped; reports through ``report``."""

    def __init__(self, poll: Callable[[], float | None], report: Progress, interval: float) -> None:
        self._poll = poll
        self._report = report
        self._interval = interval
        self._stop = threading.Event()
        self._started = False  # something was reported (None or a fraction)
        self._last: float | None = None  # the largest fraction reported
        self.error: Exception | None = None  # raised by ``report``
        self._thread = threading.Thread(target=self._loop, name="veil-progress", daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                raw = self._poll()
            except Exception:  # the engine cannot tell (closed, between statements): unknown
                raw = None
            try:
                self.offer(_fraction(raw))
            except Exception as exc:  # the caller's callback failed: stop reporting
                self.error = exc
                return
            self._stop.wait(self._interval)

    def offer(self, fraction: float | None) -> None:
        """Report ``fraction`` if it is news: the first unknown, or a larger fraction."""
        if fraction is None:
            if not self._started:
                self._started = True
                self._report(None)
            return
        if self._last is None or fraction > self._last:
            self._started = True
            self._last = fraction
            self._report(fraction)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _fraction(raw: float | None) -> float | None:
    """A raw engine answer as a fraction in [0, 1]; negative or NaN means unknown."""
    if raw is None or math.isnan(raw) or raw < 0:
        return None
    return min(1.0, float(raw))


@contextmanager
def watching(
    poll: Callable[[], float | None], report: Progress, *, interval: float = POLL_INTERVAL
) -> Iterator[None]:
    """Report ``poll()``'s fractions to ``report`` while the body runs (the running query).

    ``poll`` returns the fraction done, or ``None`` / a negative number when unknown; it is
    called from a watcher thread and may raise (treated as unknown). On leaving, the thread is
    stopped and joined — also when the body raises, whose exception propagates unchanged. When
    the body succeeded, an exception raised by ``report`` in the thread is raised here, else
    ``report(1.0)`` closes the sequence.
    """
    watcher = _Watcher(poll, report, interval)
    watcher.start()
    try:
        yield
    finally:
        watcher.stop()
    if watcher.error is not None:
        raise watcher.error
    watcher.offer(1.0)
