"""The budget dashboard (``/dashboard``) through the TestClient: logging in opens a session in
an HttpOnly, SameSite=Strict cookie; an administrator sees everyone, an analyst only their own;
a wrong, revoked or rotated key sees nothing but the form; everything is escaped; logout and
expiry end a session; at 1,000 charges the page renders quickly with a capped audit table."""

from __future__ import annotations

import hashlib
import re
import warnings
from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest
from sqlalchemy import select, update

import veil
from service.server import postgres_ledger
from service_support import SQL, Service
from support import Clock
from veil.accounting import spending
from veil.accounting.spending import Spent
from veil.service import sessions as sessions_module
from veil.service.dashboard import COOKIE, ENDED, WRONG_KEY
from veil.service.dashboard_data import AUDIT_ROWS, BudgetView, primary, used
from veil.service.dashboard_html import CHART_W, chart, esc, num
from veil.service.principals import Principals
from veil.service.sessions import SessionStore, sessions

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

PLOT_WIDTH = CHART_W - 44 - 12  # the chart's width less its margins
PAGE_BYTES = 256 * 1024  # the capped page is 167 KiB at 1,000 charges
QUERY = {"dataset": "people", "sql": SQL, "epsilon": 0.25}
HOSTILE = "SELECT COUNT(*) AS n FROM people WHERE grp = '<script>alert(\"x\")</script>'"


def log_in(svc: Service, who: str, client: TestClient | None = None) -> str:
    """Log ``who`` in; the session cookie's value."""
    client = client or svc.client
    client.cookies.clear()
    r = client.post("/dashboard/login", data={"key": svc.keys[who]}, follow_redirects=False)
    assert r.status_code == 303, r.text
    assert r.headers["location"] == "/dashboard"
    return str(r.cookies[COOKIE])


def page(svc: Service) -> str:
    r = svc.client.get("/dashboard")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    return r.text


def query(svc: Service, who: str, body: dict[str, object] = QUERY) -> None:
    r = svc.client.post("/v1/query", json=body, headers=svc.headers(who))
    assert r.status_code == 200, r.text


def card(html: str, analyst: str, dataset: str) -> str:
    """The budget card of (analyst, dataset) in the page."""
    found = re.search(
        rf'<article class="budget[^"]*" data-analyst="{re.escape(esc(analyst))}" '
        rf'data-dataset="{re.escape(esc(dataset))}">(.*?)</article>',
        html,
        re.S,
    )
    assert found is not None, f"no card for {analyst}/{dataset}"
    return found.group(1)


def _cells(analyst: str, dataset: str) -> str:
    return f'data-label="Analyst">{analyst}</td><td data-label="Dataset">{dataset}</td>'


def audit_rows(html: str) -> list[str]:
    body = re.search(r"<tbody>(.*?)</tbody>", html, re.S)
    return [] if body is None else re.findall(r"<tr>.*?</tr>", body.group(1), re.S)


def test_the_dashboard_without_a_session_is_the_login_form(service: Service) -> None:
    html = page(service)
    assert 'action="/dashboard/login"' in html
    assert 'name="key" type="password"' in html
    assert "alice" not in html
    assert "people" not in html


def test_logging_in_sets_an_http_only_strict_cookie_and_stores_only_its_hash(
    service: Service,
) -> None:
    r = service.client.post(
        "/dashboard/login", data={"key": service.keys["alice"]}, follow_redirects=False
    )
    assert r.status_code == 303
    cookie = r.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=")
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    assert "Path=/dashboard" in cookie
    assert "Max-Age=28800" in cookie
    assert "Secure" not in cookie  # plain http: a Secure cookie would never come back
    secret = r.cookies[COOKIE]
    assert len(secret) >= 43
    assert secret != service.keys["alice"]
    engine = service.client.app.state.veil.principals.engine
    with engine.connect() as conn:
        rows = conn.execute(select(sessions)).all()
    assert [(row.principal, row.token_hash) for row in rows] == [
        ("alice", hashlib.sha256(secret.encode()).hexdigest())
    ]
    assert "alice" in page(service)


def test_over_https_the_cookie_is_secure(service: Service) -> None:
    with TestClient(service.client.app, base_url="https://testserver") as client:
        r = client.post(
            "/dashboard/login", data={"key": service.keys["alice"]}, follow_redirects=False
        )
        assert r.status_code == 303
        assert "Secure" in r.headers["set-cookie"]
        assert "alice" in client.get("/dashboard").text


