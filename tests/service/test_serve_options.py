"""``veil --version`` and ``veil serve``'s logging options, refused by name before anything
starts."""

from __future__ import annotations

from pathlib import Path

import pytest

import veil
from cli_support import invoke


def test_version_prints_the_version() -> None:
    code, out, _ = invoke("--version")
    assert (code, out) == (0, f"veil {veil.__version__}\n")


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "veil.toml"
    path.write_text('ledger = "sqlite:///veil-ledger.db"\n', encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--log-level", "loud"], "--log-level must be one of debug, info, warning, error, "
         "critical, got 'loud'"),
        (["--log-level", " "], "--log-level needs a value"),
        (["--log-file", ""], "--log-file needs a value"),
    ],
)  # fmt: skip
def test_a_bad_logging_option_is_refused_by_name(
    config: Path, options: list[str], message: str
) -> None:
    code, _, err = invoke("serve", "--config", str(config), *options)
    assert code == 2
    assert message in err
    assert not (config.parent / "veil-ledger.db").exists()  # nothing started


def test_a_log_file_that_cannot_be_opened_is_refused_before_the_server_starts(
    config: Path,
) -> None:
    missing = config.parent / "no-such-folder" / "veil.jsonl"
    code, _, err = invoke("serve", "--config", str(config), "--log-file", str(missing))
    assert code == 2
    assert "cannot open the log file" in err
    assert "create its folder or choose another ([logging] file, or --log-file)" in err
