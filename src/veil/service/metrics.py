"""``/metrics``: a Prometheus text exposition of the whole server, whichever worker answers the
scrape, by prometheus_client. It names every dataset with its spend, so it needs an
administrator's key.

Three kinds of series:

- **counters of every worker, summed** (``veil_requests_total``, ``veil_queries_total``,
  ``veil_refusals_total``, ``veil_cache_hits_total``, ``veil_budget_alerts_total``,
  ``veil_request_duration_seconds``). ``veil serve`` makes a new directory per server and names
  it by :data:`MULTIPROC_DIR_ENV` before prometheus_client is first imported, so its workers run
  in prometheus_client's multiprocess mode: each writes its own files there, and a scrape sums
  them all (a ``MultiProcessCollector`` in a new registry), those of workers that have exited
  included, so the counters never go back. No ``pid`` label.
- **gauges of the live workers** (``veil_workers``, ``veil_charging_stopped``), both
  ``multiprocess_mode="livesum"``: how many workers serve, and how many of them stopped charging
  because the ledger failed its integrity check (:mod:`veil.service.upkeep`; alert on
  ``veil_charging_stopped > 0``). A worker takes them back when it closes; one that dies
  outright leaves its lock file free, and the next scrape marks it dead (``mark_process_dead``).
- **from the ledger** (``veil_budget_spent_epsilon``, ``veil_budget_spent_rho``,
  ``veil_alerts``): a collector reading the shared database at scrape time (its budget and
  alert rows, never its events or answers), exact whichever worker answers.

An app made in a process without :data:`MULTIPROC_DIR_ENV` (a test, an app served by other
means) keeps its metrics in memory, its own.
"""

from __future__ import annotations

import fcntl
import functools
import os
from collections import Counter as Tally
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import values as prometheus_values
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from veil.errors import InternalError

if TYPE_CHECKING:
    from veil.accounting.ledger import Ledger

__all__ = ["BUCKETS", "MULTIPROC_DIR_ENV", "Metrics", "render_directory"]

MULTIPROC_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's variable naming the server's metrics directory (set by ``veil serve``
before its workers start)."""

BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Families:
    """The metric objects of an app in memory, or of a process in multiprocess mode."""

    def __init__(self) -> None:
        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, labels, registry=None)

        self.requests = counter(
            "veil_requests", "HTTP requests answered, by route and status", ("route", "status")
        )
        self.queries = counter("veil_queries", "queries answered, by dataset", ("dataset",))
        self.cache_hits = counter(
            "veil_cache_hits", "queries answered from the ledger cache", ("dataset",)
        )
        self.refusals = counter(
            "veil_refusals", "queries refused, by dataset and problem", ("dataset", "problem")
        )
        self.alerts = counter("veil_budget_alerts", "budget alerts the workers delivered")
        self.duration = Histogram(
            "veil_request_duration_seconds", "request latency", buckets=BUCKETS, registry=None
        )
        self.workers = Gauge(
            "veil_workers",
            "worker processes serving now",
            multiprocess_mode="livesum",
            registry=None,
        )
        self.stopped = Gauge(
            "veil_charging_stopped",
            "workers that stopped charging: the ledger failed its integrity check "
            "(veil ledger check)",
            multiprocess_mode="livesum",
            registry=None,
        )

    def all(self) -> tuple[Collector, ...]:
        return (self.requests, self.queries, self.cache_hits, self.refusals, self.alerts,
                self.duration, self.workers, self.stopped)  # fmt: skip


@functools.cache
def _process_families(directory: str) -> _Families:
    """This process's metric objects in multiprocess mode: one set, whichever app records, so
    that two values never overwrite one key of the process's files."""
    _hold_liveness(Path(directory))
    return _Families()


