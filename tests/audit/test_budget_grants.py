"""Audit: only an explicit grant adds budget; opening a session never tops one up."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import veil


def test_reopening_a_session_with_a_bigger_budget_does_not_top_up_the_grant(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    table = pa.table({"uid": [1, 2, 3]})
    first = veil.Session.local(
        {"t": table}, privacy_unit="uid", ledger=url, budget=veil.Budget(epsilon=1)
    )
    first.sql("SELECT COUNT(*) AS n FROM t", epsilon="0.75")
    first.ledger.close()
    again = veil.Session.local(
        {"t": table}, privacy_unit="uid", ledger=url, budget=veil.Budget(epsilon=100)
    )
    assert again.remaining() == veil.Budget(epsilon="0.25")
    again.ledger.grant("analyst", "t", veil.Budget(epsilon=1))  # the explicit way
    assert again.remaining() == veil.Budget(epsilon="1.25")
    again.ledger.close()
