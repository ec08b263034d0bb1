"""A small session over a fake engine for the accuracy tests."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

import veil
from support import SeededSource
from veil.engines.fake import FakeEngine

STATES = ("CA", "NY", "TX")
BOUNDS = {"income": (0, 1000)}
Q = (
    "SELECT state, COUNT(*) AS n, SUM(income) AS total, AVG(income) AS mean "
    "FROM people GROUP BY state"
)


def session(budget: veil.Budget | None = None) -> veil.Session:
    rng = np.random.default_rng(3)
    n = 2000
    table = pa.table(
        {
            "user_id": np.arange(n),
            "state": rng.choice(list(STATES), n),
            "income": rng.uniform(0, 1000, n),
        }
    )
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "people", budget or veil.Budget(epsilon=10))
    return veil.Session(
        FakeEngine({"people": table}),
        ledger=ledger,
        analyst="alice",
        dataset="people",
        privacy_unit="user_id",
        domains={"state": STATES},
        source=SeededSource(1),
    )
