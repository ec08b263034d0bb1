"""The service as real processes: uvicorn with two workers on loopback, one shared ledger.

- 64 concurrent clients race for one analyst's budget, and for one dataset-wide cap shared by
  eight analysts: the number of answers is exactly budget / cost, and what the ledger holds as
  charged never exceeds the grant or the cap (SQLite and PostgreSQL ledgers).
- A server SIGKILLed while a query runs (after its reservation): on restart the ledger is
  consistent and the reservation stays charged.
- An analyst who asks to widen the owner's bounds or limits, or to change the privacy unit,
  gets a problem document and pays nothing.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest

import veil
from service.server import Deployment, Server, postgres_ledger, serve
from veil.accounting.records import Record

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CLIENTS = 64
COST = Fraction(1, 10)
GRANT = Fraction(1)  # alice's budget on "solo": 10 queries
CAP = Fraction(2)  # the total on "shared" across 8 analysts granted 1 each: 20 queries
SHARERS = [f"bob{i}" for i in range(8)]
PROBLEM = "application/problem+json"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def ledger_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('ledger') / 'veil-ledger.db'}"
    else:
        with postgres_ledger() as url:
            yield url


@pytest.fixture(scope="module")
def deployment(ledger_url: str, tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    d = Deployment(tmp_path_factory.mktemp("deploy"), ledger=ledger_url)
    # a query never turns into a job here, and 64 requests at once stay under the rate limit
    d.service = {"query_timeout_s": 240, "rate_limit": 100_000}
    d.add_table("solo", 2000, seed=1)
    d.add_table("shared", 2000, seed=2, total_epsilon=float(CAP))
    d.write()
    d.add_key("alice", cli=True)
    d.grant("alice", "solo", float(GRANT))
    for name in SHARERS:
        d.add_key(name)
        d.grant(name, "shared", 1.0)
    return d


@pytest.fixture(scope="module")
def server(deployment: Deployment) -> Iterator[Server]:
    with serve(deployment.config, workers=2) as s:
        assert len(s.worker_pids()) == 2
        yield s


def _race(server: Server, jobs: list[tuple[str, dict[str, Any]]]) -> list[httpx.Response]:
    """Send each (key, body) to POST /v1/query from its own thread and connection, all
    released at once."""
    barrier = threading.Barrier(len(jobs))
    out: list[httpx.Response | BaseException] = [RuntimeError("not run")] * len(jobs)

    def one(i: int, key: str, body: dict[str, Any]) -> None:
        try:
            with server.client(key, timeout=240) as client:
                # each connection opens after the start line: one opened before it could sit
                # idle past the server's 5 s keep-alive on a loaded machine and be closed
                barrier.wait(60)
                out[i] = client.post("/v1/query", json=body)
        except BaseException as exc:  # reported below, with the others
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i, *job)) for i, job in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(280)
    failed = [r for r in out if not isinstance(r, httpx.Response)]
    assert not failed, failed[:3]
    return [r for r in out if isinstance(r, httpx.Response)]


def _count(dataset: str, i: int) -> dict[str, Any]:
    """A query of its own (a fingerprint no other client shares: no cache hit)."""
    return {
        "dataset": dataset,
        "sql": f"SELECT COUNT(*) AS n FROM {dataset} WHERE age >= {i}",
        "epsilon": str(COST),
    }


def _charges(ledger: veil.Ledger, analyst: str, dataset: str) -> Counter[str | None]:
    return Counter(r.status for r in ledger.history(analyst, dataset) if r.event == "charge")


def _outcomes(responses: list[httpx.Response]) -> Counter[tuple[int, str]]:
    return Counter(
        (r.status_code, "ok" if r.status_code == 200 else str(r.json().get("type")))
        for r in responses
    )


def test_64_clients_on_two_workers_spend_one_budget_exactly_once(
    server: Server, deployment: Deployment
) -> None:
    responses = _race(
        server, [(deployment.keys["alice"], _count("solo", i)) for i in range(CLIENTS)]
    )
    answered = GRANT / COST  # 10
    assert _outcomes(responses) == {
        (200, "ok"): answered,
        (403, "urn:veil:problem:budget-exhausted"): CLIENTS - answered,
    }
    refused = [r for r in responses if r.status_code != 200]
    assert all(r.headers["content-type"].startswith(PROBLEM) for r in refused)
    with veil.Ledger(deployment.url) as ledger:
        spent = ledger.check("alice", "solo")  # the running sums agree with the records
        assert spent.epsilon == GRANT
        assert ledger.remaining("alice", "solo").eps == 0
        assert _charges(ledger, "alice", "solo") == {"committed": answered}
        costs = [r.loss.eps for r in ledger.history("alice", "solo") if r.event == "charge"]
        assert sum(costs) == GRANT
    # every answer carried its own cost and was never a cache hit
    bodies = [r.json() for r in responses if r.status_code == 200]
    assert all(not b["cached"] and b["cost"]["exact"]["epsilon"] == "1/10" for b in bodies)


def test_64_clients_of_eight_analysts_never_pass_the_datasets_total(
    server: Server, deployment: Deployment
) -> None:
    jobs = [
        (deployment.keys[SHARERS[i % len(SHARERS)]], _count("shared", i)) for i in range(CLIENTS)
    ]
    responses = _race(server, jobs)
    answered = CAP / COST  # 20: each analyst alone could pay for 8 of their 8
    outcomes = _outcomes(responses)
    assert outcomes == {
        (200, "ok"): answered,
        (403, "urn:veil:problem:budget-exhausted"): CLIENTS - answered,
    }
    with veil.Ledger(deployment.url) as ledger:
        cap = ledger.dataset_cap("shared")
        assert cap is not None
        total, left = cap
        assert total.eps == CAP
        assert left.eps == 0
        committed = Fraction(0)
        for name in SHARERS:
            spent = ledger.check(name, "shared")
            assert spent.epsilon <= 1
            charges = _charges(ledger, name, "shared")
            assert set(charges) <= {"committed"}
            committed += charges["committed"] * COST
        assert committed == CAP


def test_an_analyst_cannot_widen_what_the_owner_set_and_pays_nothing(
    server: Server, deployment: Deployment
) -> None:
    name = "carol"
    deployment.add_key(name)
    deployment.grant(name, "solo", 1.0)
    base = {"dataset": "solo", "sql": "SELECT SUM(income) AS s FROM solo", "epsilon": "0.5"}
    attempts: list[tuple[dict[str, Any], str, str]] = [
        ({"bounds": {"income": [0, 2_000_000]}}, "bounds", "widen the owner's"),
        ({"bounds": {"income": [-1, 1000]}}, "bounds", "widen the owner's"),
        ({"bounds": {"user_id": [0, 10]}}, "bounds", "declared no bounds for 'user_id'"),
        ({"max_groups": 2}, "invalid-argument", "max_groups=2 raises the owner's limit of 1"),
        ({"max_rows_per_group": 5}, "invalid-argument", "raises the owner's limit of 1"),
        ({"privacy_unit": "state"}, "invalid-argument", "set by its data owner"),
        ({"privacy_unit": None}, "invalid-argument", "set by its data owner"),
        ({"epsilon": "2"}, "invalid-argument", "above the largest cost of one query"),
    ]
    with server.client(deployment.keys[name]) as client:
        for extra, slug, words in attempts:
            for path in ("/v1/query", "/v1/explain"):
                r = client.post(path, json={**base, **extra})
                assert r.status_code == 400, (path, extra, r.text)
                assert r.headers["content-type"].startswith(PROBLEM)
                problem = r.json()
                assert problem["type"] == f"urn:veil:problem:{slug}", (path, extra, problem)
                assert problem["status"] == 400
                assert words in problem["detail"], (path, extra, problem)
        budget = client.get("/v1/budget").json()["budgets"]
        assert budget == [
            {
                "dataset": "solo",
                "granted": budget[0]["granted"],
                "remaining": budget[0]["granted"],
                "used": 0.0,
            }
        ]
    with veil.Ledger(deployment.url) as ledger:
        assert ledger.check(name, "solo").epsilon == 0
        assert [r.event for r in ledger.history(name, "solo")] == ["grant"]


# -------------------------------------------------------------------------- SIGKILL


SLOW_ROWS = 1_000_000
SLOW_SQL = "SELECT state, COUNT(*) AS n, SUM(income) AS s FROM big GROUP BY state"


@pytest.fixture(scope="module")
def slow_deployment(ledger_url: str, tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    d = Deployment(tmp_path_factory.mktemp("slow"), ledger=ledger_url)
    d.service = {"query_timeout_s": 240}
    # a large table bounded per user (two rows of two groups each): seconds between the
    # reservation and the commit
    bounding = {"max_groups": 2, "max_rows_per_group": 2}
    d.add_table("big", SLOW_ROWS, seed=3, users=SLOW_ROWS // 4, total_epsilon=5.0, **bounding)
    d.write()
    d.add_key("dave")
    d.grant("dave", "big", 1.0)
    return d


def _wait_reserved(url: str, within_s: float) -> Record:
    deadline = time.monotonic() + within_s
    with veil.Ledger(url) as ledger:
        while time.monotonic() < deadline:
            found = [
                r
                for r in ledger.history("dave", "big")
                if r.event == "charge" and r.status == "reserved"
            ]
            if found:
                return found[0]
            time.sleep(0.02)
    raise AssertionError(f"no reservation within {within_s} s")


def test_a_server_killed_during_a_query_keeps_the_reservation_charged(
    slow_deployment: Deployment,
) -> None:
    d = slow_deployment
    answer: list[httpx.Response | BaseException] = []
    with serve(d.config, workers=2) as server:
        workers = server.worker_pids()
        assert len(workers) == 2

        def ask() -> None:
            try:
                with server.client(d.keys["dave"], timeout=120) as client:
                    body = {"dataset": "big", "sql": SLOW_SQL, "epsilon": "0.1"}
                    answer.append(client.post("/v1/query", json=body))
            except BaseException as exc:
                answer.append(exc)

        asking = threading.Thread(target=ask)
        asking.start()
        charge = _wait_reserved(d.url, 60)
        server.kill()  # kill -9 of the server and both workers, mid-query
        asking.join(30)
        assert len(answer) == 1
        assert isinstance(answer[0], httpx.TransportError), answer
        assert all(not Path(f"/proc/{pid}").exists() or _zombie(pid) for pid in workers)
    with veil.Ledger(d.url) as ledger:
        spent = ledger.check("dave", "big")  # consistent: the records sum to the stored sums
        assert spent.epsilon == COST  # the reservation is counted in what is spent
        assert ledger.remaining("dave", "big").eps == 1 - COST
        [after] = [r for r in ledger.history("dave", "big") if r.id == charge.id]
        assert after.status == "reserved"
        cap = ledger.dataset_cap("big")
        assert cap is not None
        assert cap[1].eps == 5 - COST
    # a restarted server on the same ledger still counts it, and serves on
    with serve(d.config, workers=2) as server, server.client(d.keys["dave"]) as client:
        budget = client.get("/v1/budget").json()["budgets"]
        assert [b["remaining"]["exact"]["epsilon"] for b in budget] == ["9/10"]
        history = client.get("/v1/history", params={"dataset": "big"}).json()["history"]
        assert [h["status"] for h in history if h["event"] == "charge"] == ["reserved"]
        r = client.post(
            "/v1/query",
            json={"dataset": "big", "sql": "SELECT COUNT(*) AS n FROM big", "epsilon": "0.1"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["remaining"]["exact"]["epsilon"] == "4/5"
    with veil.Ledger(d.url) as ledger:
        assert ledger.check("dave", "big").epsilon == 2 * COST
        assert _charges(ledger, "dave", "big") == {"reserved": 1, "committed": 1}


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"
