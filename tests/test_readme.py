"""The README's code runs as written: every ``python`` and ``sh`` block, each in a fresh
directory holding the tour's ``people.parquet`` (``veil demo --write``, run once per module: the
table is deterministic, and each block gets its own copy), in a fresh process — as a new user
would paste it. A block preceded by ``<!-- not run: reason -->`` is skipped (it needs a cluster
or a server the suite does not have)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(
    r"(?P<skip><!-- not run:[^>]*-->\n)?```(?P<lang>python|sh)\n(?P<code>.*?)\n```", re.S
)


def blocks() -> list[tuple[str, str, int]]:
    text = README.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        if m.group("skip"):
            continue
        line = text.count("\n", 0, m.start("code")) + 1
        found.append((m.group("lang"), m.group("code"), line))
    return found


BLOCKS = blocks()


def test_the_readme_has_runnable_blocks_for_the_tour() -> None:
    assert {lang for lang, _, _ in BLOCKS} == {"python", "sh"}
    assert len(BLOCKS) >= 5


def _env() -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", "")}


@pytest.fixture(scope="module")
def tour_people(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tour's ``people.parquet``, written once by ``veil demo --write`` (3,000 users)."""
    where = tmp_path_factory.mktemp("tour")
    made = subprocess.run(
        [sys.executable, "-m", "veil.cli", "demo", "--write", "people.parquet", "--users", "3000"],
        cwd=where,
        capture_output=True,
        text=True,
        env=_env(),
        check=False,
    )
    assert made.returncode == 0, made.stderr
    return where / "people.parquet"


@pytest.mark.slow
@pytest.mark.parametrize(("lang", "code", "line"), BLOCKS, ids=[f"line-{b[2]}" for b in BLOCKS])
def test_a_readme_block_runs_as_written(
    lang: str, code: str, line: int, tmp_path: Path, tour_people: Path
) -> None:
    env = _env()
    if lang == "python":
        shutil.copy(tour_people, tmp_path / "people.parquet")
        cmd = [sys.executable, "-c", code]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", code]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, f"README line {line} ({lang}) failed:\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr
