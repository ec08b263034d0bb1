"""Every test here samples many releases or draws: marked ``statistical`` (``-m statistical``
runs them alone, ``-m "not statistical"`` skips them; ``make test`` runs them all)."""

from __future__ import annotations

from pathlib import Path

import pytest

_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.statistical)
