"""The shell, as a user drives it: separate `veil` processes sharing one SQLite ledger file.

A grant, a JSON query on the LFS sample (shape of --format json), the same query again from a
new process (served from the ledger's cache: same rows, zero cost, nothing spent), and a query
the remaining budget cannot pay for (refused with exit code 2, nothing charged).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SQL = "SELECT ILOSTAT, COUNT(*) AS n FROM lfs GROUP BY ILOSTAT"


def veil_cli(*args: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from veil.cli import main; sys.argv[0] = 'veil'; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )


def ok_json(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.slow
def test_the_cli_charges_once_caches_across_processes_and_refuses_overspending(
    lfs_csv: Path, tmp_path: Path
) -> None:
    ledger = f"sqlite:///{tmp_path / 'ledger.db'}"
    who = ["--ledger", ledger, "--analyst", "alice", "--dataset", "lfs"]
    grant = veil_cli("budget", "grant", *who, "--epsilon", "1", "--delta", "1e-5")
    assert grant.returncode == 0, grant.stderr
    ask = ["query", "--table", f"lfs={lfs_csv}", SQL, "--delta", "1e-6", *who]
    ask += ["--column", "ILOSTAT:INTEGER"]  # CSV columns are text unless declared

    first = ok_json(veil_cli(*ask, "--epsilon", "0.5", "--format", "json"))
    assert first["columns"] == ["ILOSTAT", "n"]
    assert sorted(row[0] for row in first["rows"]) == [1, 2, 3, 9]
    assert [len(r) for r in first["error_bars"]] == [2] * len(first["rows"])
    assert all(bar[0] is None and bar[1] > 0 for bar in first["error_bars"])
    assert first["cost"]["exact"] == {"epsilon": "1/2", "delta": "1/1000000"}
    assert first["cached"] is False

    again = ok_json(veil_cli(*ask, "--epsilon", "0.5", "--format", "json"))
    assert again["cached"] is True
    assert again["rows"] == first["rows"]
    assert again["cost"]["exact"]["epsilon"] == "0"

    shown = ok_json(veil_cli("budget", "show", "--ledger", ledger, "--format", "json"))
    (entry,) = shown["budgets"]
    assert entry["remaining"]["exact"] == {"epsilon": "1/2", "delta": "9/1000000"}

    refused = veil_cli(*ask, "--epsilon", "0.9", "--format", "json")
    assert refused.returncode == 2
    # errors go to stderr, as one JSON line with --format json (after any alert lines)
    last = [line for line in refused.stderr.splitlines() if line.startswith("{")][-1]
    error = json.loads(last)["error"]
    assert error["type"] == "BudgetExhaustedError"
    assert "remaining (ε=0.5" in error["message"]
    after = ok_json(veil_cli("budget", "show", "--ledger", ledger, "--format", "json"))
    assert after["budgets"][0]["remaining"] == entry["remaining"]
