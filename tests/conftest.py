from __future__ import annotations

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
