"""``veil audit query`` on the command line (``veil.cli_audit``): the report for people and
for programs, its exit code, and user errors in the CLI's syntax."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import invoke
from veil.audit import NOT_DP

pytestmark = pytest.mark.statistical


def _invoke(*args: str) -> tuple[int, str, str]:
    return invoke("audit", "query", *args)


def test_a_passing_query_prints_its_table_and_exits_0(pums: Path) -> None:
    code, out, _ = _invoke(
        "SELECT sex, COUNT(*) AS n, AVG(income) AS m FROM pums GROUP BY sex",
        "--table",
        f"pums={pums}",
        "--column",
        "sex:INTEGER",
        "--column",
        "income:DOUBLE",
        "--bounds",
        "income=0:200000",
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
        "--releases",
        "1000",
    )
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == NOT_DP
    assert lines[-1] == NOT_DP
    assert "verdict: PASS" in out
    assert "add-new-group" in out
    assert "error bars (95%)" in out


def test_json_is_one_object_with_the_verdict(pums: Path) -> None:
    code, out, _ = _invoke(
        "SELECT COUNT(*) AS n FROM pums",
        "-t",
        f"pums={pums}",
        "-e",
        "1",
        "-n",
        "400",
        "--format",
        "json",
    )
    report = json.loads(out)
    assert report["warning"] == NOT_DP
    assert code == {"PASS": 0, "FAIL": 1, "INCONCLUSIVE": 2}[report["verdict"]]
    assert report["releases_per_side"] == 400


def test_user_errors_name_the_value_and_exit_2(pums: Path, tmp_path: Path) -> None:
    code, _, err = _invoke("SELECT COUNT(*) AS n FROM t", "-t", f"t={tmp_path}/no.csv", "-e", "1")
    assert code == 2
    assert "no file at" in err
    code, _, err = _invoke(
        "SELECT COUNT(*) AS n FROM t", "-t", f"t={pums}", "-e", "1", "--neighbours", "all"
    )
    assert code == 2
    assert "--neighbours must be auto, got 'all'" in err
    code, _, err = _invoke("SELECT COUNT(*) AS n FROM t", "-t", f"t={pums}", "-e", "1", "-f", "csv")
    assert code == 2
    assert "--format must be table or json" in err