@functools.cache
def _hold_liveness(directory: Path) -> int:
    """Lock ``live_<pid>.lock`` for as long as this process lives (the kernel drops the lock
    however it dies), after clearing live gauges a dead process of the same pid left behind."""
    fd = os.open(directory / f"live_{os.getpid()}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    mark_process_dead(os.getpid(), str(directory))  # type: ignore[no-untyped-call]
    return fd


def _mark_dead_processes(directory: Path) -> None:
    """``mark_process_dead`` for every process whose live gauges remain but whose lock is free
    (it died without closing): its counters stay, its gauges go. The lock is held while its
    files go, so a new process of the same pid waits for them to be gone before it writes."""
    pids = {path.stem.rsplit("_", 1)[-1] for path in directory.glob("gauge_live*_*.db")}
    for pid in sorted(pids):
        fd = os.open(directory / f"live_{pid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue  # its process lives
        try:
            mark_process_dead(int(pid), str(directory))  # type: ignore[no-untyped-call]
        finally:
            os.close(fd)  # releases the lock


class _LedgerCollector(Collector):
    """Budget spent per dataset and alerts recorded, summed over analysts, from the ledger
    (two reads of its budget and alert rows, never of its events or answers)."""

    def __init__(self, ledger: Ledger) -> None:
        self._ledger = ledger

    def collect(self) -> Iterator[GaugeMetricFamily]:
        spent = self._ledger.spent_by_dataset()
        alerts = Tally(dataset for _a, dataset, *_ in self._ledger.alerts())
        eps = GaugeMetricFamily(
            "veil_budget_spent_epsilon",
            "ε spent per dataset, all analysts (ledger)",
            labels=["dataset"],
        )
        rho = GaugeMetricFamily(
            "veil_budget_spent_rho",
            "ρ spent per dataset, all analysts (ledger)",
            labels=["dataset"],
        )
        for ds in sorted(spent):
            eps.add_metric([ds], float(spent[ds][0]))
            rho.add_metric([ds], float(spent[ds][1]))
        count = GaugeMetricFamily(
            "veil_alerts", "budget alerts recorded per dataset (ledger)", labels=["dataset"]
        )
        for ds in sorted(alerts):
            count.add_metric([ds], alerts[ds])
        yield from (eps, rho, count)


class Metrics:
    """This app's recorder: in the server's files when the process started with
    :data:`MULTIPROC_DIR_ENV` (prometheus_client's multiprocess mode), else in memory."""

    def __init__(self) -> None:
        directory = os.environ.get(MULTIPROC_DIR_ENV)
        multiprocess = prometheus_values.ValueClass is not prometheus_values.MutexValue
        if bool(directory) != multiprocess:
            raise InternalError(
                f"{MULTIPROC_DIR_ENV} was set or removed after prometheus_client was imported; "
                "this is a bug: veil serve sets it before its workers start"
            )
        self.directory = Path(directory) if directory else None
        self._families = _process_families(directory) if directory else _Families()
        self._families.workers.inc()
        self._stopped = False
        self._open = True

    def request(self, route: str, status: int, seconds: float) -> None:
        self._families.requests.labels(route, str(status)).inc()
        self._families.duration.observe(seconds)

    def query(self, dataset: str, *, cached: bool) -> None:
        self._families.queries.labels(dataset).inc()
        if cached:
            self._families.cache_hits.labels(dataset).inc()

    def refusal(self, dataset: str, slug: str) -> None:
        self._families.refusals.labels(dataset, slug).inc()

    def alert(self, _alert: object) -> None:
        self._families.alerts.inc()

    def charging_stopped(self, stopped: bool) -> None:
        """Whether this app's ledger stopped charging (its integrity check failed)."""
        if self._open and stopped != self._stopped:
            self._families.stopped.inc(1 if stopped else -1)
            self._stopped = stopped

    def close(self) -> None:
        """Take this app back from the live gauges (its counters stay in the server's totals)."""
        if self._open:
            self.charging_stopped(False)
            self._families.workers.dec()
            self._open = False

    def render(self, ledger: Ledger | None) -> str:
        """The exposition text of every worker, with the series read from ``ledger`` unless it
        is None."""
        if self.directory is not None:
            return render_directory(self.directory, ledger)
        return _exposition(self._families.all(), ledger)


def render_directory(directory: Path, ledger: Ledger | None) -> str:
    """The exposition text of every process's files in ``directory`` (after marking dead the
    processes that died without closing), with the series read from ``ledger`` unless None."""
    _mark_dead_processes(directory)
    files = MultiProcessCollector(None, str(directory))  # type: ignore[no-untyped-call]
    return _exposition((files,), ledger)


def _exposition(collectors: tuple[Collector, ...], ledger: Ledger | None) -> str:
    registry = CollectorRegistry()
    for collector in collectors:
        registry.register(collector)
    if ledger is not None:
        registry.register(_LedgerCollector(ledger))
    return generate_latest(registry).decode("utf-8")
