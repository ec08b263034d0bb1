"""``veil audit mechanism`` and ``veil audit command`` on the command line, with the PHP seed's
code as positive controls run through the real PHP CLI (``src/veil/audit/controls/*.php``)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import veil.audit
from cli_support import invoke
from support import SeededSource
from veil.audit import selftest

pytestmark = pytest.mark.statistical

CONTROLS = Path(veil.audit.__file__).parent / "controls"
needs_php = pytest.mark.skipif(shutil.which("php") is None, reason="SKIPPED: php is absent")


def test_veils_laplace_passes_on_the_command_line_with_a_histogram() -> None:
    code, out, _ = invoke(
        "audit", "mechanism", "laplace", "--epsilon", "1", "-n", "100000", "--confidence", "0.999"
    )  # OS randomness: a false alarm at most 0.15 %
    assert code == 0, out
    assert "verdict: PASS" in out
    assert "histogram (# first input, = second input)" in out
    assert "Passing an audit does not prove privacy" in out


def test_a_mechanism_error_names_the_value_and_exits_2() -> None:
    code, _, err = invoke("audit", "mechanism", "gaussian", "--epsilon", "1")
    assert code == 2
    assert "the gaussian mechanism needs --delta" in err


@needs_php
def test_the_php_seeds_laplace_noise_fails_through_veil_audit_command() -> None:
    script = str(CONTROLS / "laplace_rand.php")
    code, out, _ = invoke(
        "audit", "command", "--epsilon", "1", "-n", "20000", "--format", "json",
        "--", "php", script, "{input}", "{count}",
    )  # fmt: skip
    assert code == 1, out
    report = json.loads(out)
    assert report["verdict"] == "FAIL"
    assert "grid of 2^" in report["pairs"][0]["event"]
    assert report["pairs"][0]["epsilon_lower_bound"] > 3


@needs_php
def test_the_php_seeds_inverted_exponential_mechanism_fails_on_conformance() -> None:
    script = str(CONTROLS / "exponential_inverted.php")
    code, out, _ = invoke(
        "audit", "command", "--epsilon", "1", "-n", "20000", "--claim-scores", "3,2,1",
        "--", "php", script, "{input}", "{count}",
    )  # fmt: skip
    assert code == 1, out
    assert "conformance failure: input '3,2,1': category 0 came out 0.1" in out
    assert "the claimed pmf says 0.5065" in out
    assert "verdict: FAIL" in out


def test_a_command_without_its_input_placeholder_is_refused() -> None:
    code, _, err = invoke("audit", "command", "--epsilon", "1", "--", "php", "noise.php")
    assert code == 2
    assert "placeholder {input}" in err


def test_selftest_every_verdict_is_as_expected_in_its_table() -> None:
    checks = selftest.run(20_000, source=SeededSource("selftest"))
    out = "\n".join(selftest.lines(checks))
    assert all(c.ok for c in checks), out
    assert "veil laplace             PASS      PASS" in out
    assert "numpy float laplace      FAIL      FAIL" in out
    assert "int64 sum that wraps     FAIL      FAIL" in out
    assert "selftest: OK" in out
    if shutil.which("php") is None:
        assert "skipped: php is not on the PATH" in out
    else:
        assert "php seed exponential     FAIL      FAIL" in out


def test_selftest_refuses_too_few_samples_on_the_command_line() -> None:
    code, _, err = invoke("audit", "selftest", "--samples", "10")
    assert code == 2
    assert "--samples must be at least 1000, got 10" in err
