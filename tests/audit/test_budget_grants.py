"""Audit: budgets are granted, not taken — a session on a persistent ledger spends only a grant
that exists, creates one only when told to explicitly, and never tops one up."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import veil
from veil.errors import InvalidArgumentError, LedgerError


def test_reopening_a_session_with_a_bigger_budget_does_not_top_up_the_grant(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    table = pa.table({"uid": [1, 2, 3]})
    first = veil.Session.local(
        {"t": table}, privacy_unit="uid", ledger=url, budget=veil.Budget(epsilon=1), self_grant=True
    )
    first.sql("SELECT COUNT(*) AS n FROM t", epsilon="0.75")
    first.ledger.close()
    again = veil.Session.local(
        {"t": table},
        privacy_unit="uid",
        ledger=url,
        budget=veil.Budget(epsilon=100),
        self_grant=True,
    )
    assert again.remaining() == veil.Budget(epsilon="0.25")
    again.ledger.grant("analyst", "t", veil.Budget(epsilon=1))  # the explicit way
    assert again.remaining() == veil.Budget(epsilon="1.25")
    again.ledger.close()


def test_a_session_on_a_persistent_ledger_cannot_grant_itself_a_budget(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    table = pa.table({"uid": [1, 2, 3]})
    with pytest.raises(InvalidArgumentError, match="budgets are granted by the data owner"):
        veil.Session.local({"t": table}, ledger=url, budget=veil.Budget(epsilon=1))
    with veil.Ledger(url) as ledger:
        assert ledger.grants() == []  # nothing was granted
    s = veil.Session.local({"t": table}, ledger=url)  # no budget: spends a grant, if any
    with pytest.raises(LedgerError, match="no budget is granted"):
        s.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5)
    s.ledger.grant("analyst", "t", veil.Budget(epsilon=1))  # the data owner's act
    assert s.sql("SELECT COUNT(*) AS n FROM t", epsilon=0.5).cost == veil.Budget(epsilon=0.5)
    s.ledger.close()


def test_a_scratch_session_in_memory_grants_its_own_budget() -> None:
    s = veil.Session.local({"t": pa.table({"uid": [1]})}, budget=veil.Budget(epsilon=1))
    assert s.remaining() == veil.Budget(epsilon=1)
