"""The PostgreSQL tests skip loudly without a server, and fail when it is required (CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TARGET = f"{HERE / 'test_ledger.py'}::test_grants_lists_every_budget[postgresql]"


def _run(require: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "VEIL_REQUIRE_POSTGRES"}
    env["VEIL_TEST_POSTGRES_URL"] = "postgresql://nobody@127.0.0.1:1/none"
    if require:
        env["VEIL_REQUIRE_POSTGRES"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", TARGET],
        cwd=HERE.parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_an_unreachable_server_skips_with_the_reason() -> None:
    done = _run(require=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout
    assert "SKIPPING PostgreSQL ledger test: PostgreSQL is not reachable" in done.stdout


@pytest.mark.slow
def test_an_unreachable_server_fails_when_postgres_is_required() -> None:
    done = _run(require=True)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "VEIL_REQUIRE_POSTGRES is set but PostgreSQL is not reachable" in done.stdout
