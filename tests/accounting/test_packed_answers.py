"""A packed cached answer (``veil.release.measured.PACKED_FORMAT``, a measurement of more than
``PACKED_ROWS`` groups) in every ledger storage: stored on commit, served to the same query at
no cost with the same values and error bars."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa
import pytest

import veil
from veil.accounting import Budget
from veil.release.measured import PACKED_FORMAT, PACKED_ROWS

N = PACKED_ROWS


@pytest.fixture
def session(ledger: veil.Ledger) -> Iterator[veil.Session]:
    size = 3 * N
    table = pa.table({"uid": list(range(size)), "k": [i % (2 * N) for i in range(size)]})
    with veil.Session.local(
        {"t": table},
        privacy_unit="uid",
        budget=veil.Budget(epsilon=10),
        ledger=ledger,
        self_grant=True,
    ) as s:
        yield s


def test_a_packed_answer_is_the_cached_answer_of_the_same_query(session: veil.Session) -> None:
    sql = "SELECT k, COUNT(*) AS n FROM t GROUP BY k"
    domains = {"k": list(range(4 * N))}
    fresh = session.sql(sql, epsilon=1, domains=domains)
    cached = session.sql(sql, epsilon=1, domains=domains)
    assert not fresh.cached
    assert cached.cached
    assert cached.cost == Budget.zero("pure")
    assert cached.rows == fresh.rows
    assert len(cached.rows) == 4 * N
    assert cached.error_bars() == fresh.error_bars()
    assert session.remaining() == Budget(epsilon=9)
    (stored,) = json.loads(session.ledger.export_json())["answers"]
    form = json.loads(stored["answer"])
    assert form["veil_measured"] == PACKED_FORMAT
    (count,) = form["stats"].values()
    assert set(count) == {"int", "base64"}
