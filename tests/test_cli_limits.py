"""``--limits auto`` (and ``--limits-share``) in ``veil query`` / ``explain``, end to end on a
small Parquet file through typer's runner."""

from __future__ import annotations

from pathlib import Path

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
