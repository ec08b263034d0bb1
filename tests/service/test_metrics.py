"""The service's metrics (veil.service.metrics): an app's own in memory, and the files of a
server's worker processes in prometheus_client's multiprocess mode, summed at scrape."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from service.server import Deployment, serve
from service_support import SQL, Service, start
from veil.errors import InternalError
from veil.service.metrics import MULTIPROC_DIR_ENV, Metrics, render_directory

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _series(text: str) -> Series:
    """Every sample of an exposition, by name and sorted labels (the format parsed, not read)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _bucket(le: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return ("veil_request_duration_seconds_bucket", (("le", le),))


def test_an_apps_metrics_count_every_kind_without_a_pid() -> None:
    m = Metrics()
    assert m.directory is None  # no PROMETHEUS_MULTIPROC_DIR in the tests: in memory
    for _ in range(3):
        m.request("/v1/query", 200, 0.02)
        m.query("people", cached=True)
    m.query("people", cached=False)
    m.request("/v1/query", 200, 20.0)
    m.refusal("people", "bounds")
    m.alert(object())
    text = m.render(None)
    got = _series(text)
    assert got[("veil_requests_total", (("route", "/v1/query"), ("status", "200")))] == 4
    assert got[("veil_queries_total", (("dataset", "people"),))] == 4
    assert got[("veil_cache_hits_total", (("dataset", "people"),))] == 3
    assert got[("veil_refusals_total", (("dataset", "people"), ("problem", "bounds")))] == 1
    assert got[("veil_budget_alerts_total", ())] == 1
    assert got[_bucket("0.01")] == 0
    assert got[_bucket("0.025")] == 3
    assert got[_bucket("10.0")] == 3
    assert got[_bucket("+Inf")] == 4
    assert got[("veil_request_duration_seconds_count", ())] == 4
    assert got[("veil_request_duration_seconds_sum", ())] == pytest.approx(20.06)
    assert got[("veil_workers", ())] == 1
    assert got[("veil_charging_stopped", ())] == 0
    assert "pid=" not in text
    assert Metrics().render(None).count("veil_queries_total{") == 0  # another app's own
    m.close()


def test_charging_stopped_counts_once_and_is_taken_back_on_close() -> None:
    m = Metrics()
    m.charging_stopped(True)
    m.charging_stopped(True)  # the next period's check: still one
    assert _series(m.render(None))[("veil_charging_stopped", ())] == 1
    m.charging_stopped(False)
    assert _series(m.render(None))[("veil_charging_stopped", ())] == 0
    m.charging_stopped(True)
    m.close()
    m.close()
    after = _series(m.render(None))
    assert after[("veil_charging_stopped", ())] == 0
    assert after[("veil_workers", ())] == 0


def test_a_directory_named_after_prometheus_client_was_loaded_is_a_bug(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # this process loaded prometheus_client without the variable: its values live in memory,
    # so a directory named now would never be written (veil serve names it before the import)
    monkeypatch.setenv(MULTIPROC_DIR_ENV, str(tmp_path))
    with pytest.raises(InternalError, match="PROMETHEUS_MULTIPROC_DIR was set or removed after"):
        Metrics()
    assert list(tmp_path.iterdir()) == []


_WORKER = """
import sys
from veil.errors import InternalError
from veil.service.metrics import Metrics

m = Metrics()
for _ in range(int(sys.argv[1])):
    m.request("/v1/query", 200, 0.02)
    m.query("people", cached=False)
m.charging_stopped(sys.argv[2] == "stopped")
print("ready", flush=True)
if sys.argv[3] == "close":
    m.close()
elif sys.argv[3] == "wait":
    sys.stdin.read()  # until the test closes the pipe
    m.close()
# "die": exits without closing, as a killed worker would
"""


@pytest.mark.system  # worker processes
def test_a_servers_workers_are_summed_and_dead_ones_leave_the_live_gauges(
    tmp_path: Path,
) -> None:
    env = {**os.environ, MULTIPROC_DIR_ENV: str(tmp_path)}

    def worker(n: int, stopped: str, end: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(n), stopped, end],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    live = worker(1, "stopped", "wait")
    assert live.stdout is not None
    assert live.stdout.readline() == "ready\n"
    for n, stopped, end in ((2, "stopped", "die"), (4, "charging", "close")):
        done = worker(n, stopped, end)
        assert done.communicate(timeout=120)[0] == "ready\n"
    text = render_directory(tmp_path, None)
    got = _series(text)
    assert got[("veil_requests_total", (("route", "/v1/query"), ("status", "200")))] == 7
    assert got[("veil_queries_total", (("dataset", "people"),))] == 7
    assert got[_bucket("0.025")] == 7
    assert got[("veil_workers", ())] == 1  # the one that died no longer serves
    assert got[("veil_charging_stopped", ())] == 1  # the live one's, not the dead one's
    assert "pid=" not in text
    live.communicate("", timeout=120)
    after = _series(render_directory(tmp_path, None))
    assert after[("veil_requests_total", (("route", "/v1/query"), ("status", "200")))] == 7
    # every worker gone: their live gauges went with them (absent, read as none)
    assert after.get(("veil_workers", ()), 0) == 0
    assert after.get(("veil_charging_stopped", ()), 0) == 0
    assert (
        sorted(p.name.split("_")[0] for p in tmp_path.glob("*.db"))
        == ["counter"] * 3 + ["histogram"] * 3
    )


@pytest.mark.system  # veil serve
@pytest.mark.parametrize("workers", [1, 2])
def test_veil_serve_removes_its_metrics_directory_when_it_stops(
    tmp_path: Path, workers: int
) -> None:
    deployment = Deployment(tmp_path / "owner")
    deployment.add_table("people", 50)
    deployment.write()
    deployment.add_key("root", "admin")
    temp = tmp_path / "temp"
    temp.mkdir()
    with serve(deployment.config, workers=workers, env={"TMPDIR": str(temp)}) as server:
        with server.client(deployment.keys["root"]) as c:
            got = _series(c.get("/metrics").text)
        assert got[("veil_workers", ())] == workers
        (directory,) = temp.glob("veil-metrics-*")
        assert any(directory.glob("counter_*.db"))
    assert list(temp.iterdir()) == []  # SIGTERM: shut down cleanly, the directory removed


def test_charging_stopped_by_the_ledger_check_shows_in_the_metrics(tmp_path: Path) -> None:
    gen = start(tmp_path)
    service: Service = next(gen)
    try:
        root = service.headers("root")
        r = service.client.post(
            "/v1/query",
            json={"dataset": "people", "sql": SQL, "epsilon": 0.5},
            headers=service.headers("alice"),
        )
        assert r.status_code == 200
        before = _series(service.client.get("/metrics", headers=root).text)
        assert before[("veil_charging_stopped", ())] == 0
        db = sqlite3.connect(tmp_path / "ledger.db")
        with db:
            db.execute("UPDATE veil_budgets SET spent_epsilon = '0' WHERE analyst = 'alice'")
        db.close()
        service.client.app.state.veil_upkeep.run_once()  # what the period's thread does
        after = _series(service.client.get("/metrics", headers=root).text)
        assert after[("veil_charging_stopped", ())] == 1
    finally:
        for _ in gen:
            pass
