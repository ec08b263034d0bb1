"""Fixtures of the service tests (helpers in tests/service_support.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from service_support import Service, start
from veil.service.config import ServiceLimits


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    yield from start(tmp_path)


@pytest.fixture
def make_service(tmp_path: Path) -> Iterator[Callable[..., Service]]:
    """start(limits=…, pad_ms=…): a service with other limits (one per test)."""
    running: list[Iterator[Service]] = []

    def make(limits: ServiceLimits | None = None, pad_ms: int = 0) -> Service:
        gen = start(tmp_path, limits, pad_ms)
        running.append(gen)
        return next(gen)

    yield make
    for gen in running:
        for _ in gen:
            pass
