"""Fixtures for the end-to-end tests: the French LFS sample, unzipped once per session."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
LFS_ZIP = DATA / "sample_FR_LFS.csv.zip"


@pytest.fixture(scope="session")
def lfs_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The LFS sample as a CSV file in a temporary folder (never copied into the repo)."""
    if not LFS_ZIP.is_file():
        pytest.skip(
            f"SKIPPED LOUDLY: the French LFS sample is missing ({LFS_ZIP.name} expected in "
            "../shared/data relative to the repo root); the LFS system tests did not run"
        )
    out = tmp_path_factory.mktemp("lfs")
    with zipfile.ZipFile(LFS_ZIP) as archive:
        names = [n for n in archive.namelist() if n.endswith(".csv")]
        if len(names) != 1:
            pytest.fail(f"expected one CSV in {LFS_ZIP.name}, found {names}")
        archive.extract(names[0], out)
    return out / names[0]
