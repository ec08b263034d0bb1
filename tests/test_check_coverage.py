"""scripts/check_coverage.py: per-package floors over coverage.py's JSON report, for packages,
root modules and families of root modules (``veil.autobounds*``)."""

from __future__ import annotations

import importlib.util
import json
import sys
from fractions import Fraction
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "check_coverage.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_coverage", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


check = _load()


def summary(lines: int, run: int, branches: int = 0, taken: int = 0) -> dict[str, object]:
    return {
        "summary": {
            "num_statements": lines,
            "covered_lines": run,
            "num_branches": branches,
            "covered_branches": taken,
        }
    }


FILES = {
    "src/veil/session.py": summary(100, 90, 20, 15),  # 105 of 120
    "src/veil/autobounds.py": summary(50, 50),
    "src/veil/autobounds_target.py": summary(50, 25),
    "src/veil/autoboth.py": summary(10, 0),
    "src/veil/noise/__init__.py": summary(10, 10),
    "src/veil/noise/exact.py": summary(90, 80, 10, 10),
    "src/veil/sensitivity.py": summary(10, 10),
}


@pytest.fixture
def report(tmp_path: Path) -> Path:
    path = tmp_path / "coverage.json"
    path.write_text(json.dumps({"meta": {"branch_coverage": True}, "files": FILES}))
    return path


def test_a_package_a_root_module_and_a_family_of_root_modules_are_tallied_apart() -> None:
    per, whole = check.tally(
        {"meta": {"branch_coverage": True}, "files": FILES},
        ["veil.session", "veil.autobounds*", "veil.auto*", "veil.noise", "veil.autobounds"],
    )
    assert per["veil.session"].percent == 100 * Fraction(105, 120)
    assert per["veil.autobounds*"].percent == 100 * Fraction(75, 100)  # and its target
    assert per["veil.auto*"].percent == 100 * Fraction(75, 110)  # and autoboth
    assert per["veil.autobounds"].percent == 100  # the module alone, not its siblings
    assert per["veil.noise"].percent == 100 * Fraction(100, 110)
    assert whole.statements == 320


def test_the_run_fails_below_a_floor_and_passes_at_it(
    report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check.main([str(report), "veil.session=87.5", "veil.autobounds*=75"]) == 0
    assert check.main([str(report), "veil.session=87.5", "veil.auto*=70"]) == 1
    out, err = capsys.readouterr()
    assert "veil.auto*" in out
    assert "BELOW the floor of 70 %" in out
    assert "below the floor: veil.auto*" in err


def test_a_pattern_that_measures_no_file_fails(
    report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check.main([str(report), "veil.autolimits*=10"]) == 1
    assert "veil.autolimits*: no file measured" in capsys.readouterr().err


@pytest.mark.parametrize(
    "arg", ["noise=95", "veil.noise", "veil.*noise=95", "veil.noise*x=95", "veil.noise=lots"]
)
def test_a_malformed_floor_is_refused_with_the_syntax(
    report: Path, arg: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert check.main([str(report), arg]) == 2
    assert "check_coverage:" in capsys.readouterr().err
