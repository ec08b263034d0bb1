"""``/metrics``: a Prometheus text exposition (format 0.0.4) of the whole server, whichever
worker answers the scrape. It names every dataset with its spend, so it needs an
administrator's key.

Three kinds of series:

- **counters of every worker, summed** (``veil_requests_total``, ``veil_queries_total``,
  ``veil_refusals_total``, ``veil_cache_hits_total``, ``veil_budget_alerts_total``,
  ``veil_request_duration_seconds``): each worker adds to its own file in the server's metrics
  directory (:mod:`veil.service.metrics_files`; ``veil serve`` makes a new one per server and
  names it to the workers by :data:`METRICS_DIR_ENV`), and a scrape sums every file, those of
  workers that have exited included, so the counters never go back. No ``pid`` label.
- **gauges of the live workers** (``veil_workers``, ``veil_charging_stopped``): how many
  workers serve, and how many of them stopped charging because the ledger failed its integrity
  check (:mod:`veil.service.upkeep`; alert on ``veil_charging_stopped > 0``).
- **from the ledger** (``veil_budget_spent_epsilon``, ``veil_budget_spent_rho``,
  ``veil_alerts``): read from the shared database at scrape time (its budget and alert rows,
  never its events or answers), exact whichever worker answers.

An app made without :data:`METRICS_DIR_ENV` (in a test, say) keeps its files in a temporary
directory of its own, removed when it closes.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING

from veil.service.metrics_files import ValueFile, read_all

if TYPE_CHECKING:
    from veil.accounting.ledger import Ledger

__all__ = ["BUCKETS", "METRICS_DIR_ENV", "Metrics"]

METRICS_DIR_ENV = "VEIL_METRICS_DIR"
"""The environment variable naming the server's metrics directory (set by ``veil serve``)."""

BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

Labels = tuple[tuple[str, str], ...]

# the counter families: name → (help, label names), in the order they are shown
_COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "veil_requests_total": ("HTTP requests answered, by route and status", ("route", "status")),
    "veil_queries_total": ("queries answered, by dataset", ("dataset",)),
    "veil_cache_hits_total": ("queries answered from the ledger cache", ("dataset",)),
    "veil_refusals_total": ("queries refused, by dataset and problem", ("dataset", "problem")),
    "veil_budget_alerts_total": ("budget alerts the workers delivered", ()),
}
_HISTOGRAM = "veil_request_duration_seconds"
_STOPPED = "veil_charging_stopped"


@functools.lru_cache(maxsize=4096)
def _key(name: str, labels: Labels = ()) -> str:
    return json.dumps([name, [list(pair) for pair in labels]], ensure_ascii=False)


def _unkey(key: str) -> tuple[str, Labels]:
    name, labels = json.loads(key)
    return str(name), tuple((str(k), str(v)) for k, v in labels)


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return "{" + inner + "}" if inner else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)


