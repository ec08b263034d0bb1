"""Fault injection (issue 34): the ledger's database fails under load, and every answer the
service gave is checked against the ledger afterwards.

A real ``veil serve`` (two workers) answers a steady stream of queries from several clients,
each query a different SQL text (so each is charged once, and its charge is found by its text).
Meanwhile the ledger's database fails for real:

- **PostgreSQL**: a throwaway cluster of the test's own is stopped as a crash would stop it
  (``pg_ctl stop -m immediate``) and started again (``fault_support.throwaway_cluster``);
- **SQLite on a full disk**: the ledger lives on a small tmpfs that a file then fills, so its
  writes meet the kernel's ``ENOSPC`` (``fault_support.small_disk``), and the file is deleted.

Then, for every answer: a 200 has exactly one committed charge; a 503 ``unavailable`` has no
charge at all; an ``outcome-unknown`` names a charge that ``GET /v1/charges/{id}`` resolves
(absent, or present with the answer's fingerprint) and that ends settled (``committed`` or
``abandoned`` after the short ``reservation_ttl_s``); nothing else is answered (no 400, no
"a bug in veil"), no detail names the ledger, no query is charged twice, and the running sums
match the charges.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import veil
from fault_support import fill, small_disk, throwaway_cluster
from service.server import Deployment, Server, serve

pytestmark = pytest.mark.slow

CLIENTS = 6
EPSILON = "1/100"


@dataclass(frozen=True)
class Answer:
    sql: str
    status: int | None  # None: no HTTP answer (the connection broke)
    body: dict[str, Any]


def _deploy(root: Path, ledger: str | None) -> Deployment:
    d = Deployment(root, ledger=ledger)
    # a short reservation_ttl_s and ledger_check_s: what an outage leaves open is settled
    # within the test; a long query_timeout_s: no query becomes a job
    d.service = {"query_timeout_s": 120, "rate_limit": 1_000_000, "reservation_ttl_s": 4,
                 "ledger_check_s": 1}  # fmt: skip
    d.add_table("people", 500, seed=3)
    d.write()
    d.add_key("alice")
    d.grant("alice", "people", 10_000)
    return d


class Load:
    """``CLIENTS`` threads sending queries, each a new SQL text, until stopped."""

    def __init__(self, server: Server, key: str) -> None:
        self._server = server
        self._key = key
        self._stop = threading.Event()
        self._numbers = itertools.count()
        self._lock = threading.Lock()
        self.answers: list[Answer] = []
        self._threads = [threading.Thread(target=self._run) for _ in range(CLIENTS)]

    def __enter__(self) -> Load:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=300)

    def since(self, start: int) -> list[Answer]:
        with self._lock:
            return self.answers[start:]

    def count(self) -> int:
        with self._lock:
            return len(self.answers)

    def _run(self) -> None:
        with self._server.client(self._key, timeout=120.0) as http:
            while not self._stop.is_set():
                with self._lock:
                    k = next(self._numbers)
                sql = f"SELECT COUNT(*) AS n FROM people WHERE age >= {k}"
                try:
                    r = http.post(
                        "/v1/query", json={"dataset": "people", "sql": sql, "epsilon": EPSILON}
                    )
                except httpx.TransportError as exc:
                    answer = Answer(sql, None, {"error": repr(exc)})
                else:
                    try:
                        body = r.json()
                    except ValueError:  # not the service's JSON: outside the taxonomy
                        body = {"type": "not-json", "text": r.text[:200]}
                    answer = Answer(sql, r.status_code, body)
                with self._lock:
                    self.answers.append(answer)


def _until(check: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within_s} s: {what}")
        time.sleep(0.2)


def _kind(a: Answer) -> str:
    if a.status is None:
        return "no answer"
    if a.status == 200:
        return "200"
    kind = str(a.body.get("type", "")).removeprefix("urn:veil:problem:")
    return f"{a.status} {kind}"


def _check_against_the_ledger(
    answers: list[Answer], url: str, server: Server, key: str, secrets: list[str]
) -> Counter[str]:
    """Every answer as the module docstring says; the tally of answers by kind."""
    kinds = Counter(_kind(a) for a in answers)
    allowed = {"200", "503 unavailable", "500 outcome-unknown", "no answer"}
    assert set(kinds) <= allowed, f"answers outside the taxonomy: {kinds}"
    for a in answers:
        for secret in secrets:
            assert secret not in str(a.body), f"an answer names the ledger: {a.body}"
    with veil.Ledger(url, create=False) as ledger:
        charges = [r for r in ledger.history("alice", "people") if r.event == "charge"]
        assert ledger.verify(halt=False) == []
    by_text = Counter(r.query for r in charges)
    assert max(by_text.values(), default=0) <= 1, "a query was charged twice"
    charged = {r.query: r for r in charges}
    with server.client(key) as http:
        for a in answers:
            found = charged.get(a.sql)
            if a.status == 200:
                assert found is not None, f"a 200 without a charge: {a.sql}"
                assert found.status == "committed"
                assert found.fingerprint == a.body["fingerprint"]
            elif a.status == 503:
                assert found is None, f"a 503 'retry later' whose charge stands: {found}"
            elif a.status == 500:
                reservation, fingerprint = a.body["reservation"], a.body["fingerprint"]
                assert isinstance(fingerprint, str)
                if reservation is not None:
                    looked = http.get(f"/v1/charges/{reservation}")
                    assert looked.status_code in (200, 404)
                    if looked.status_code == 200 and looked.json()["fingerprint"] == fingerprint:
                        assert found is not None
                        assert looked.json()["id"] == found.id
                    else:  # no charge under its id (or another query's, the id reused)
                        assert found is None
                if found is not None:
                    assert found.status in ("committed", "abandoned")  # settled
            else:  # no answer: resolvable by its text, like the clients' own advice
                assert found is None or found.status in ("committed", "abandoned")
    return kinds


def _settled(url: str) -> bool:
    with veil.Ledger(url, create=False) as ledger:
        return all(
            r.status != "reserved" for r in ledger.history("alice", "people") if r.event == "charge"
        )


@pytest.mark.postgres
def test_postgresql_stopped_and_restarted_under_load(tmp_path: Path) -> None:
    with throwaway_cluster() as cluster:
        d = _deploy(tmp_path / "deploy", cluster.url)
        key = d.keys["alice"]
        with serve(d.config, workers=2) as server, Load(server, key) as load:
            _until(lambda: load.count() >= 20, 120, "answers before the outage")
            cluster.stop()
            down = load.count()
            _until(lambda: load.count() >= down + 30, 120, "answers during the outage")
            during = load.since(down)
            cluster.start()
            up = load.count()
            _until(
                lambda: sum(a.status == 200 for a in load.since(up)) >= 20,
                180,
                "answers after the restart",
            )
        answers = load.answers
        assert any(a.status == 503 for a in during), (
            f"no 503 while down: {Counter(map(_kind, during))}"
        )
        with serve(d.config, workers=1) as again:
            _until(lambda: _settled(cluster.url), 60, "open reservations settled")
            kinds = _check_against_the_ledger(
                answers, cluster.url, again, key, secrets=[str(cluster.port), "postgresql"]
            )
        print(f"\nPostgreSQL stopped and restarted under load: {dict(kinds)}")


def test_sqlite_on_a_full_disk(tmp_path: Path) -> None:
    with small_disk(24) as disk:
        d = _deploy(disk / "deploy", None)
        key = d.keys["alice"]
        with serve(d.config, workers=2) as server, Load(server, key) as load:
            _until(lambda: load.count() >= 20, 120, "answers before the disk fills")
            filler = fill(disk)
            full = load.count()
            _until(
                lambda: sum(a.status != 200 for a in load.since(full)) >= 20,
                120,
                "refusals while the disk is full",
            )
            during = load.since(full)
            filler.unlink()
            freed = load.count()
            _until(
                lambda: sum(a.status == 200 for a in load.since(freed)) >= 20,
                120,
                "answers after the disk was freed",
            )
        answers = load.answers
        assert any(a.status == 503 for a in during), (
            f"no 503 while full: {Counter(map(_kind, during))}"
        )
        with serve(d.config, workers=1) as again:
            _until(lambda: _settled(d.url), 60, "open reservations settled")
            kinds = _check_against_the_ledger(
                answers, d.url, again, key, secrets=[str(disk), "veil-ledger.db", "sqlite"]
            )
        print(f"\nSQLite on a full disk under load: {dict(kinds)}")
