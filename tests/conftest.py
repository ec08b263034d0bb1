from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from lanes import (  # noqa: F401  (pytest's hooks: the unit and full lanes, tests/lanes.py)
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_call,
    pytest_runtest_makereport,
    pytest_runtest_setup,
)
from support import SeededSource

# Hypothesis times each example against the wall clock (a 200 ms deadline, a "too slow" health
# check), which a loaded machine fails; a test's own @settings may still set them.
settings.register_profile("veil", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("veil")


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
