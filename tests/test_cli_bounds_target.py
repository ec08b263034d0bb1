"""``--target`` with ``--bounds auto`` in ``veil query`` / ``explain``, end to end on a small
Parquet file through typer's runner: the declared range given beside the auto column, the
JSON ``target.bounds``, the charges of the step and of the ε chosen, a repeat free, and the
refusals (no declared range, ``--bounds-share``, ``--curve``, ``--limits auto`` too, a target
on the sum of the auto column: its error would rest on the clamping)."""

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

SQL = "SELECT SUM(x) AS total, COUNT(*) AS n FROM t"
AUTO = ("--bounds", "x=0:1000000", "--bounds", "x=auto")  # the declared range, then auto


@pytest.fixture(scope="module")
def incomes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """3,000 people, one row each, incomes spread from 5,000 to 100,000 (synthetic)."""
    x = np.geomspace(5_000, 100_000, 3000)
    path = tmp_path_factory.mktemp("data") / "incomes.parquet"
    pq.write_table(pa.table({"uid": np.arange(len(x)), "x": x}), path)
    return path


def _json(*args: str) -> dict[str, Any]:
    code, out, err = invoke(*args, "--format", "json")
    assert code == 0, err
    payload: dict[str, Any] = json.loads(out)
    return payload


def test_query_with_targets_and_bounds_auto_charges_the_step_and_the_epsilon_chosen(
    incomes: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    code, _, err = invoke(
        "budget", "grant", "--ledger", url, "-a", "cli", "--dataset", "t", "-e", "5"
    )
    assert code == 0, err
    common = ("--table", f"t={incomes}", "--privacy-unit", "uid", "--ledger", url, *AUTO)
    answer = _json("query", SQL, *common, "--target", "n=±10")
    target = answer["target"]
    bounds = target["bounds"]
    step, query = Fraction(bounds["bounds_epsilon_exact"]), Fraction(target["epsilon_exact"])
    assert Fraction(bounds["epsilon_min_exact"]) <= query <= Fraction(bounds["epsilon_max_exact"])
    assert Fraction(answer["cost"]["exact"]["epsilon"]) == step + query
    assert Fraction(answer["remaining"]["exact"]["epsilon"]) == 5 - step - query
    assert bounds["widest"] == {"x": {"lower": 0.0, "upper": 1_000_000.0}}
    assert bounds["chosen"] == {"x": {"lower": 0.0, "upper": 131072.0}}
    assert answer["auto_bounds"][0]["upper"] == 131072.0
    assert answer["error_bars"][0][1] <= 10
    assert all(t["met"] for t in target["targets"])
    code, out, err = invoke("query", SQL, *common, "--target", "n=±10")
    assert code == 0, err  # the same question again: both steps from the cache, free
    assert "smallest epsilon meeting every target at the bounds chosen (x: [0, 131072])" in out
    assert "cost ε=0" in out


def test_query_without_a_ledger_is_granted_the_most_the_request_can_cost(incomes: Path) -> None:
    common = ("--table", f"t={incomes}", "--privacy-unit", "uid", *AUTO)
    answer = _json("query", SQL, *common, "--target", "n=±10")
    bounds = answer["target"]["bounds"]
    assert bounds["covers_dearest"] is True  # the one-shot grant: ε_B + ε_max
    assert answer["error_bars"][0][1] <= 10


def test_explain_with_targets_and_bounds_auto_shows_the_range_and_reads_nothing(
    incomes: Path,
) -> None:
    common = ("--table", f"t={incomes}", "--privacy-unit", "uid", *AUTO)
    explained = _json("explain", SQL, *common, "--target", "n=±10")
    bounds = explained["target"]["bounds"]
    assert bounds["narrowest"] == {"x": {"lower": 0.0, "upper": 2.0**-16}}
    assert bounds["chosen"] is None
    top = Fraction(bounds["bounds_epsilon_exact"]) + Fraction(bounds["epsilon_max_exact"])
    assert Fraction(explained["cost"]["exact"]["epsilon"]) == top  # the most it can cost
    code, out, err = invoke("explain", SQL, *common, "--target", "n=±10")
    assert code == 0, err
    assert "accuracy targets with bounds='auto': the bounds step costs ε_B=" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--bounds", "x=auto"], "--target with --bounds auto needs a declared range for 'x'"),
        ([*AUTO, "--bounds-share", "0.2"], "with --target the bounds step's ε is set by"),
        ([*AUTO, "--curve"], "--curve with --target and --bounds auto is not drawn"),
        ([*AUTO, "--limits", "auto"], "--bounds auto and --limits auto together is not"),
        (
            [*AUTO, "--target", "total=±2000000"],
            "pass --bounds x=0:1e+06 without --bounds x=auto, or keep --bounds auto with "
            "targets on other columns only (nothing was charged)",
        ),
    ],
)
def test_targets_with_bounds_auto_refuse_what_they_cannot_do(
    incomes: Path, extra: list[str], message: str
) -> None:
    command = "explain" if "--curve" in extra else "query"
    code, out, err = invoke(
        command, SQL, "--table", f"t={incomes}", "--privacy-unit", "uid", "--target",
        "n=±10", *extra,
    )  # fmt: skip
    assert code == 2
    assert message in " ".join((out + err).split())


def test_a_pair_beside_an_auto_column_is_its_declared_range_with_epsilon_too(
    incomes: Path,
) -> None:
    common = ("--table", f"t={incomes}", "--privacy-unit", "uid", "--epsilon", "1")
    answer = _json("query", SQL, *common, "--bounds", "x=0:50000", "--bounds", "x=auto")
    (chosen,) = answer["auto_bounds"]
    assert chosen["within"] == [0.0, 50_000.0]  # before, the pair was dropped for the auto
    assert chosen["upper"] <= 50_000
