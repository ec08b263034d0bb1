"""`veil demo` end to end: synthetic table, DP queries with error bars, the budget left."""

from __future__ import annotations

import json
from fractions import Fraction

from typer.testing import CliRunner

from veil.cli import app
from veil.demo import DEMO_BUDGET_EPSILON, DEMO_QUERIES


def test_the_demo_prints_every_query_with_error_bars_and_the_budget_left() -> None:
    result = CliRunner().invoke(app, ["demo", "--patients", "3000"])
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    for step in DEMO_QUERIES:
        assert step.title in out
    assert out.count("±") > 10
    left = Fraction(str(DEMO_BUDGET_EPSILON)) - sum(Fraction(str(q.epsilon)) for q in DEMO_QUERIES)
    assert f"left for analyst 'demo': (ε={float(left):g}" in out
    assert "one more query at ε = 1 is refused" in out
    assert "privacy budget exhausted" in out


def test_the_demo_in_json_prints_one_result_object_per_query() -> None:
    result = CliRunner().invoke(app, ["demo", "--patients", "2000", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == len(DEMO_QUERIES)
    payloads = [json.loads(line) for line in lines]
    assert [p["cost"]["epsilon"] for p in payloads] == [q.epsilon for q in DEMO_QUERIES]
    by_title = {q.title: p for q, p in zip(DEMO_QUERIES, payloads, strict=True)}
    histogram = by_title["Length of stay, as a histogram over declared bins"]
    assert histogram["columns"] == ["stay_days", "visits"]
    assert len(histogram["rows"]) == 6  # every declared bin, empty or not
    listed = by_title["Public keys: regions listed in WHERE"]
    assert [r[0] for r in listed["rows"]] == ["Atlantis", "Highlands", "Islands"]
    assert listed["cost"]["delta"] == 0  # public keys: no partition selection
    left = Fraction(str(DEMO_BUDGET_EPSILON)) - sum(Fraction(str(q.epsilon)) for q in DEMO_QUERIES)
    assert payloads[-1]["remaining"]["exact"]["epsilon"] == str(left)


def test_a_bad_demo_size_is_a_user_error() -> None:
    result = CliRunner().invoke(app, ["demo", "--patients", "0"])
    assert result.exit_code == 2
    assert "patients must be a positive integer" in result.stderr
