"""Queries the service turns into jobs (202): a real ``veil serve`` whose ``query_timeout_s``
is 1 ms, so every synchronous query outlasts it and answers with a job to poll."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import veil
from client.relay import wait_until
from service.server import Deployment, Server, serve
from veil.client import Client
from veil.errors import (
    BudgetExhaustedError,
    OutcomeUnknownError,
    QueryFailedError,
    UnsupportedQueryError,
)

pytestmark = pytest.mark.system  # real servers (veil serve) on loopback


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    # no job is "lost" (running past job_ttl_s) however slowly a loaded machine runs it
    service = {"query_timeout_s": 0.001, "job_ttl_s": 600}
    d = Deployment(tmp_path_factory.mktemp("jobs"), service=service)
    d.add_table("people", 1000)
    d.write()
    d.add_key("alice")
    d.grant("alice", "people", 1)
    return d


@pytest.fixture(scope="module")
def server(deployment: Deployment) -> Iterator[Server]:
    with serve(deployment.config, workers=1) as running:
        yield running


@pytest.fixture
def alice(server: Server, deployment: Deployment) -> Iterator[Client]:
    with Client(server.base_url, deployment.keys["alice"]) as c:
        yield c


def committed(client: Client, dataset: str, sql: str) -> list[str | None]:
    return [r.status for r in client.history(dataset) if r.event == "charge" and r.query == sql]


def test_the_service_answers_a_synchronous_query_with_a_job(
    server: Server, deployment: Deployment
) -> None:
    with server.client(deployment.keys["alice"]) as raw:
        body = {"dataset": "people", "sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 0.1}
        answer = raw.post("/v1/query", json=body)
    assert answer.status_code == 202
    assert answer.headers["location"] == f"/v1/jobs/{answer.json()['job']}"


def test_a_query_that_became_a_job_is_polled_to_its_answer(alice: Client) -> None:
    sql = "SELECT state, COUNT(*) AS n FROM people GROUP BY state"
    r = alice.query("people", sql, epsilon=0.2)
    assert isinstance(r, veil.Result)
    assert not r.cached
    assert r.cost == veil.Budget(epsilon=0.2)
    assert len(r.rows) == 4
    assert committed(alice, "people", sql) == ["committed"]
    again = alice.query("people", sql, epsilon=0.2)  # a job too, answered from the cache
    assert again.cached
    assert again.rows == r.rows


def test_a_refusal_inside_a_job_is_the_librarys_error(alice: Client) -> None:
    with pytest.raises(BudgetExhaustedError) as caught:
        alice.query("people", "SELECT AVG(income) AS a FROM people", epsilon=1)
    assert caught.value.requested == veil.Budget(epsilon=1)
    assert caught.value.remaining == alice.remaining("people")
    with pytest.raises(UnsupportedQueryError) as bad:
        alice.query("people", "SELECT COUNT(*) FROM people, people AS p2", epsilon=0.1)
    assert bad.value.position is not None


@pytest.fixture
def hasty(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    """alice on a service whose jobs are "lost" past 3 s and whose "padded" answers come after
    ≥ 20 s: wide windows, so a loaded machine sees the job running at 0.2 s, then lost."""
    service = {"query_timeout_s": 0.001, "job_ttl_s": 3}
    d = Deployment(tmp_path_factory.mktemp("hasty"), service=service)
    d.add_table("padded", 200, seed=3, min_response_ms=20_000)
    d.write()
    d.add_key("alice")
    d.grant("alice", "padded", 1)
    with serve(d.config, workers=1) as running, Client(running.base_url, d.keys["alice"]) as c:
        yield c


def test_a_job_not_done_in_time_names_the_job_to_wait_for(hasty: Client) -> None:
    alice = hasty
    sql = "SELECT COUNT(*) AS n FROM padded"
    with pytest.raises(OutcomeUnknownError, match=r"client\.job\('[0-9a-f]{32}'\)") as caught:
        alice.query("padded", sql, epsilon=0.5, timeout=0.2)
    job_id = caught.value.job
    assert job_id is not None
    # charged once (before the pad), the answer pending
    wait_until(lambda: committed(alice, "padded", sql) == ["committed"])
    job = alice.job(job_id)
    assert job.dataset == "padded"
    # past job_ttl_s (3 s) and before its answer (20 s) the service reports the job lost
    with pytest.raises(QueryFailedError, match=r"is lost.*stays charged.*Do not send the query"):
        job.result()
    # it finished after all: its answer is kept (the wait is a safety net past the pad)
    wait_until(lambda: job.state() == "done", within_s=120)
    r = job.result()
    assert not r.cached
    assert r.cost == veil.Budget(epsilon=0.5)
    assert committed(alice, "padded", sql) == ["committed"]
