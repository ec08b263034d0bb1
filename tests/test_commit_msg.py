"""The commit-msg hook (``scripts/hooks/commit-msg``) holds the convention of CONTRIBUTING.md."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType

HOOK = Path(__file__).resolve().parents[1] / "scripts" / "hooks" / "commit-msg"


def _hook() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("commit_msg", str(HOOK))
    spec = importlib.util.spec_from_loader("commit_msg", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_a_short_subject_naming_its_area_with_a_body_passes() -> None:
    message = "ledger: refuse a grant of δ ≥ 1/2\n\nWhy, and the figures.\n# a git comment\n"
    assert _hook().problems(message) == []


def test_a_long_subject_is_refused_with_its_length() -> None:
    found = _hook().problems("docs: " + "x" * 80)
    assert found == ["the subject has 86 characters; keep it to 72"]


def test_a_subject_without_an_area_is_refused() -> None:
    assert _hook().problems("fix the thing")[0].startswith("the subject names no area")


def test_a_body_glued_to_the_subject_is_refused() -> None:
    found = _hook().problems("service: pad timings\nno blank line here")
    assert found == ["leave a blank line between the subject and the body"]


def test_an_empty_message_is_refused_and_git_merges_pass() -> None:
    hook = _hook()
    assert hook.problems("# only comments\n") == ["the message is empty"]
    assert hook.problems("Merge branch 'h/docs'") == []
