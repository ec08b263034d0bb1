"""Audit: `veil query` without --ledger says loudly that its cost is not tracked."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from veil.cli import app


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Path:
    table = pa.table({"user_id": list(range(200)), "age": [i % 90 for i in range(200)]})
    path = tmp_path_factory.mktemp("cli") / "people.parquet"
    pq.write_table(table, path)
    return path


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_a_query_without_a_ledger_warns_on_stderr_that_its_cost_is_not_tracked(
    people: Path,
) -> None:
    code, out, err = run(
        "query", "SELECT COUNT(*) AS n FROM people", "--table", f"people={people}",
        "--epsilon", "0.5", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    assert "not tracked across runs" in err
    assert "--ledger" in err
    assert "not tracked" not in out  # stdout stays one JSON object


def test_a_query_with_a_ledger_does_not_warn(people: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    code, _, err = run(
        "budget", "grant", "--ledger", url, "--analyst", "cli", "--dataset", "people",
        "--epsilon", "1",
    )  # fmt: skip
    assert code == 0, err
    code, _, err = run(
        "query", "SELECT COUNT(*) AS n FROM people", "--table", f"people={people}",
        "--epsilon", "0.5", "--ledger", url,
    )  # fmt: skip
    assert code == 0, err
    assert "not tracked" not in err
