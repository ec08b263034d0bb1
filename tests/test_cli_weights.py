"""`veil query` / `veil explain` with ``--weights``: weighted COUNT(*), SUM and AVG, their
bars, and the refusals in the CLI's own syntax (nothing charged)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cli_support import invoke

SQL = (
    "SELECT region, COUNT(*) AS n, SUM(hours) AS total, AVG(hours) AS h FROM survey "
    "WHERE region IN ('north', 'south') GROUP BY region"
)


@pytest.fixture(scope="module")
def survey(tmp_path_factory: pytest.TempPathFactory) -> Path:
    n = 4000
    table = pa.table(
        {
            "region": ["north", "south"] * (n // 2),
            "hours": [float(20 + (i * 7) % 30) for i in range(n)],
            "coeff": [0.5 + (i % 4) for i in range(n)],  # Σ: north 3000, south 5000
        }
    )
    path = tmp_path_factory.mktemp("data") / "survey.parquet"
    pq.write_table(table, path)
    return path


def test_weighted_estimates_come_with_error_bars(survey: Path) -> None:
    code, out, err = invoke(
        "query", SQL, "--table", f"survey={survey}", "--epsilon", "1", "--bounds",
        "hours=0:60", "--bounds", "coeff=0:4", "--weights", "coeff", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    payload = json.loads(out)
    assert payload["columns"] == ["region", "n", "total", "h"]
    weight = {"north": 3000, "south": 5000}  # Σ coeff per region, not its 2000 rows
    for row, bars in zip(payload["rows"], payload["error_bars"], strict=True):
        assert abs(row[1] - weight[row[0]]) < 100
        assert all(b > 0 for b in bars[1:])
    assert {u["measurement"] for u in payload["usage"]} == {"sum(coeff)", "sum(hours * coeff)"}


def test_explain_shows_the_weighted_calls(survey: Path) -> None:
    code, out, err = invoke(
        "explain", SQL, "--table", f"survey={survey}", "--epsilon", "1", "--bounds",
        "hours=0:60", "--bounds", "coeff=0:4", "--weights", "coeff", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    payload = json.loads(out)
    usage = {u["measurement"]: u for u in payload["usage"]}
    assert "L1 = 240 (value units)" in usage["sum(hours * coeff)"]["sensitivity"]
    assert "L1 = 4 (value units)" in usage["sum(coeff)"]["sensitivity"]
    assert "total weight" in json.dumps(payload)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--bounds", "coeff=-1:4"], "--bounds coeff=0:4"),
        ([], "pass --bounds coeff=0:W_MAX"),
    ],
)
def test_bad_weights_bounds_are_refused_in_the_clis_syntax(
    survey: Path, args: list[str], message: str
) -> None:
    code, _, err = invoke(
        "query", SQL, "--table", f"survey={survey}", "--epsilon", "1", "--bounds",
        "hours=0:60", "--weights", "coeff", *args,
    )  # fmt: skip
    assert code != 0
    assert message in " ".join(err.split())
