"""The dashboard reads a bounded part of the ledger (issue 34: it read every event of every
grant, and each cache hit is one): the audit table a page at a time, the chart from the newest
charges walked back from the running sums, counts as SQL aggregates."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from fractions import Fraction

import veil
from service_support import Service
from veil.accounting import spending
from veil.accounting.spending import Spent
from veil.service.dashboard_data import AUDIT_ROWS, CHART_CHARGES, overview, used
from veil.service.dashboard_html import num
from veil.service.principals import Principal

from .test_dashboard import audit_rows, card, log_in, page


def _charge(ledger: veil.Ledger, who: str, i: int, eps: str = "1/1000") -> veil.Reservation:
    return ledger.reserve(
        who, "people", veil.Budget(epsilon=eps), fingerprint=f"{i:064x}",
        query=f"SELECT COUNT(*) AS n FROM people WHERE income > {i}",
    )  # fmt: skip


def test_the_audit_table_is_walked_a_page_at_a_time_newest_first(service: Service) -> None:
    ledger = service.ledger
    for i in range(AUDIT_ROWS + 50):
        _charge(ledger, "alice", i).commit({"n": i})
    log_in(service, "root")
    html = page(service)
    first = audit_rows(html)
    assert len(first) == AUDIT_ROWS
    assert f"WHERE income &gt; {AUDIT_ROWS + 49}" in first[0]
    older = re.search(r'<a href="(/dashboard\?before=\d+)" rel="next">Older charges</a>', html)
    assert older is not None
    second = service.client.get(older.group(1)).text
    rows = audit_rows(second)
    assert len(rows) == 50
    assert "WHERE income &gt; 49" in rows[0]
    assert "WHERE income &gt; 0<" in rows[-1]
    assert 'rel="next"' not in second  # the oldest page
    assert f"50 charges older than #{older.group(1).split('=')[1]}" in second
    for junk in ("x", "0", "-5", "9" * 30):  # a cursor that is not one: the first page
        assert audit_rows(service.client.get(f"/dashboard?before={junk}").text) == first


def test_the_chart_walks_back_from_the_running_sums(service: Service) -> None:
    """More charges than the chart draws: it starts at the oldest it draws, at the use before
    it — as the sums of every charge up to there say — and ends at the running sums."""
    ledger = service.ledger
    ledger.grant("carol", "people", veil.Budget(epsilon=10))
    made = []
    for i in range(CHART_CHARGES + 30):
        r = _charge(ledger, "carol", i, eps=f"1/{1000 + i % 7}")
        if i % 11 == 0:
            r.refund()  # not drawn: it never counted
        else:
            r.commit({"n": i})
            made.append(r)
    view = overview(ledger, Principal("root", "admin", datetime.now(UTC), None),
                    datetime.now(UTC))  # fmt: skip
    (carol,) = [b for b in view.budgets if b.analyst == "carol"]
    total = veil.Budget(epsilon=10)
    history = [r for r in ledger.history("carol", "people") if r.event == "charge"]
    drawn = history[-CHART_CHARGES:]  # the newest CHART_CHARGES charges, refunds included
    before = Spent()
    for r in history[:-CHART_CHARGES]:
        if r.status == "committed" and r.loss is not None:
            before = spending.add_charge(total, before, r.loss)
    expected = [(drawn[0].at, used(total, before))]
    for r in drawn:
        if r.status == "committed" and r.loss is not None:
            before = spending.add_charge(total, before, r.loss)
            expected.append((r.at, used(total, before)))
    assert list(carol.steps) == expected
    assert carol.steps[-1][1] == ledger.spent("carol", "people").epsilon
    assert carol.charges == CHART_CHARGES + 30  # counted, refunds too


def test_an_abandoned_charge_is_spent_not_reserved(service: Service) -> None:
    ledger = service.ledger
    running = _charge(ledger, "alice", 1, eps="1/4")
    log_in(service, "alice")
    quarter = f'title="exactly 0.25">{num(Fraction(1, 4))}</span> <span class="k">'
    nothing = f'title="exactly 0">{num(Fraction(0))}</span> <span class="k">'
    html = card(page(service), "alice", "people")
    assert quarter + "reserved" in html  # a query still running
    assert nothing + "spent" in html
    ledger.abandon_stale(1e-6)
    html = card(page(service), "alice", "people")
    assert quarter + "spent" in html  # counted as spent: it stays charged, nothing runs
    assert nothing + "reserved" in html
    assert running.status == "reserved"  # (this object was not told; the ledger was)
    assert ledger.check("alice", "people").epsilon == Fraction(1, 4)


def test_counts_past_the_cap_read_as_the_cap_and_more() -> None:
    from veil.accounting.pages import COUNT_CAP
    from veil.service.dashboard_html import count

    assert count(COUNT_CAP) == f"{COUNT_CAP:,}"
    assert count(COUNT_CAP + 1) == f"{COUNT_CAP:,}+"
    assert count(7, capped=True) == "7+"  # a sum over grants of which one was capped
