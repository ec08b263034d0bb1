"""A service over a scratch ledger and a small Parquet table written by the test."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb

import veil
from veil.catalog import Source
from veil.service.app import create_app
from veil.service.config import ServiceConfig, ServiceLimits

with warnings.catch_warnings():  # starlette's TestClient warns about httpx's future
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

SQL = "SELECT COUNT(*) AS n, SUM(income) AS total FROM people"


@dataclass
class Service:
    client: TestClient
    keys: dict[str, str]
    ledger: veil.Ledger
    dir: Path

    def headers(self, who: str) -> dict[str, str]:
        if who == "none":
            return {}
        if who == "bad":
            return {"Authorization": "Bearer " + "x" * 43}
        return {"Authorization": "Bearer " + self.keys[who]}


def write_people(path: Path, rows: int = 200) -> None:
    duckdb.sql(
        f"COPY (SELECT i AS user_id, (i % 7) * 1000.0 AS income, "
        f"CASE WHEN i % 2 = 0 THEN 'a' ELSE 'b' END AS grp FROM range({rows}) t(i)) "
        f"TO '{path}' (FORMAT parquet)"
    )


def start(tmp: Path, limits: ServiceLimits | None = None, pad_ms: int = 0) -> Iterator[Service]:
    write_people(tmp / "people.parquet")
    write_people(tmp / "other.parquet", rows=50)
    config = ServiceConfig(
        ledger=f"sqlite:///{tmp / 'ledger.db'}", limits=limits or ServiceLimits()
    )
    app = create_app(config)
    state = app.state.veil
    state.catalog.add_dataset(
        "people",
        source=Source("file", path=str(tmp / "people.parquet")),
        privacy_unit="user_id",
        bounds={"income": (0, 10_000)},
        max_epsilon=2,
        min_response_ms=pad_ms,
    )
    state.catalog.add_dataset(
        "other",
        source=Source("file", path=str(tmp / "other.parquet")),
        privacy_unit="user_id",
        bounds={"income": (0, 10_000)},
    )
    keys = {
        "alice": state.principals.add("alice"),
        "bob": state.principals.add("bob"),
        "root": state.principals.add("root", "admin"),
        "revoked": state.principals.add("revoked"),
    }
    state.principals.revoke("revoked")
    ledger = state.ledger
    ledger.grant("alice", "people", veil.Budget(epsilon=5))
    ledger.grant("alice", "app", veil.Budget(epsilon=5, delta="1/1000"))
    ledger.grant("bob", "other", veil.Budget(epsilon=5))
    ledger.grant("revoked", "people", veil.Budget(epsilon=5))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Service(client, keys, ledger, tmp)
