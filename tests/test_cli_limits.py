"""``--limits auto`` (and ``--limits-share``) in ``veil query`` / ``explain``, end to end on a
small Parquet file through typer's runner."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli_support import invoke

SQL = "SELECT COUNT(*) AS n FROM events"


@pytest.fixture(scope="module")
def events(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """1–20 rows per user, 100 users of each count (synthetic)."""
    rows = [1 + (i % 20) for i in range(2000)]
    table = pa.table({"uid": np.repeat(np.arange(len(rows)), rows)})
    path = tmp_path_factory.mktemp("data") / "events.parquet"
    pq.write_table(table, path)
    return path


def test_query_with_limits_auto_says_the_limit_chosen(events: Path) -> None:
    code, out, err = invoke(
        "query", SQL, "--table", f"events={events}", "--privacy-unit", "uid",
        "--epsilon", "1", "--limits", "auto",
    )  # fmt: skip
    assert code == 0, err
    assert "auto limits: max_rows=" in out
    assert "expected dropped" in out


def test_the_declared_max_rows_caps_the_candidates(events: Path) -> None:
    code, out, err = invoke(
        "query", SQL, "--table", f"events={events}", "--privacy-unit", "uid",
        "--epsilon", "1", "--limits", "auto", "--max-rows", "6",
    )  # fmt: skip
    assert code == 0, err
    assert "candidates 1–6" in out


def test_explain_with_limits_auto_shows_the_steps_cost(events: Path) -> None:
    code, out, err = invoke(
        "explain", SQL, "--table", f"events={events}", "--privacy-unit", "uid",
        "--epsilon", "1", "--limits", "auto", "--limits-share", "0.2",
    )  # fmt: skip
    assert code == 0, err
    assert "histogram of rows per unit" in out
    assert "ε=0.2" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--limits", "auto"], "--limits auto needs a privacy unit"),
        (["--privacy-unit", "uid", "--limits", "auto", "--limits-share", "1"],
         "--limits-share must lie strictly between 0 and 1"),
        (["--privacy-unit", "uid", "--limits-share", "0.5"], "--limits-share needs --limits auto"),
        (["--privacy-unit", "uid", "--limits", "some"], "--limits some is not understood"),
    ],
)  # fmt: skip
def test_bad_limits_are_refused_with_cli_syntax(
    events: Path, extra: list[str], message: str
) -> None:
    code, out, err = invoke("query", SQL, "--table", f"events={events}", "--epsilon", "1", *extra)
    assert code != 0
    assert message in out + err


# -- --target with --limits auto --------------------------------------------------------------
def _json(*args: str) -> dict[str, Any]:
    code, out, err = invoke(*args, "--format", "json")
    assert code == 0, err
    payload: dict[str, Any] = json.loads(out)
    return payload


def test_query_with_targets_and_limits_auto_charges_the_step_and_the_epsilon_chosen(
    events: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    code, _, err = invoke(
        "budget", "grant", "--ledger", url, "-a", "cli", "--dataset", "events", "-e", "5"
    )
    assert code == 0, err
    common = ("--table", f"events={events}", "--privacy-unit", "uid", "--ledger", url)
    answer = _json("query", SQL, *common, "--target", "n=±100", "--limits", "auto")
    target = answer["target"]
    limits = target["limits"]
    step, query = Fraction(limits["limits_epsilon_exact"]), Fraction(target["epsilon_exact"])
    assert Fraction(limits["epsilon_min_exact"]) <= query <= Fraction(limits["epsilon_max_exact"])
    assert Fraction(answer["cost"]["exact"]["epsilon"]) == step + query
    assert Fraction(answer["remaining"]["exact"]["epsilon"]) == 5 - step - query
    assert answer["auto_limits"]["max_rows"] in (20, 24)
    assert answer["error_bars"][0][0] <= 100
    assert all(t["met"] for t in target["targets"])
    code, out, err = invoke("query", SQL, *common, "--target", "n=±100", "--limits", "auto")
    assert code == 0, err  # the same question again: both steps from the cache, free
    assert "smallest epsilon meeting every target at the limits chosen (max_rows=" in out
    assert "cost ε=0" in out


def test_explain_with_targets_and_limits_auto_shows_the_range_and_reads_nothing(
    events: Path,
) -> None:
    common = ("--table", f"events={events}", "--privacy-unit", "uid")
    explained = _json("explain", SQL, *common, "--target", "n=±100", "--limits", "auto")
    limits = explained["target"]["limits"]
    assert limits["cheapest"]["max_rows"] == 1
    assert limits["dearest"]["max_rows"] == 1024
    top = Fraction(limits["limits_epsilon_exact"]) + Fraction(limits["epsilon_max_exact"])
    assert Fraction(explained["cost"]["exact"]["epsilon"]) == top  # the most it can cost
    code, out, err = invoke("explain", SQL, *common, "--target", "n=±100", "--limits", "auto")
    assert code == 0, err
    assert "accuracy targets with limits='auto': the limits step costs ε_L=" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--limits-share", "0.2"], "with --target the limits step's ε is set by the targets"),
        (["--curve"], "--curve with --target and --limits auto is not drawn"),
        (["--bounds", "auto"], "--bounds auto and --limits auto together is not supported"),
    ],
)
def test_targets_with_limits_auto_refuse_what_they_cannot_do(
    events: Path, extra: list[str], message: str
) -> None:
    command = "explain" if "--curve" in extra else "query"
    code, out, err = invoke(
        command, SQL, "--table", f"events={events}", "--privacy-unit", "uid", "--target",
        "n=±100", "--limits", "auto", *extra,
    )  # fmt: skip
    assert code == 2
    assert message in out + err
