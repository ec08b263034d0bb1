"""Ledgers as a new user meets them (issue 9, the audit's gaps): a grant no query could spend
safely is refused, and a session never creates the mistyped ledger it was pointed at."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import veil
from veil.errors import InvalidArgumentError, LedgerError

TABLE = pa.table({"uid": [1, 2, 3]})


@pytest.mark.parametrize("delta", ["0.5", "0.6", "3/5"])
def test_a_grant_of_delta_one_half_or_more_is_refused_as_queries_refuse_it(delta: str) -> None:
    ledger = veil.Ledger("sqlite://")
    with pytest.raises(InvalidArgumentError, match=r"a grant of delta=.* protects nothing") as info:
        ledger.grant("alice", "people", veil.Budget(epsilon=1, delta=delta))
    assert "Budget(epsilon=1, delta=1e-6)" in str(info.value)
    assert info.value.for_cli().endswith("e.g. --delta 1e-6")
    assert ledger.grants() == []


def test_top_ups_may_not_add_up_to_delta_one_half() -> None:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "people", veil.Budget(epsilon=1, delta="0.3"))
    with pytest.raises(InvalidArgumentError, match=r"a grant of delta=0\.6 protects nothing"):
        ledger.grant("alice", "people", veil.Budget(epsilon=1, delta="0.3"))
    assert ledger.granted("alice", "people") == veil.Budget(epsilon=1, delta="0.3")


def test_a_session_on_a_ledger_that_does_not_exist_is_refused_saying_how_to_create_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "typo.db"
    with pytest.raises(LedgerError, match=r"no ledger at '.*typo\.db'; check the path") as info:
        veil.Session.local({"t": TABLE}, ledger=f"sqlite:///{path}")
    message = str(info.value)
    assert "veil.Ledger('sqlite:///" in message  # in Python's syntax
    assert "veil budget grant" in message
    assert not path.exists()  # not created, so no 'unknown analyst' later either
    with pytest.raises(LedgerError, match="no ledger at"):
        veil.Session.local({"t": TABLE}, ledger=path)  # a Path alike


def test_a_session_may_create_its_ledger_by_the_documented_opt_in(tmp_path: Path) -> None:
    path = tmp_path / "mine.db"
    with pytest.raises(InvalidArgumentError, match="budgets are granted by the data owner"):
        veil.Session.local({"t": TABLE}, ledger=f"sqlite:///{path}", budget=veil.Budget(epsilon=1))
    assert not path.exists()  # refused before anything was created
    s = veil.Session.local(
        {"t": TABLE}, ledger=f"sqlite:///{path}", budget=veil.Budget(epsilon=1), self_grant=True
    )
    assert path.exists()
    assert s.remaining() == veil.Budget(epsilon=1)
    s.ledger.close()
    again = veil.Session.local({"t": TABLE}, ledger=f"sqlite:///{path}")  # it exists now
    assert again.remaining() == veil.Budget(epsilon=1)
    again.ledger.close()


def test_an_in_memory_ledger_url_still_opens_a_fresh_ledger() -> None:
    s = veil.Session.local({"t": TABLE}, ledger="sqlite://", budget=veil.Budget(epsilon=1))
    assert s.remaining() == veil.Budget(epsilon=1)
