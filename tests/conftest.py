from __future__ import annotations

from pathlib import Path

import pytest

from lanes import (  # noqa: F401  (pytest's hooks: the unit and full lanes, tests/lanes.py)
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_call,
    pytest_runtest_makereport,
    pytest_runtest_setup,
)
from support import SeededSource


@pytest.fixture
def seeded() -> SeededSource:
    """A deterministic source with a fixed seed, passed explicitly to samplers under test."""
    return SeededSource(20261129)


@pytest.fixture
def people(tmp_path: Path) -> Path:
    """``people.parquet`` in the test's folder, the table the CLI tests query (100 rows: uid,
    state CA/NY, income 10.0); a module with a ``people`` of its own uses that instead."""
    from cli_support import write_people  # not at import: it loads the CLI

    return write_people(tmp_path / "people.parquet")
