"""``import veil.client`` loads only what the ``client`` extra promises (httpx, imported when a
:class:`veil.client.Client` is made) and the standard library: none of the engine's, the
ledger's or the SQL front end's packages. Checked in a fresh interpreter, whose
``sys.modules`` nothing else has filled."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("duckdb", "numpy", "pandas", "pyarrow", "sqlalchemy", "sqlglot")


def _loaded_after(statement: str) -> list[str]:
    probe = (
        "import json, sys\n"
        f"{statement}\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.system
def test_import_veil_client_loads_no_engine_ledger_or_sql_package() -> None:
    assert _loaded_after("import veil.client") == []


@pytest.mark.system
def test_reading_a_query_answer_loads_no_engine_ledger_or_sql_package() -> None:
    """The answer's shapes (Result, budgets, auto bounds, a history page) are light too."""
    answer = {
        "columns": ["n"],
        "rows": [[42]],
        "error_bars": [[3.5]],
        "error_bar_level": 0.95,
        "cost": {"kind": "pure", "exact": {"epsilon": "1/2"}},
        "usage": [],
        "fingerprint": "f",
        "cached": False,
        "notes": [],
        "private": True,
        "remaining": {"kind": "pure", "exact": {"epsilon": "1/2"}},
    }
    statement = (
        "from veil.client.answers import result_from_payload\n"
        f"r = result_from_payload({answer!r})\n"
        "assert r.rows == [[42]] and r.error_bars(0.95) == [[3.5]], r\n"
        "from veil.client.http import _record\n"
        "_record({'id': 1, 'at': '2026-01-01T00:00:00+00:00', 'event': 'grant'}, 'a', 'd')"
    )
    assert _loaded_after(statement) == []


@pytest.mark.system
def test_the_probe_sees_a_heavy_import() -> None:
    """The check can fail: the samplers' package does load numpy, and is reported."""
    assert "numpy" in _loaded_after("import veil.noise")
