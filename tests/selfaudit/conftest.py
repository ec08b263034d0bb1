"""Fixtures of the audit tests: the real public samples in ``../shared/data`` (never copied
into the repository)."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


@pytest.fixture(scope="session")
def pums() -> Path:
    """The California PUMS sample (1,000 people) as a CSV path."""
    path = DATA / "pums_california_1000.csv"
    if not path.is_file():
        pytest.skip(f"SKIPPED LOUDLY: {path.name} is missing from ../shared/data")
    return path


@pytest.fixture(scope="session")
def lfs_zip() -> Path:
    """The French LFS sample (50,000 rows), zipped."""
    path = DATA / "sample_FR_LFS.csv.zip"
    if not path.is_file():
        pytest.skip(f"SKIPPED LOUDLY: {path.name} is missing from ../shared/data")
    return path
