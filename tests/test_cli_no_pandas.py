"""``import veil`` and a command-line query do not load pandas (issue 40).

pyarrow imports pandas on its first conversion of a Python or numpy value (``pa.scalar``,
``pa.array``, ``to_numpy``) when pandas is installed: a quarter of a small query's time in a
fresh process. Each check runs in a fresh interpreter (this one has pandas loaded already).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


def _loads_pandas(code: str) -> bool:
    probe = f"import sys\n{code}\nprint('pandas' in sys.modules)\n"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1] == "True"


@pytest.mark.system
def test_import_veil_does_not_load_pandas() -> None:
    assert not _loads_pandas("import veil\nimport veil.session\nimport veil.release.exact")


@pytest.mark.system
@pytest.mark.parametrize(
    "query",
    [
        "SELECT COUNT(*) AS n, SUM(x) AS s FROM t",
        "SELECT g, COUNT(*) AS n, AVG(x) AS m FROM t GROUP BY g",
        "SELECT k, COUNT(*) AS n, SUM(x) AS s FROM t GROUP BY k",
        "SELECT g, k, COUNT(*) AS n FROM t GROUP BY g, k",
    ],
)
def test_a_cli_query_does_not_load_pandas(tmp_path: Path, query: str) -> None:
    csv = tmp_path / "t.csv"
    lines = [f"{i},{'abc'[i % 3]},{i % 4},{i % 10}" for i in range(3000)]
    csv.write_text("uid,g,k,x\n" + "\n".join(lines) + "\n")
    argv = [
        "veil", "query", query, "--table", f"t={csv}", "--column", "x:DOUBLE",
        "--bounds", "x=0:10", "--epsilon", "1", "--delta", "1e-6", "--privacy-unit", "uid",
        "--format", "json",
    ]  # fmt: skip
    code = (
        f"sys.argv = {argv!r}\n"
        "import veil.cli\n"
        "try:\n"
        "    veil.cli.main()\n"
        "except SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n"
    )
    assert not _loads_pandas(code)
