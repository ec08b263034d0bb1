from __future__ import annotations

import pytest

from support import SeededSource


@pytest.fixture
def seeded() -> SeededSource:
    """A deterministic source with a fixed seed, passed explicitly to samplers under test."""
    return SeededSource(20261129)
