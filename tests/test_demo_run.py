"""`veil demo` end to end: synthetic table, DP queries with error bars, the budget left."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from veil.cli import app
from veil.demo import DEMO_QUERIES


def test_the_demo_prints_every_query_with_error_bars_and_the_budget_left() -> None:
    result = CliRunner().invoke(app, ["demo", "--patients", "3000"])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for step in DEMO_QUERIES:
        assert step.title in out
    assert out.count("±") > 10
    assert "left for analyst 'demo': (ε=0.3" in out
    assert "one more query at ε = 1 is refused" in out
    assert "privacy budget exhausted" in out


def test_the_demo_in_json_prints_one_result_object_per_query() -> None:
    result = CliRunner().invoke(app, ["demo", "--patients", "2000", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(DEMO_QUERIES)
    payloads = [json.loads(line) for line in lines]
    assert [p["cost"]["epsilon"] for p in payloads] == [q.epsilon for q in DEMO_QUERIES]
    assert payloads[1]["columns"] == ["stay_days", "visits"]
    assert len(payloads[1]["rows"]) == 6  # every declared bin, empty or not
    assert payloads[-1]["remaining"]["epsilon"] == 0.3


def test_a_bad_demo_size_is_a_user_error() -> None:
    result = CliRunner().invoke(app, ["demo", "--patients", "0"])
    assert result.exit_code == 2
    assert "patients must be a positive integer" in result.stderr
