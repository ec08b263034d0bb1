"""Contribution bounding end to end: what the session's compiled SQL keeps per user, checked
against pandas on a table shaped like the benchmark's (1–10 rows per user, one state each)."""

from __future__ import annotations

from fractions import Fraction

import pandas as pd
import pytest

import veil
from system.prenoise import exact, session_aggregate, sum_in_value_units

SQL = "SELECT state, COUNT(*) AS n, SUM(income) AS total FROM people GROUP BY state"
BOUNDS = {"income": (0.0, 1000.0)}
STATES = ["CA", "TX", "NY", "WY"]


@pytest.fixture(scope="module")
def people() -> pd.DataFrame:
    rows = []
    for uid in range(600):
        for k in range(1 + (uid * 7) % 10):  # 1–10 rows per user
            # incomes spread over and beyond the bounds, distinct within a user
            rows.append((uid, STATES[uid % 4], float((uid * 37 + k * 101) % 1300) - 100.0))
    return pd.DataFrame(rows, columns=["user_id", "state", "income"])


def clamped(df: pd.DataFrame) -> pd.DataFrame:
    return df.assign(income=df["income"].clip(*BOUNDS["income"]))


@pytest.mark.parametrize("rows_per_user", [1, 3])
def test_each_user_keeps_at_most_the_allowed_rows_of_their_own(
    people: pd.DataFrame, rows_per_user: int
) -> None:
    s = veil.Session.local(
        tables={"people": people}, privacy_unit="user_id", max_rows_per_group=rows_per_user
    )
    agg = session_aggregate(s, SQL, epsilon=1, delta=1e-6, bounds=BOUNDS)
    m_sum = next(m for m in agg.measurements if m.statistic == "sum")
    data = clamped(people)
    per_user = data.groupby(["state", "user_id"])["income"]
    kept_rows = per_user.size().clip(upper=rows_per_user).groupby("state").sum()
    # the kept rows are some of the user's own: their sum lies between the sums of the user's
    # smallest and largest allowed rows
    low = per_user.apply(lambda x: x.nsmallest(rows_per_user).sum()).groupby("state").sum()
    high = per_user.apply(lambda x: x.nlargest(rows_per_user).sum()).groupby("state").sum()
    totals = []
    for salt in (1, 2):
        got = exact(s.engine, agg, salt=salt)
        for (state,), stats in got.stats.items():
            n = stats["count"]
            assert n == kept_rows[state]
            total = sum_in_value_units(m_sum, stats[m_sum.name], n)
            slack = n * m_sum.step / 2  # fixed-point rounding, at most half a step per row
            assert Fraction(low[state]) - slack <= total <= Fraction(high[state]) + slack
        totals.append({k: v[m_sum.name] for k, v in got.stats.items()})
    # the kept rows depend on the secret salt: another salt keeps other rows
    assert totals[0] != totals[1]
