"""What an operator sees of a real ``veil serve --workers 2`` (uvicorn on loopback): the JSON
log lines of each request, the engine error withheld from the analyst, and ``/metrics``
summed over both workers."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import veil
from service.server import Deployment, Server, serve

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]

SQL = "SELECT COUNT(*) AS n FROM people"
WORKERS = 2


def _corrupt_pages(path: Path) -> None:
    """Overwrite a Parquet file's data pages with garbage, its footer kept: the schema reads,
    the rows fail — after the query's charge is reserved."""
    data = bytearray(path.read_bytes())
    (footer,) = struct.unpack("<I", data[-8:-4])
    for i in range(24, len(data) - 8 - footer - 24):
        data[i] = 0xAB
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    d = Deployment(tmp_path_factory.mktemp("ops"))
    d.add_table("people", 400)
    d.add_table("broken", 400)
    _corrupt_pages(d.root / "broken.parquet")
    d.write()
    with d.config.open("a", encoding="utf-8") as f:  # (the default: standard error)
        f.write('\n[logging]\nlevel = "info"\nformat = "json"\n')
    d.add_key("alice")
    d.add_key("root", "admin")
    d.grant("alice", "people", 10)
    d.grant("alice", "broken", 10)
    return d


@pytest.fixture(scope="module")
def server(deployment: Deployment) -> Iterator[Server]:
    with serve(deployment.config, workers=WORKERS) as s:
        yield s


def _lines(server: Server) -> list[dict[str, Any]]:
    """The server's standard error and output, every line one JSON object (uvicorn's too)."""
    return [json.loads(line) for line in server.log_text().splitlines()]