def test_an_administrator_sees_every_analyst_and_dataset(service: Service) -> None:
    query(service, "alice")
    query(service, "bob", {"dataset": "other", "sql": SQL.replace("people", "other"), "epsilon": 1})
    log_in(service, "root")
    html = page(service)
    for analyst, dataset in (("alice", "people"), ("alice", "app"), ("bob", "other")):
        card(html, analyst, dataset)
    assert "Signed in as <b>root</b>" in html
    rows = audit_rows(html)
    assert len(rows) == 2
    assert any(_cells("bob", "other") in row for row in rows)
    assert any(_cells("alice", "people") in row for row in rows)


def test_an_analyst_sees_only_their_own_budgets_and_charges(service: Service) -> None:
    service.ledger.grant("bob", "bobs-dataset-zq", veil.Budget(epsilon=1))
    service.ledger.reserve(
        "bob", "bobs-dataset-zq", veil.Budget(epsilon="1/10"), fingerprint="f" * 64,
        query="SELECT 'bob-marker-7q'",
    ).commit({"n": 1})  # fmt: skip
    query(service, "bob", {"dataset": "other", "sql": SQL.replace("people", "other"), "epsilon": 1})
    query(service, "alice")
    log_in(service, "alice")
    html = page(service)
    card(html, "alice", "people")
    card(html, "alice", "app")
    for theirs in ("bob", "bobs-dataset-zq", "bob-marker-7q", 'data-dataset="other"', ">other<"):
        assert theirs not in html
    csv = service.client.get("/dashboard/audit.csv")
    assert csv.status_code == 200
    assert "bob" not in csv.text
    assert ",alice,people,charge," in csv.text


@pytest.mark.parametrize(
    "key",
    ["x" * 43, "", "  ", "revoked", "alice+junk", "a" * 300, "ключ"],
    ids=["unknown", "empty", "blank", "revoked", "alice-plus-junk", "too-long", "non-ascii"],
)
def test_a_wrong_or_revoked_key_sees_only_the_login_form(service: Service, key: str) -> None:
    query(service, "alice")
    if key == "revoked":
        key = service.keys["revoked"]
    elif key == "alice+junk":
        key = service.keys["alice"] + "x"
    r = service.client.post("/dashboard/login", data={"key": key}, follow_redirects=False)
    assert r.status_code == 401
    assert "set-cookie" not in r.headers
    assert esc(WRONG_KEY) in r.text
    for secret in ("alice", "people", 'class="budget', "<table"):
        assert secret not in r.text
    assert page(service).count('name="key"') == 1  # still no session


def test_every_refused_key_gets_the_same_page(service: Service) -> None:
    answers = {
        service.client.post("/dashboard/login", data={"key": key}).text
        for key in ("x" * 43, service.keys["revoked"], service.keys["alice"][:-1])
    }
    assert len(answers) == 1


def test_rotating_or_revoking_a_key_ends_its_sessions(service: Service) -> None:
    principals = service.client.app.state.veil.principals
    log_in(service, "alice")
    assert "Signed in as <b>alice</b>" in page(service)
    service.keys["alice"] = principals.rotate("alice")
    ended = page(service)
    assert esc(ENDED) in ended
    assert "Signed in" not in ended
    assert service.client.cookies.get(COOKIE) is None  # the dead cookie was deleted
    log_in(service, "alice")  # the new key works
    assert "Signed in as <b>alice</b>" in page(service)
    principals.revoke("alice")
    assert esc(ENDED) in page(service)
    r = service.client.post("/dashboard/login", data={"key": service.keys["alice"]})
    assert r.status_code == 401


