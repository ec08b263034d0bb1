"""MODE on real data: the California PUMS sample (1,000 people), education (``educ``, coded
1–16), through whole sessions.

Documented threshold (the issue's claim): the released mode is the true mode (9: 201 people,
against 178 for the runner-up 13) in ≥ 90 % of releases at ε = 1. Each release uses a fresh
session (a new cache key, fresh noise) and its own seeded source, so the outcome is fixed.
The public margin at ε = 1 over 16 candidates is 2·ln(15/0.05) ≈ 11.4 counts at 95 %, and the
true margin is 23, so the mechanism's own bound gives P(wrong) ≤ 15·e^(−23/2) ≈ 1.5·10⁻⁴;
measured at seed: 200/200. TOP_K(educ, 3) at ε = 1 (three picks at ε = 1/3 each): the set
{9, 13, 11} in ≥ 90 % of 100 releases; measured at seed: 100/100 (the exact order 9, 13, 11
in 177 of 200 in a longer run).
"""

from __future__ import annotations

from collections import Counter

import duckdb
import pandas as pd
import pytest

import veil
from support import SeededSource
from system.conftest import DATA

REPS = 200


@pytest.mark.slow
def test_the_pums_education_mode_at_epsilon_1_is_the_true_mode_in_at_least_90_percent() -> None:
    path = DATA / "pums_california_1000.csv"
    if not path.is_file():
        pytest.skip(f"SKIPPED LOUDLY: {path.name} is missing from ../shared/data")
    frame = pd.read_csv(path)
    counts = frame["educ"].value_counts()
    truth = int(counts.idxmax())
    assert (truth, sorted(counts.tolist())[-2:]) == (9, [178, 201])
    assert frame["educ"].between(1, 16).all()
    con = duckdb.connect()
    ledger = veil.Ledger("sqlite://")
    ledger.grant("system-test", "pums", veil.Budget(epsilon=2 * REPS))
    released: Counter[object] = Counter()
    try:
        for i in range(REPS):
            with veil.Session.local(
                tables={"pums": frame}, ledger=ledger, analyst="system-test", dataset="pums",
                connection=con,
            ) as s:  # fmt: skip
                source = SeededSource(f"pums-mode-{i}")
                r = s.sql("SELECT MODE(educ) AS m FROM pums", epsilon=1,
                          bounds={"educ": (1, 16)}, source=source)  # fmt: skip
                assert not r.cached
                assert r.cost == veil.Budget(epsilon=1)
                released[r.rows[0][0]] += 1
    finally:
        con.close()
    assert released[truth] >= 0.9 * REPS, released


@pytest.mark.slow
def test_the_pums_education_top_3_at_epsilon_1_is_the_true_top_3_in_at_least_90_percent() -> None:
    path = DATA / "pums_california_1000.csv"
    if not path.is_file():
        pytest.skip(f"SKIPPED LOUDLY: {path.name} is missing from ../shared/data")
    frame = pd.read_csv(path)
    truth = set(frame["educ"].value_counts().head(3).index.tolist())
    assert truth == {9, 13, 11}
    con = duckdb.connect()
    ledger = veil.Ledger("sqlite://")
    ledger.grant("system-test", "pums", veil.Budget(epsilon=2 * REPS))
    right = 0
    try:
        for i in range(REPS // 2):
            with veil.Session.local(
                tables={"pums": frame}, ledger=ledger, analyst="system-test", dataset="pums",
                connection=con,
            ) as s:  # fmt: skip
                source = SeededSource(f"pums-top-{i}")
                r = s.sql("SELECT TOP_K(educ, 3) FROM pums", epsilon=1,
                          bounds={"educ": (1, 16)}, source=source)  # fmt: skip
                assert r.cost == veil.Budget(epsilon=1)
                right += set(r.rows[0]) == truth
    finally:
        con.close()
    assert right >= 0.9 * (REPS // 2), right