class Metrics:
    """This worker's counters and gauges, kept in its file of the server's metrics directory
    (``directory``; default: :data:`METRICS_DIR_ENV`'s, else a temporary one of its own)."""

    def __init__(self, directory: Path | None = None) -> None:
        self._own: Path | None = None
        if directory is None and os.environ.get(METRICS_DIR_ENV):
            directory = Path(os.environ[METRICS_DIR_ENV])
        if directory is None:
            directory = self._own = Path(tempfile.mkdtemp(prefix="veil-metrics-"))
        self.directory = directory
        self._file = ValueFile(directory)
        self._file.set(_key(_STOPPED), 0.0)

    def request(self, route: str, status: int, seconds: float) -> None:
        self._file.add(_key("veil_requests_total", (("route", route), ("status", str(status)))), 1)
        bound = next((b for b in BUCKETS if seconds <= b), None)
        le = "+Inf" if bound is None else repr(bound)
        self._file.add(_key(f"{_HISTOGRAM}_bucket", (("le", le),)), 1)
        self._file.add(_key(f"{_HISTOGRAM}_sum"), seconds)

    def query(self, dataset: str, *, cached: bool) -> None:
        self._file.add(_key("veil_queries_total", (("dataset", dataset),)), 1)
        if cached:
            self._file.add(_key("veil_cache_hits_total", (("dataset", dataset),)), 1)

    def refusal(self, dataset: str, slug: str) -> None:
        self._file.add(_key("veil_refusals_total", (("dataset", dataset), ("problem", slug))), 1)

    def alert(self, _alert: object) -> None:
        self._file.add(_key("veil_budget_alerts_total"), 1)

    def charging_stopped(self, stopped: bool) -> None:
        """Whether this worker's ledger stopped charging (its integrity check failed)."""
        self._file.set(_key(_STOPPED), 1.0 if stopped else 0.0)

    def close(self) -> None:
        """Release this worker's file (its counters stay in the server's totals)."""
        self._file.close()
        if self._own is not None:
            shutil.rmtree(self._own, ignore_errors=True)

    def render(self, ledger: Ledger | None) -> str:
        """The exposition text of every worker's files, with the series read from ``ledger``
        (two reads of its budget and alert rows, never of its events or answers) unless it is
        None."""
        counters: defaultdict[str, float] = defaultdict(float)
        live = stopped = 0
        for worker in read_all(self.directory):
            for key, value in worker.values.items():
                if _unkey(key)[0] == _STOPPED:
                    stopped += int(worker.live and value > 0)
                else:
                    counters[key] += value
            live += int(worker.live)
        series: defaultdict[str, list[tuple[Labels, float]]] = defaultdict(list)
        for key, value in counters.items():
            name, labels = _unkey(key)
            series[name].append((labels, value))
        out: list[str] = []

        def family(name: str, kind: str, doc: str) -> None:
            out.append(f"# HELP {name} {doc}")
            out.append(f"# TYPE {name} {kind}")

        for name, (doc, names) in _COUNTERS.items():
            family(name, "counter", doc)
            if not names:
                total = sum(v for _l, v in series.get(name, []))
                out.append(f"{name} {_number(total)}")
            for labels, value in sorted(series.get(name, [])):
                out.append(f"{name}{_labels(labels)} {_number(value)}")
        family(_HISTOGRAM, "histogram", "request latency")
        per_bucket = {labels[0][1]: v for labels, v in series.get(f"{_HISTOGRAM}_bucket", [])}
        running = 0.0
        for bound in (*BUCKETS, None):
            le = "+Inf" if bound is None else repr(bound)
            running += per_bucket.get(le, 0.0)
            out.append(f"{_HISTOGRAM}_bucket{_labels([('le', le)])} {_number(running)}")
        total_s = sum(v for _l, v in series.get(f"{_HISTOGRAM}_sum", []))
        out.append(f"{_HISTOGRAM}_sum {total_s!r}")
        out.append(f"{_HISTOGRAM}_count {_number(running)}")
        family("veil_workers", "gauge", "worker processes serving now")
        out.append(f"veil_workers {live}")
        family(
            _STOPPED,
            "gauge",
            "workers that stopped charging: the ledger failed its integrity check "
            "(veil ledger check)",
        )
        out.append(f"{_STOPPED} {stopped}")
        if ledger is not None:
            alerts = Counter(dataset for _a, dataset, *_ in ledger.alerts())
            out.extend(_ledger_series(ledger.spent_by_dataset(), alerts))
        return "\n".join(out) + "\n"


def _ledger_series(
    spent: Mapping[str, tuple[Fraction, Fraction]], alerts: Mapping[str, int]
) -> list[str]:
    """Budget spent per dataset and alerts recorded, summed over analysts, from the ledger."""
    lines: list[str] = []
    lines.append("# HELP veil_budget_spent_epsilon ε spent per dataset, all analysts (ledger)")
    lines.append("# TYPE veil_budget_spent_epsilon gauge")
    for ds in sorted(spent):
        eps = float(spent[ds][0])
        lines.append(f"veil_budget_spent_epsilon{_labels([('dataset', ds)])} {eps!r}")
    lines.append("# HELP veil_budget_spent_rho ρ spent per dataset, all analysts (ledger)")
    lines.append("# TYPE veil_budget_spent_rho gauge")
    for ds in sorted(spent):
        rho = float(spent[ds][1])
        lines.append(f"veil_budget_spent_rho{_labels([('dataset', ds)])} {rho!r}")
    lines.append("# HELP veil_alerts budget alerts recorded per dataset (ledger)")
    lines.append("# TYPE veil_alerts gauge")
    for ds in sorted(alerts):
        lines.append(f"veil_alerts{_labels([('dataset', ds)])} {alerts[ds]}")
    return lines
