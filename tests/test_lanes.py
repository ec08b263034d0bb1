"""The lanes (tests/lanes.py): the unit lane leaves out the heavy markers and fails a test that
takes too many CPU seconds or starts a process, telling its author to mark it; the full lane
runs and allows everything. Each case runs a small suite in this process (pytest's pytester)
with the root conftest's hooks."""

from __future__ import annotations

import sys

import pytest

import lanes

pytest_plugins = ["pytester"]

CONFTEST = """
from lanes import (
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_runtest_call,
    pytest_runtest_makereport,
    pytest_runtest_setup,
)
"""

SUITE = """
import sys
import time

import pytest


def burn(seconds):
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def test_cheap():
    assert 1 + 1 == 2


def test_busy():
    burn(BURN)


@pytest.mark.slow
def test_busy_and_marked():
    burn(BURN)


def test_spawns():
    # what subprocess.Popen announces before it starts a program (no program is started)
    sys.audit("subprocess.Popen", "/bin/true", ["true"], None, None)


@pytest.mark.system
def test_spawns_and_marked():
    sys.audit("subprocess.Popen", "/bin/true", ["true"], None, None)


@pytest.mark.statistical
def test_statistical():
    pass
"""

# CPU seconds the busy tests spend: above the limit given below, even times TRACED_FACTOR
LIMIT = 0.02
BURN = 4 * LIMIT * lanes.TRACED_FACTOR


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(
        "[pytest]\nmarkers =\n"
        + "".join(f"    {m}: heavy\n" for m in lanes.HEAVY)
        + "filterwarnings = error\n"
    )
    pytester.makepyfile(test_suite=SUITE.replace("BURN", repr(BURN)))
    return pytester


def test_the_unit_lane_fails_an_unmarked_busy_or_spawning_test_naming_the_marker(
    suite: pytest.Pytester,
) -> None:
    result = suite.runpytest("--lane", "unit", "--cpu-limit", str(LIMIT), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2, deselected=3)
    limit = LIMIT * lanes.TRACED_FACTOR if sys.gettrace() is not None else LIMIT  # coverage
    result.stdout.fnmatch_lines(
        [
            "*test_busy took * CPU seconds (setup and call), over the unit lane's limit of "
            f"{limit:g} *mark it @pytest.mark.slow*",
            "*test_spawns started a process in the unit lane "
            "(subprocess.Popen('/bin/true')): mark it @pytest.mark.system*",
        ]
    )


def test_the_full_lane_runs_everything_and_checks_nothing(suite: pytest.Pytester) -> None:
    result = suite.runpytest("--cpu-limit", str(LIMIT), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)


def test_every_test_records_its_cpu_seconds(suite: pytest.Pytester) -> None:
    suite.runpytest("-p", "no:cacheprovider", "--junitxml=report.xml")
    report = (suite.path / "report.xml").read_text()
    assert report.count('<property name="cpu_seconds"') == 6


def test_a_program_a_library_runs_for_its_cache_is_not_the_tests(suite: pytest.Pytester) -> None:
    suite.makepyfile(
        test_fonts="""
import sys

def test_fonts():
    sys.audit("subprocess.Popen", "fc-list", ["fc-list"], None, None)
"""
    )
    result = suite.runpytest("--lane", "unit", "-p", "no:cacheprovider", "test_fonts.py")
    result.assert_outcomes(passed=1)


def test_hypothesis_does_not_time_examples_against_the_wall_clock() -> None:
    from hypothesis import HealthCheck, settings

    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check
