"""Public group keys end to end: a declared domain releases every key (empty ones included)
under pure ε, whether it is declared per query or once for the session."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import veil
from support import SeededSource

SQL = "SELECT ILOSTAT, COUNT(*) AS n FROM lfs GROUP BY ILOSTAT"
KEYS = [1, 2, 3, 9, 42]  # 42 never occurs: released anyway, with a noisy count near 0


@pytest.fixture(scope="module")
def lfs(lfs_csv: Path) -> pd.DataFrame:
    return pd.read_csv(lfs_csv, usecols=["ILOSTAT"])


def test_a_domain_given_with_the_query_releases_every_key_under_pure_epsilon(
    lfs: pd.DataFrame,
) -> None:
    s = veil.Session.local(tables={"lfs": lfs}, budget=veil.Budget(epsilon=1))
    r = s.sql(SQL, epsilon=1, domains={"ILOSTAT": KEYS}, source=SeededSource("keys"))
    assert [row[0] for row in r.rows] == KEYS
    assert r.cost == veil.Budget(epsilon=1)
    assert r.rows[-1][1] <= r.error_bars()[-1][1]  # the empty key: 0 plus noise


def test_a_domain_declared_for_the_session_applies_to_its_queries(lfs: pd.DataFrame) -> None:
    s = veil.Session.local(
        tables={"lfs": lfs}, budget=veil.Budget(epsilon=1), domains={"ILOSTAT": KEYS}
    )
    r = s.sql(SQL, epsilon=1, source=SeededSource("keys"))
    assert [row[0] for row in r.rows] == KEYS
