"""The PHP shop page (examples/php-shop/) in headless Chromium: a real ``veil serve`` set up
from the example's own files (its generator and its veil.toml), the page served by
``php -S`` on loopback through the PHP client, and what a person would see on it."""

from __future__ import annotations

import contextlib
import csv
import math
import os
import re
import shutil
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.server import Deployment, free_port, serve

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "php-shop"
REGIONS = ("Central", "East", "North", "South", "West")
CATEGORIES = ("Books", "Clothing", "Electronics", "Garden", "Groceries", "Toys")
# "1,234 ± 56" and "€64.95 ± €6.03": a number, then its error bar
COUNT = re.compile(r"^\d{1,3}(,\d{3})* ± \d{1,3}(,\d{3})*$")
EUROS = re.compile(r"^€\d{1,3}(,\d{3})*\.\d\d ± €\d{1,3}(,\d{3})*\.\d\d$")


@pytest.fixture
def php(program: Callable[[str, str], str]) -> str:
    return program("php", "php-cli")


@contextlib.contextmanager
def php_server(php: str, env: dict[str, str], log: Path) -> Iterator[str]:
    """``php -S 127.0.0.1:PORT -t examples/php-shop`` until the block ends."""
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [php, "-S", f"127.0.0.1:{port}", "-t", str(EXAMPLE)],
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 20
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"php -S exited: {log.read_text(errors='replace')}")
            with contextlib.suppress(httpx.TransportError):
                httpx.get(url + "generate.php", timeout=1)  # any answer: it listens
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"php -S did not listen: {log.read_text(errors='replace')}")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def shop(php: str, tmp_path: Path) -> tuple[Deployment, Path]:
    """The example's deployment in ``tmp_path``: its generated orders, its veil.toml (ledger
    relative to it), a key for the page and its two grants."""
    orders = tmp_path / "orders.csv"
    subprocess.run(
        [php, str(EXAMPLE / "generate.php"), str(orders)], check=True, capture_output=True
    )
    shutil.copy(EXAMPLE / "veil.toml", tmp_path / "veil.toml")
    deployment = Deployment(tmp_path)  # its ledger: tmp_path/veil-ledger.db, as the file says
    deployment.add_key("shop-web", cli=True)  # veil admin analyst add shop-web --config …
    deployment.grant("shop-web", "shop", 5)
    deployment.grant("shop-web", "shop-categories", 2)
    return deployment, orders


def category_scores(orders: Path) -> dict[str, int]:
    buyers: dict[str, set[str]] = defaultdict(set)
    with orders.open(newline="") as f:
        for row in csv.DictReader(f):
            buyers[row["category"]].add(row["customer_id"])
    return {category: len(ids) for category, ids in buyers.items()}


def text(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, css).text).strip()


def test_the_shop_page_shows_private_statistics_with_error_bars_and_the_budget(
    php: str, tmp_path: Path, browser: Any, screenshots: Path
) -> None:
    from selenium.webdriver.common.by import By

    deployment, orders = shop(php, tmp_path)
    scores = category_scores(orders)
    best, second = sorted(scores.values(), reverse=True)[:2]
    # the exponential mechanism (ε = 0.5, Δ = 1) picks another category with probability at
    # most 5·exp(-0.5·(best − second)/2): below 1e-9 for these data, so the page must show it
    assert 5 * math.exp(-0.25 * (best - second)) < 1e-9
    popular = max(scores, key=lambda c: scores[c])

    with serve(deployment.config, workers=1) as server:
        env = {
            "VEIL_URL": server.base_url,
            "VEIL_KEY": deployment.keys["shop-web"],
            "VEIL_SHOP_DATASET": "shop",
            "VEIL_SHOP_ORDERS": str(orders),
            "VEIL_SHOP_CACHE": str(tmp_path / "category-choice.json"),
        }
        with php_server(php, env, tmp_path / "php.log") as url:
            browser.get(url)
            assert browser.title == "Kestrel & Co. — shop statistics"
            assert not browser.find_elements(By.ID, "error"), text(browser, "#error")

            rows = browser.find_elements(By.CSS_SELECTOR, "#regions tr.region")
            seen = {}
            for row in rows:
                region = str(row.find_element(By.CSS_SELECTOR, "td").text)
                seen[region] = (
                    str(row.find_element(By.CSS_SELECTOR, "td.orders").text),
                    str(row.find_element(By.CSS_SELECTOR, "td.basket").text),
                )
            assert sorted(seen) == list(REGIONS)
            for region, (n, basket) in seen.items():
                assert COUNT.match(n), f"{region}: orders {n!r} is not 'number ± bar'"
                assert EUROS.match(basket), f"{region}: basket {basket!r} is not '€x ± €y'"

            mean = text(browser, "#mean-basket .big").replace("\n", " ")
            assert EUROS.match(mean), mean
            assert text(browser, "#category") == popular
            assert "exponential mechanism" in text(browser, "#popular-category")
            budget = text(browser, "#budget")
            # a fresh page spent ε = 1 on the regions and 0.5 on the mean: 3.5 of 5 left
            assert re.search(r"ε 3\.5\s+of 5", budget), budget
            assert re.search(r"category choices: ε 1\.5\s+of 2 left", budget), budget
            assert "95 % error bar" in text(browser, "#about")
            browser.save_screenshot(str(screenshots / "php-shop.png"))

            # a reload asks the same questions: answered from veil's cache, nothing spent,
            # and the remembered category choice is shown again without a new draw
            browser.refresh()
            assert "no budget spent" in text(browser, "#cached")
            assert re.search(r"ε 3\.5\s+of 5", text(browser, "#budget"))
            assert re.search(r"ε 1\.5\s+of 2 left", text(browser, "#budget"))
            assert "shown again at no cost" in text(browser, "#popular-category")
            assert text(browser, "#category") == popular
            browser.save_screenshot(str(screenshots / "php-shop-reloaded.png"))


def test_the_shop_page_says_when_the_budget_is_spent(
    php: str, tmp_path: Path, browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    deployment, orders = shop(php, tmp_path)
    with serve(deployment.config, workers=1) as server:
        # a key whose grant is too small for the page's first query (ε = 1)
        deployment.add_key("intern")
        deployment.grant("intern", "shop", "0.5")
        env = {
            "VEIL_URL": server.base_url,
            "VEIL_KEY": deployment.keys["intern"],
            "VEIL_SHOP_ORDERS": str(orders),
            "VEIL_SHOP_CACHE": str(tmp_path / "category-choice.json"),
        }
        with php_server(php, env, tmp_path / "php.log") as url:
            browser.get(url)
            message = text(browser, "#error")
            assert "privacy budget for these statistics is spent" in message
            assert "needs ε = 1, ε = 0.5 is left" in message
            assert not browser.find_elements(By.ID, "regions")