def test_logout_ends_the_session_for_good(service: Service) -> None:
    secret = log_in(service, "alice")
    r = service.client.post("/dashboard/logout", follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "/dashboard?logged_out=1"
    assert "Max-Age=0" in r.headers["set-cookie"]
    bye = service.client.get(r.headers["location"]).text
    assert "You are logged out." in bye
    assert "alice" not in bye
    service.client.cookies.set(COOKIE, secret, path="/dashboard")  # a copy of the old cookie
    again = page(service)
    assert esc(ENDED) in again
    assert "alice" not in again


def test_a_session_ends_when_it_expires(service: Service) -> None:
    log_in(service, "alice")
    assert "Signed in as <b>alice</b>" in page(service)
    engine = service.client.app.state.veil.principals.engine
    with engine.begin() as conn:
        conn.execute(update(sessions).values(expires_at="2000-01-01T00:00:00.000000+00:00"))
    html = page(service)
    assert esc(ENDED) in html
    assert "alice" not in html


def test_a_session_store_forgets_a_session_after_its_lifetime(
    service: Service, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    clock.install(monkeypatch, sessions_module)
    store = SessionStore(service.client.app.state.veil.principals, ttl_s=0.3)
    opened = store.open(service.keys["alice"])
    assert opened is not None
    secret, login = opened
    assert store.get(secret) == login
    clock.advance(0.4)
    assert store.get(secret) is None
    assert store.open(service.keys["revoked"]) is None
    assert store.get("x" * 43) is None
    assert store.get("") is None


def test_query_text_and_names_are_escaped(service: Service) -> None:
    query(service, "alice", {"dataset": "people", "sql": HOSTILE, "epsilon": 0.1})
    hostile_dataset = '<img src=x onerror="alert(1)">'
    service.ledger.grant("alice", hostile_dataset, veil.Budget(epsilon=1))
    service.ledger.reserve(
        "alice", hostile_dataset, veil.Budget(epsilon="1/10"), fingerprint='"><b>fp',
        query="</code></td><script>alert(2)</script>",
    )  # fmt: skip
    for who in ("alice", "root"):
        log_in(service, who)
        html = page(service)
        assert "<script" not in html  # the page has no script of its own either
        assert "<img" not in html
        assert "<b>fp" not in html
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
        assert "&lt;/code&gt;&lt;/td&gt;&lt;script&gt;alert(2)&lt;/script&gt;" in html
        assert esc(hostile_dataset) in html
        r = service.client.get("/dashboard")
        assert "script-src" not in r.headers["content-security-policy"]  # no script may run
        assert "default-src 'none'" in r.headers["content-security-policy"]


def test_the_bars_show_the_ledgers_numbers(service: Service) -> None:
    query(service, "alice")  # ε 1/4, committed
    running = service.ledger.reserve(
        "alice", "people", veil.Budget(epsilon="1/3"), fingerprint="r" * 64, query="running"
    )
    log_in(service, "alice")
    html = card(page(service), "alice", "people")
    spent = service.ledger.spent("alice", "people").epsilon
    assert spent == Fraction(1, 4) + Fraction(1, 3)
    left = service.ledger.remaining("alice", "people").eps
    assert f'title="exactly 0.25">{num(Fraction(1, 4))}</span> <span class="k">spent' in html
    assert f'title="exactly 1/3">{num(Fraction(1, 3))}</span> <span class="k">reserved' in html
    assert left == Fraction(53, 12)
    assert f'title="exactly 53/12">{num(left)}</span> <span class="k">left of</span>' in html
    running.commit({"n": 0})
    html = card(page(service), "alice", "people")
    assert f'title="exactly 7/12">{num(Fraction(7, 12))}</span> <span class="k">spent' in html
    assert "11 %" in html  # 7/12 of 5 is 11.7 %: shown rounded down


def test_crossing_a_threshold_shows_an_alert(service: Service) -> None:
    service.ledger.reserve(
        "alice", "people", veil.Budget(epsilon=3), fingerprint="a" * 64, query="big"
    ).commit({"n": 0})
    log_in(service, "alice")
    html = page(service)
    assert "crossed the 50% threshold" in html
    assert '<article class="budget"' in html  # 60 %: not yet marked hot
    service.ledger.reserve(
        "alice", "people", veil.Budget(epsilon=1), fingerprint="b" * 64, query="bigger"
    ).commit({"n": 0})
    html = page(service)
    assert "crossed the 80% threshold" in html
    assert '<article class="budget hot" data-analyst="alice" data-dataset="people">' in html


def test_the_csv_download_is_the_viewers_audit_trail(service: Service) -> None:
    query(service, "alice")
    assert service.client.get("/dashboard/audit.csv", follow_redirects=False).status_code == 303
    log_in(service, "root")
    r = service.client.get("/dashboard/audit.csv")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/csv")
    assert r.text == service.ledger.export_csv()
    assert "attachment" in r.headers["content-disposition"]


def test_a_login_form_posted_from_another_site_is_refused(service: Service) -> None:
    r = service.client.post(
        "/dashboard/login",
        data={"key": service.keys["alice"]},
        headers={"Origin": "https://evil.example"},
        follow_redirects=False,
    )
    assert r.status_code == 403
    assert "set-cookie" not in r.headers
    same = service.client.post(
        "/dashboard/login",
        data={"key": service.keys["alice"]},
        headers={"Origin": "http://testserver"},
        follow_redirects=False,
    )
    assert same.status_code == 303


def test_the_dashboard_is_not_in_the_openapi_document(service: Service) -> None:
    paths = service.client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p.startswith("/dashboard")]


@pytest.mark.slow
def test_a_thousand_charges_render_quickly_with_a_capped_audit_table(service: Service) -> None:
    ledger = service.ledger
    ledger.grant("carol", "people", veil.Budget(epsilon=20))
    for i in range(1000):
        who = "carol" if i % 4 == 0 else "alice"  # alice: 750, more than a chart draws
        ledger.reserve(
            who, "people", veil.Budget(epsilon="1/250"), fingerprint=f"{i:064x}",
            query=f"SELECT COUNT(*) AS n FROM people WHERE income > {i}",
        ).commit({"n": i})  # fmt: skip
    log_in(service, "root")
    html = page(service)
    print(f"\n1,000 charges: page {len(html) / 1024:.0f} KiB")
    rows = audit_rows(html)
    assert len(rows) == AUDIT_ROWS
    assert f"The latest {AUDIT_ROWS} of 1,000 charges" in html
    assert "WHERE income &gt; 999" in rows[0]  # the latest first
    assert "WHERE income &gt; 799" not in html  # the 201st latest is left to the CSV
    alices = re.search(r'data-analyst="alice" data-dataset="people">.*?<path class="line" '
                       r'd="([^"]+)"', html, re.S)  # fmt: skip
    assert alices is not None
    assert alices.group(1).count("H") <= 2 * PLOT_WIDTH + 2  # downsampled from 751 steps
    assert len(html) < PAGE_BYTES, f"the page is {len(html)} bytes at 1,000 charges"
    log_in(service, "alice")
    mine = page(service)
    assert len(audit_rows(mine)) == AUDIT_ROWS
    assert "of 750 charges" in mine


def test_a_chart_of_many_charges_is_downsampled_and_ends_at_the_total_used() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    steps = [(start, Fraction(0))]
    steps += [(start + timedelta(seconds=17 * i), Fraction(i, 1000)) for i in range(1, 5001)]
    view = BudgetView(
        analyst="alice", dataset="people", granted=veil.Budget(epsilon=10),
        spent=Spent(epsilon=Fraction(5)), remaining=veil.Budget(epsilon=5),
        committed=Fraction(5), reserved=Fraction(0), left=Fraction(5),
        used_share=Fraction(1, 2), steps=tuple(steps), charges=5000, cache_hits=0, alerts=0,
    )  # fmt: skip
    svg = chart(view, steps[-1][0], 0)
    line = re.search(r'<path class="line" d="([^"]+)"', svg)
    assert line is not None
    assert 100 < line.group(1).count("H") <= 2 * PLOT_WIDTH + 2
    # the last step is drawn at half the height: 5 of 10 used
    top, bottom = 12, 150 - 26
    assert line.group(1).endswith(f"V{(top + bottom) / 2:.1f}")
    assert "of 10</title>" in svg


@pytest.mark.postgres
def test_sessions_live_in_a_postgresql_ledger_too() -> None:
    with postgres_ledger() as url, Principals(url) as principals:
        key = principals.add("alice")
        store = SessionStore(principals)
        SessionStore(principals)  # a second worker starting: the table exists, nothing fails
        opened = store.open(key)
        assert opened is not None
        secret, login = opened
        assert store.get(secret) == login
        principals.rotate("alice")
        assert store.get(secret) is None


APPROX = veil.Budget(epsilon=1, delta="1/1000")


@pytest.mark.parametrize(
    ("granted", "spent"),
    [
        (veil.Budget(epsilon=2), Spent(epsilon=Fraction(1, 3))),
        (veil.Budget(epsilon=2), Spent(epsilon=Fraction(2))),
        (APPROX, Spent(Fraction(1, 2), Fraction(1, 10**4))),
        (APPROX, Spent(Fraction(0), Fraction(0), Fraction(1, 50))),
        (APPROX, Spent(Fraction(0), Fraction(1, 1000), Fraction(1))),
        (veil.Budget(rho="1/2"), Spent(rho=Fraction(1, 8))),
    ],
    ids=["pure", "pure-exhausted", "approx", "approx-zcdp", "approx-no-delta-left", "zcdp"],
)
def test_the_bars_measure_use_as_the_ledgers_remaining_does(
    granted: veil.Budget, spent: Spent
) -> None:
    left = spending.remaining(granted, spent)
    assert used(granted, spent) == primary(granted) - primary(left)
