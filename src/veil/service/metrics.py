"""``/metrics``: a small hand-written Prometheus text exposition (format 0.0.4).

Two kinds of series:

- **per process** (``veil_requests_total``, ``veil_queries_total``, ``veil_refusals_total``,
  ``veil_cache_hits_total``, ``veil_budget_alerts_total``,
  ``veil_request_duration_seconds``): counters and a latency histogram kept in the worker that
  answers the scrape, labelled with its ``pid``. With several uvicorn workers a scrape reaches
  one of them, so these are a sample of the service, not its total; sum over ``pid`` what
  several scrapes returned, or run one worker per port behind the proxy and scrape each.
- **from the ledger** (``veil_budget_spent_epsilon``, ``veil_budget_spent_rho``,
  ``veil_alerts``): read from the shared database at scrape time, so every worker reports the
  same, exact values.
"""

from __future__ import annotations

import os
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from veil.accounting.ledger import Ledger

__all__ = ["BUCKETS", "Metrics"]

BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return "{" + inner + "}" if inner else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """The counters and the latency histogram of this process (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = str(os.getpid())
        self.requests: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.queries: defaultdict[str, int] = defaultdict(int)
        self.refusals: defaultdict[tuple[str, str], int] = defaultdict(int)
        self.cache_hits: defaultdict[str, int] = defaultdict(int)
        self.alerts = 0
        self._counts = [0] * (len(BUCKETS) + 1)
        self._sum = 0.0

    def request(self, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(route, str(status))] += 1
            i = next((i for i, b in enumerate(BUCKETS) if seconds <= b), len(BUCKETS))
            self._counts[i] += 1
            self._sum += seconds

    def query(self, dataset: str, *, cached: bool) -> None:
        with self._lock:
            self.queries[dataset] += 1
            if cached:
                self.cache_hits[dataset] += 1

    def refusal(self, dataset: str, slug: str) -> None:
        with self._lock:
            self.refusals[(dataset, slug)] += 1

    def alert(self, _alert: object) -> None:
        with self._lock:
            self.alerts += 1

    def render(self, ledger: Ledger | None) -> str:
        """The exposition text, with the series read from ``ledger`` (two reads of its budget
        and alert rows, never of its events or answers) unless it is None."""
        pid = ("pid", self._pid)
        out: list[str] = []

        def family(name: str, kind: str, doc: str) -> None:
            out.append(f"# HELP {name} {doc}")
            out.append(f"# TYPE {name} {kind}")

        with self._lock:
            family("veil_requests_total", "counter", "HTTP requests answered, by route and status")
            for (route, status), n in sorted(self.requests.items()):
                out.append(
                    f"veil_requests_total{_labels([pid, ('route', route), ('status', status)])} {n}"
                )
            family("veil_queries_total", "counter", "queries answered, by dataset")
            for ds, n in sorted(self.queries.items()):
                out.append(f"veil_queries_total{_labels([pid, ('dataset', ds)])} {n}")
            family("veil_cache_hits_total", "counter", "queries answered from the ledger cache")
            for ds, n in sorted(self.cache_hits.items()):
                out.append(f"veil_cache_hits_total{_labels([pid, ('dataset', ds)])} {n}")
            family("veil_refusals_total", "counter", "queries refused, by dataset and problem")
            for (ds, slug), n in sorted(self.refusals.items()):
                labels = _labels([pid, ("dataset", ds), ("problem", slug)])
                out.append(f"veil_refusals_total{labels} {n}")
            family("veil_budget_alerts_total", "counter", "budget alerts this process delivered")
            out.append(f"veil_budget_alerts_total{_labels([pid])} {self.alerts}")
            family("veil_request_duration_seconds", "histogram", "request latency")
            running = 0
            for bound, n in zip((*BUCKETS, float("inf")), self._counts, strict=True):
                running += n
                le = "+Inf" if bound == float("inf") else repr(bound)
                out.append(
                    f"veil_request_duration_seconds_bucket{_labels([pid, ('le', le)])} {running}"
                )
            out.append(f"veil_request_duration_seconds_sum{_labels([pid])} {self._sum!r}")
            out.append(f"veil_request_duration_seconds_count{_labels([pid])} {running}")
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
