"""Running the ``veil`` command line in tests: in this process (typer's runner) or as the
installed program; and the small table the CLI tests query (the ``people`` fixture)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from veil.cli import app


def invoke(*args: str) -> tuple[int, str, str]:
    """``veil ARGS…`` in this process: (exit code, stdout, stderr)."""
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


def veil_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``veil ARGS…`` as a program: the venv's ``veil`` script, else ``python -m veil.cli``."""
    exe = Path(sys.executable).with_name("veil")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "veil.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, check=False)


def write_people(path: Path) -> Path:
    """``path`` as a Parquet table of 100 rows: uid 0…99, state CA/NY, income 10.0."""
    table = pa.table({"uid": list(range(100)), "state": ["CA", "NY"] * 50, "income": [10.0] * 100})
    pq.write_table(table, path)
    return path
