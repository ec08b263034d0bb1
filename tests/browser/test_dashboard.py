"""The budget dashboard in headless Chromium against a real ``veil serve`` (uvicorn, two
workers sharing the ledger): a wrong key sees nothing but the form; an analyst logs in with a
key, sees their budget, runs a query through the API, reloads and sees the spend move; an
administrator sees everyone; logout ends it. Screenshots go to ``build/screenshots/``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from service.server import Deployment, Server, serve

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

QUERIES = (
    ("SELECT COUNT(*) AS n FROM people", 0.5),
    ("SELECT state, COUNT(*) AS n FROM people GROUP BY state", 0.25),
    ("SELECT AVG(income) AS mean FROM people WHERE age >= 30", 0.2),
    ("SELECT COUNT(*) AS n FROM people WHERE state = '<script>alert(1)</script>'", 0.05),
)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    d = Deployment(tmp_path_factory.mktemp("dashboard"))
    d.add_table("people", 2000, seed=7, total_epsilon=8.0)
    d.add_table("visits", 500, seed=8)
    d.write()
    d.add_key("alice")
    d.add_key("bob")
    d.add_key("root", "admin")
    d.grant("alice", "people", 2)
    d.grant("alice", "visits", 1, delta=1e-6)
    d.grant("bob", "people", 3)
    return d


@pytest.fixture(scope="module")
def server(deployment: Deployment) -> Iterator[Server]:
    with serve(deployment.config, workers=2) as s:
        yield s


def _by(css: str) -> tuple[str, str]:
    from selenium.webdriver.common.by import By

    return (By.CSS_SELECTOR, css)


def log_in(browser: WebDriver, server: Server, key: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{server.base_url}/dashboard")
    field = browser.find_element(*_by("input[name=key]"))
    field.send_keys(key)
    submit(browser, "form.login button[type=submit]")


def submit(browser: WebDriver, button: str) -> None:
    """Click ``button`` and wait until the page it loads has replaced this one: the old
    button is stale. ChromeDriver reports a node the new page has dropped either as a stale
    element or, when the old document goes mid-call, as an inspector error "Node with given
    id does not belong to the document" (seen in CI): both mean it is gone."""
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
    from selenium.webdriver.support.wait import WebDriverWait

    old = browser.find_element(*_by(button))
    old.click()

    def gone(_: object) -> bool:
        try:
            old.is_enabled()
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            if "does not belong to the document" in str(exc.msg):
                return True
            raise
        return False

    WebDriverWait(browser, 20).until(gone)


def card_text(browser: WebDriver, analyst: str, dataset: str) -> str:
    card = browser.find_element(
        *_by(f'article.budget[data-analyst="{analyst}"][data-dataset="{dataset}"]')
    )
    return str(card.find_element(*_by("p.nums")).text)


def bar_width(browser: WebDriver, analyst: str, dataset: str) -> str:
    bar = browser.find_element(
        *_by(f'article.budget[data-analyst="{analyst}"][data-dataset="{dataset}"] .bar .spent')
    )
    return str(bar.get_attribute("style"))


def shoot(browser: WebDriver, path: Path, width: int = 1280) -> None:
    """A screenshot of the whole page at ``width`` pixels."""
    browser.set_window_size(width, 900)
    height = int(browser.execute_script("return document.documentElement.scrollHeight"))
    browser.set_window_size(width, min(height + 40, 6000))
    browser.save_screenshot(str(path))
    assert path.stat().st_size > 10_000, f"{path} looks empty"


def test_a_wrong_key_sees_only_the_login_form(
    browser: WebDriver, server: Server, deployment: Deployment, screenshots: Path
) -> None:
    browser.get(f"{server.base_url}/dashboard")
    shoot(browser, screenshots / "dashboard-login.png")
    for key in ("not-a-key", deployment.keys["alice"][:-2]):
        log_in(browser, server, key)
        message = browser.find_element(*_by(".message.error")).text
        assert "not accepted" in message
        assert browser.find_elements(*_by("article.budget")) == []
        assert "alice" not in browser.page_source
        assert browser.get_cookies() == []
    shoot(browser, screenshots / "dashboard-wrong-key.png")


def test_an_analyst_sees_the_spend_move_after_a_query(
    browser: WebDriver, server: Server, deployment: Deployment, screenshots: Path
) -> None:
    log_in(browser, server, deployment.keys["alice"])
    assert "Signed in as alice" in browser.find_element(*_by("header.top")).text
    cookie = next(c for c in browser.get_cookies() if c["name"] == "veil_session")
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    before = card_text(browser, "alice", "people")
    assert before == "ε 0 spent · 0 reserved · 2 left of 2"
    assert "width:0%" in bar_width(browser, "alice", "people").replace(" ", "")

    with server.client(deployment.keys["alice"]) as api:
        for sql, epsilon in QUERIES:
            r = api.post("/v1/query", json={"dataset": "people", "sql": sql, "epsilon": epsilon})
            assert r.status_code == 200, r.text
        r = api.post(
            "/v1/query",
            json={"dataset": "visits", "sql": "SELECT COUNT(*) AS n FROM visits", "epsilon": 0.3},
        )
        assert r.status_code == 200, r.text
    browser.refresh()

    after = card_text(browser, "alice", "people")
    assert after == "ε 1 spent · 0 reserved · 1 left of 2"
    assert "width:50%" in bar_width(browser, "alice", "people").replace(" ", "")
    assert "50 % used" in browser.find_element(*_by('article[data-dataset="people"] .pct')).text
    rows = browser.find_elements(*_by("table tbody tr"))
    assert len(rows) == len(QUERIES) + 1
    assert "<script>alert(1)</script>" in rows[1].text  # shown as text, escaped
    assert browser.find_elements(*_by("script")) == []  # and nothing runs
    assert "bob" not in browser.page_source
    shoot(browser, screenshots / "dashboard-analyst.png")

    browser.set_window_size(390, 900)
    overflow = browser.execute_script(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, "the page scrolls sideways in a narrow window"
    shoot(browser, screenshots / "dashboard-narrow.png", width=390)

    browser.set_window_size(1280, 900)
    submit(browser, "header.top form button")
    assert "You are logged out." in browser.find_element(*_by(".message")).text
    assert browser.find_elements(*_by("article.budget")) == []


def test_an_administrator_sees_every_grant(
    browser: WebDriver, server: Server, deployment: Deployment, screenshots: Path
) -> None:
    with server.client(deployment.keys["bob"]) as api:
        r = api.post(
            "/v1/query",
            json={"dataset": "people", "sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 0.7},
        )
        assert r.status_code == 200, r.text
    log_in(browser, server, deployment.keys["root"])
    cards = browser.find_elements(*_by("article.budget[data-analyst]"))
    assert {(c.get_attribute("data-analyst"), c.get_attribute("data-dataset")) for c in cards} == {
        ("alice", "people"),
        ("alice", "visits"),
        ("bob", "people"),
    }
    assert card_text(browser, "bob", "people").startswith("ε 0.7 spent")
    assert browser.find_elements(*_by('article.budget[data-dataset="people"]:not([data-analyst])'))
    shoot(browser, screenshots / "dashboard-admin.png")
