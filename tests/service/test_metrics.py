"""The metrics files the workers of one server share (veil.service.metrics_files) and the
exposition summed from them (veil.service.metrics)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from service_support import SQL, Service, start
from veil.service.metrics import Metrics
from veil.service.metrics_files import ValueFile, read_all


def test_a_value_file_is_read_back_exactly_across_growth(tmp_path: Path) -> None:
    values = ValueFile(tmp_path)
    expected = {}
    for i in range(3000):  # keys of every padding, past the first 64 KiB
        key = "k" * (i % 13) + str(i)
        values.add(key, i + 0.5)
        expected[key] = i + 0.5
    values.add("k1", 2)  # an existing key: updated in place
    expected["k1"] += 2
    values.set("gauge", 7)
    expected["gauge"] = 7
    (only,) = read_all(tmp_path)
    assert only.values == expected
    assert only.live
    values.close()


def test_a_closed_files_counters_stay_and_it_is_no_longer_live(tmp_path: Path) -> None:
    gone, here = ValueFile(tmp_path), ValueFile(tmp_path)
    gone.add("requests", 3)
    here.add("requests", 4)
    gone.close()
    gone.add("requests", 100)  # after close: nothing (a query thread finishing late)
    read = read_all(tmp_path)
    assert sorted((f.values["requests"], f.live) for f in read) == [(3.0, False), (4.0, True)]
    here.close()


def test_the_exposition_sums_every_workers_counters_without_a_pid(tmp_path: Path) -> None:
    workers = [Metrics(tmp_path), Metrics(tmp_path)]
    for n, m in enumerate(workers, start=1):
        for _ in range(n):
            m.request("/v1/query", 200, 0.02)
            m.query("people", cached=True)
        m.refusal("people", "bounds")
    workers[1].request("/v1/query", 200, 20.0)
    text = workers[0].render(None)
    assert text == workers[1].render(None)  # whichever worker is scraped
    lines = set(text.splitlines())
    assert 'veil_requests_total{route="/v1/query",status="200"} 4' in lines
    assert 'veil_queries_total{dataset="people"} 3' in lines
    assert 'veil_cache_hits_total{dataset="people"} 3' in lines
    assert 'veil_refusals_total{dataset="people",problem="bounds"} 2' in lines
    assert 'veil_request_duration_seconds_bucket{le="0.01"} 0' in lines
    assert 'veil_request_duration_seconds_bucket{le="0.025"} 3' in lines
    assert 'veil_request_duration_seconds_bucket{le="10.0"} 3' in lines
    assert 'veil_request_duration_seconds_bucket{le="+Inf"} 4' in lines
    assert "veil_request_duration_seconds_count 4" in lines
    assert "veil_workers 2" in lines
    assert "pid=" not in text
    workers[1].close()  # an exited worker: its counts stay, it no longer serves
    after = set(workers[0].render(None).splitlines())
    assert 'veil_requests_total{route="/v1/query",status="200"} 4' in after
    assert "veil_workers 1" in after
    workers[0].close()


def test_only_live_workers_count_as_stopped(tmp_path: Path) -> None:
    a, b = Metrics(tmp_path), Metrics(tmp_path)
    b.charging_stopped(True)
    assert "veil_charging_stopped 1" in a.render(None).splitlines()
    b.close()
    assert "veil_charging_stopped 0" in a.render(None).splitlines()
    a.close()


def test_a_metrics_without_a_directory_cleans_its_own(tmp_path: Path) -> None:
    m = Metrics()
    own = m.directory
    assert own.is_dir()
    assert own != tmp_path
    m.close()
    assert not own.exists()


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
        assert "veil_charging_stopped 0" in service.client.get("/metrics", headers=root).text
        db = sqlite3.connect(tmp_path / "ledger.db")
        with db:
            db.execute("UPDATE veil_budgets SET spent_epsilon = '0' WHERE analyst = 'alice'")
        db.close()
        service.client.app.state.veil_upkeep.run_once()  # what the period's thread does
        text = service.client.get("/metrics", headers=root).text
        assert "veil_charging_stopped 1" in text.splitlines()
    finally:
        for _ in gen:
            pass
