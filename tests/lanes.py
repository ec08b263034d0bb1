"""Test lanes: the unit lane (``pytest --lane unit``, ``make check``) and the full lane.

The unit lane deselects every test marked with one of :data:`HEAVY` and holds what is left to
two rules that do not depend on the machine's speed or load:

- **CPU time**: a test whose setup and call take more than ``--cpu-limit`` CPU seconds of the
  test process (``time.process_time()``: all its threads, not the wall clock, so a busy or slow
  machine does not trip it; default :data:`CPU_LIMIT`) fails, telling its author to mark it
  ``slow`` (or ``statistical``…). A module- or session-scoped fixture counts in the first test
  that uses it. While a tracer runs (coverage, a debugger) the limit is :data:`TRACED_FACTOR`
  times higher.
- **No processes**: a test that starts a process (``subprocess``, ``os.fork``, ``os.spawn*``,
  ``os.exec*``, ``os.posix_spawn``, ``os.system``, seen by an audit hook) fails, telling its
  author to mark it ``system``.

The full lane (plain ``pytest``, ``make test``, the CI) runs everything and checks neither.
Every test's CPU seconds are recorded as the ``cpu_seconds`` property (``--junitxml`` writes
them), in both lanes.

The root ``conftest.py`` imports the hooks below; :func:`mark_by_place` marks the tests of
``tests/system/``, ``tests/browser/`` and ``tests/statistical/`` and those that use a Spark,
PostgreSQL or browser fixture, so those modules need no marker of their own.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any, ClassVar

import pytest

HEAVY = ("slow", "system", "browser", "spark", "statistical")
"""The markers the unit lane leaves out."""

CPU_LIMIT = 5.0
"""CPU seconds a unit-lane test may take (setup and call): about 25 times the lane's median
test, far above what load or a slower core adds, far below the tests that made the lane slow
(a 10 s wall-clock test spends about as many CPU seconds)."""

TRACED_FACTOR = 3.0
"""How much more CPU a test may take while a tracer runs (coverage with branches, a debugger):
branch coverage costs about 1.7 times the time on Python 3.11."""

FIXTURE_MARKS = {
    "pg_url": "postgres",
    "browser": "browser",
    "spark": "spark",
}
"""A fixture's name → the marker every test that uses it gets."""

DIRECTORY_MARKS = {"system": "system", "browser": "browser", "statistical": "statistical"}
"""A folder of ``tests/`` → the marker every test in it gets."""

_TESTS = Path(__file__).resolve().parent

_LIBRARY_PROGRAMS = frozenset({"fc-list"})
"""Programs a library runs once per machine to build a cache (matplotlib's font list): not
the test's processes."""

_SPAWNS = frozenset(
    {
        "subprocess.Popen",
        "os.fork",
        "os.forkpty",
        "os.posix_spawn",
        "os.spawn",
        "os.exec",
        "os.system",
    }
)


class _Watch:
    """The item running now and the processes it started (the audit hook cannot be removed,
    so it only records while an item of the unit lane runs)."""

    item: ClassVar[pytest.Item | None] = None
    spawned: ClassVar[list[str]] = []

    @classmethod
    def hook(cls, event: str, args: tuple[Any, ...]) -> None:
        if cls.item is not None and event in _SPAWNS:
            what = args[0] if args else ""
            if Path(str(what)).name not in _LIBRARY_PROGRAMS:
                cls.spawned.append(f"{event}({what!r})")


_hook_installed = False


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("lanes", "veil's test lanes (tests/lanes.py)")
    group.addoption(
        "--lane",
        choices=("unit", "full"),
        default="full",
        help="unit: leave out the tests marked " + ", ".join(HEAVY) + " and fail a test that "
        "takes more than --cpu-limit CPU seconds or starts a process; full (default): all",
    )
    group.addoption(
        "--cpu-limit",
        type=float,
        default=CPU_LIMIT,
        help=f"CPU seconds a unit-lane test may take (default {CPU_LIMIT:g})",
    )


def _unit(config: pytest.Config) -> bool:
    return bool(config.getoption("lane", "full") == "unit")


def mark_by_place(items: Iterable[pytest.Item]) -> None:
    """Add the markers of :data:`DIRECTORY_MARKS` and :data:`FIXTURE_MARKS` to every test in
    one of those folders or using one of those fixtures."""
    for item in items:
        path = Path(item.path).resolve()
        if _TESTS in path.parents:
            folder = path.relative_to(_TESTS).parts[0]
            if folder in DIRECTORY_MARKS:
                item.add_marker(DIRECTORY_MARKS[folder])
        names = getattr(item, "fixturenames", ())
        for fixture, marker in FIXTURE_MARKS.items():
            if fixture in names:
                item.add_marker(marker)


@pytest.hookimpl(trylast=True)  # after the conftests that mark by directory
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_by_place(items)
    if not _unit(config):
        return
    kept, left = [], []
    for item in items:
        heavy = any(item.get_closest_marker(m) is not None for m in HEAVY)
        (left if heavy else kept).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


def pytest_configure(config: pytest.Config) -> None:
    global _hook_installed
    if _unit(config) and not _hook_installed:
        sys.addaudithook(_Watch.hook)
        _hook_installed = True


def _limit(item: pytest.Item) -> float | None:
    """The CPU limit of ``item``, None when it is not checked."""
    if not _unit(item.config):
        return None
    limit = float(item.config.getoption("cpu_limit"))
    return limit * TRACED_FACTOR if sys.gettrace() is not None else limit


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_cpu_key] = 0.0
    start = time.process_time()
    _Watch.item, _Watch.spawned = (item if _unit(item.config) else None), []
    yield
    item.stash[_cpu_key] += time.process_time() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    start = time.process_time()
    yield
    item.stash[_cpu_key] = item.stash.get(_cpu_key, 0.0) + time.process_time() - start


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    if call.when != "call":
        if call.when == "teardown":
            _Watch.item = None
        return
    report: pytest.TestReport = outcome.get_result()
    cpu = item.stash.get(_cpu_key, 0.0)
    item.user_properties.append(("cpu_seconds", round(cpu, 3)))
    if not report.passed:
        return
    problems = []
    limit = _limit(item)
    if limit is not None and cpu > limit:
        problems.append(
            f"took {cpu:.1f} CPU seconds (setup and call), over the unit lane's limit of "
            f"{limit:g} (tests/lanes.py): make it cheaper, or mark it "
            "@pytest.mark.slow (or statistical, if it samples many releases)"
        )
    if _Watch.item is item and _Watch.spawned:
        problems.append(
            f"started a process in the unit lane ({', '.join(_Watch.spawned[:3])}): mark it "
            "@pytest.mark.system (tests/lanes.py)"
        )
    if problems:
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid} " + "; and ".join(problems)


_cpu_key = pytest.StashKey[float]()
