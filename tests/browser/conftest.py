"""Shared fixtures of the browser tests: headless Chromium driven by Selenium, and the
directory screenshots are saved in (``build/screenshots/``, not committed).

Nothing is skipped: without Chromium or its driver the tests FAIL, saying that ``make system``
installs them (Debian packages ``chromium`` and ``chromium-driver``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "build" / "screenshots"

CHROMIUM = os.environ.get("VEIL_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("VEIL_CHROMEDRIVER", "/usr/bin/chromedriver")


def require_program(path: str, package: str) -> str:
    """``path`` if it is an executable (or a name on PATH); else fail saying what installs it."""
    found = path if os.access(path, os.X_OK) else shutil.which(path)
    if found is None:
        pytest.fail(
            f"{path} is missing: `make system` installs it (Debian package {package}, "
            "scripts/ensure-debian.sh)"
        )
    return found


@pytest.fixture
def program() -> Callable[[str, str], str]:
    """``program(path, package)``: the executable, or a test failure saying ``make system``
    installs ``package``."""
    return require_program


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    """A headless Chromium (``selenium.webdriver.Chrome``), 1280×1000, quit afterwards."""
    chromium = require_program(CHROMIUM, "chromium")
    driver_path = require_program(CHROMEDRIVER, "chromium-driver")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def screenshots() -> Path:
    """``build/screenshots/`` (created; gitignored with build/)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