def _ask(server: Server, key: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    # a new connection each time, so that either worker may answer
    with server.client(key) as c:
        return c.post("/v1/query", json=body, headers={"Connection": "close", **headers})


def _logged(server: Server, logger: str, rid: str) -> dict[str, Any]:
    """The one line of ``logger`` for request ``rid`` (a request's access line is written just
    after its response is sent: waited for, 30 s at most)."""
    deadline = time.monotonic() + 30
    while True:
        found = [x for x in _lines(server) if x["logger"] == logger and x.get("request_id") == rid]
        if found or time.monotonic() > deadline:
            (line,) = found
            return line
        time.sleep(0.05)


def _access(server: Server, rid: str) -> dict[str, Any]:
    return _logged(server, "veil.access", rid)


def test_each_request_has_a_json_access_line_with_its_analyst_dataset_and_outcome(
    deployment: Deployment, server: Server
) -> None:
    alice = deployment.keys["alice"]
    body = {"dataset": "people", "sql": SQL, "epsilon": 0.25}
    first = _ask(server, alice, body)
    again = _ask(server, alice, body)
    refused = _ask(server, alice, body | {"max_groups": 9})
    assert (first.status_code, again.status_code, refused.status_code) == (200, 200, 400)
    answered = _access(server, first.headers["x-request-id"])
    assert answered["analyst"] == "alice"
    assert answered["dataset"] == "people"
    assert answered["fingerprint"] == first.json()["fingerprint"]
    assert answered["outcome"] == "answered"
    assert (answered["method"], answered["path"], answered["status"]) == ("POST", "/v1/query", 200)
    assert answered["level"] == "INFO"
    assert answered["duration_ms"] > 0
    cached = _access(server, again.headers["x-request-id"])
    assert cached["outcome"] == "cached"
    assert cached["fingerprint"] == first.json()["fingerprint"]
    problem = _access(server, refused.headers["x-request-id"])
    assert (problem["outcome"], problem["status"]) == ("invalid-argument", 400)
    assert problem["dataset"] == "people"


def test_the_proxys_request_id_is_kept_when_plain_and_replaced_otherwise(
    deployment: Deployment, server: Server
) -> None:
    alice = deployment.keys["alice"]
    body = {"dataset": "people", "sql": SQL, "epsilon": 0.25}
    kept = _ask(server, alice, body, **{"X-Request-ID": "proxy-7f3a.01"})
    assert kept.headers["x-request-id"] == "proxy-7f3a.01"
    odd = _ask(server, alice, body, **{"X-Request-ID": 'a"b\\n' + "x" * 80})
    replaced = odd.headers["x-request-id"]
    assert replaced != 'a"b\\n' + "x" * 80
    assert len(replaced) == 16
    assert _access(server, "proxy-7f3a.01")["analyst"] == "alice"
    assert _access(server, replaced)["status"] == 200


def test_the_engine_error_withheld_from_the_analyst_is_in_the_operators_log(
    deployment: Deployment, server: Server
) -> None:
    broken = "SELECT COUNT(*) AS n, SUM(income) AS total FROM broken"
    r = _ask(server, deployment.keys["alice"], {"dataset": "broken", "sql": broken, "epsilon": 0.5})
    assert r.status_code == 500, r.text
    assert r.json()["type"] == "urn:veil:problem:query-failed"
    rid = r.headers["x-request-id"]
    withheld = _logged(server, "veil.withheld", rid)
    assert withheld["level"] == "ERROR"
    assert (withheld["analyst"], withheld["dataset"]) == ("alice", "broken")
    assert withheld["query"] == broken
    assert isinstance(withheld["reservation"], int)
    engine_said = withheld["exception"].strip().splitlines()[-1]  # the engine's own words
    assert engine_said
    assert engine_said not in r.text
    assert "Traceback" in withheld["exception"]
    access = _access(server, rid)
    assert (access["outcome"], access["status"]) == ("query-failed", 500)
    assert access["dataset"] == "broken"
    with veil.Ledger(deployment.url) as ledger:  # the charge stays, as the answer said
        charge = ledger.charge(withheld["reservation"])
    assert charge is not None
    assert charge.status == "committed"


def _series(text: str, name: str) -> float:
    (line,) = [x for x in text.splitlines() if x.startswith(name + " ")]
    return float(line.split()[-1])


def test_metrics_sum_both_workers_and_need_the_admin_key(
    deployment: Deployment, server: Server
) -> None:
    alice, root = deployment.keys["alice"], deployment.keys["root"]
    with server.client(root) as c:
        before = c.get("/metrics").text
    name = 'veil_requests_total{route="/v1/query",status="200"}'
    start = _series(before, name) if name in before else 0.0
    body = {"dataset": "people", "sql": SQL, "epsilon": 0.5}
    sent, pids = 0, set()
    while len(pids) < WORKERS and sent < 300:  # until both workers answered some
        r = _ask(server, alice, body)
        assert r.status_code == 200
        sent += 1
        pids.add(_access(server, r.headers["x-request-id"])["pid"])
    assert len(pids) == WORKERS, f"one worker answered all {sent} requests"
    for _ in range(4):  # whichever worker answers the scrape, it sees both
        with server.client(root) as c:
            text = c.get("/metrics", headers={"Connection": "close"}).text
        assert _series(text, name) == start + sent
        assert _series(text, "veil_workers") == WORKERS
        assert _series(text, "veil_charging_stopped") == 0
        assert "pid=" not in text
        assert 'veil_budget_spent_epsilon{dataset="people"}' in text
    with server.client(alice) as c:
        assert c.get("/metrics").status_code == 403
    with server.client() as c:
        assert c.get("/metrics").status_code == 401


def test_python_m_veil_and_the_package_file_run_the_cli() -> None:
    # spark-submit runs a file by its path, which puts veil's own folder first on sys.path
    import veil.__main__ as entry

    for argv in (["-m", "veil", "--version"], [entry.__file__, "--version"]):
        done = subprocess.run(
            [sys.executable, *argv], capture_output=True, text=True, check=False, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == f"veil {veil.__version__}\n"
