"""Audit: explain reads no private data and shows no secret (the bounding salt)."""

from __future__ import annotations

import re

import pyarrow as pa

import veil
from veil.engines.fake import FakeEngine


def session() -> tuple[veil.Session, FakeEngine]:
    engine = FakeEngine(
        {"t": pa.table({"uid": [1, 2, 2], "state": ["a", "b", "b"], "x": [1.0, 2.0, 3.0]})}
    )
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "t", veil.Budget(epsilon=1, delta="1e-6"))
    s = veil.Session(engine, ledger=ledger, analyst="alice", dataset="t", privacy_unit="uid")
    return s, engine


Q = "SELECT state, COUNT(*) AS n, AVG(x) AS m FROM t GROUP BY state"


def test_explain_shows_a_salt_placeholder_not_a_drawn_salt_and_runs_nothing() -> None:
    s, engine = session()
    first = s.explain(Q, epsilon=1, bounds={"x": (0, 10)}, max_groups=2, max_rows_per_group=2)
    second = s.explain(Q, epsilon=1, bounds={"x": (0, 10)}, max_groups=2, max_rows_per_group=2)
    assert first.sql == second.sql  # nothing random in what explain shows
    assert "HASH($salt, HASH($salt" in first.sql
    assert not re.search(r"HASH\(\d", first.sql)
    assert engine.calls == []
    assert s.remaining() == veil.Budget(epsilon=1, delta="1e-6")
