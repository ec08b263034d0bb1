"""An option given an empty value is refused naming its flag, before the command does
anything: never read as the default (``--epsilon ''`` once charged ε = 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

import veil
from cli_support import invoke, write_people

SQL = "SELECT COUNT(*) AS n FROM people"


@pytest.mark.parametrize(
    ("flag", "args"),
    [
        ("--epsilon", ["--epsilon", ""]),
        ("--epsilon", ["--epsilon="]),
        ("--epsilon", ["--epsilon", "  "]),
        ("--delta", ["--epsilon", "0.5", "--delta", ""]),
        ("--bounds", ["--epsilon", "0.5", "--bounds", ""]),
        ("--analyst", ["--epsilon", "0.5", "--analyst", ""]),
    ],
)
def test_an_empty_option_of_a_query_is_refused_and_charges_nothing(
    tmp_path: Path, flag: str, args: list[str]
) -> None:
    people = write_people(tmp_path / "people.parquet")
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = veil.Ledger(url)
    ledger.grant("cli", "people", veil.Budget(epsilon=2))
    code, out, err = invoke(
        "query", SQL, "--table", f"people={people}", "--privacy-unit", "uid", "--ledger", url,
        *args,
    )  # fmt: skip
    assert code == 2, (out, err)
    assert f"{flag} needs a value, not an empty one" in err
    assert ledger.remaining("cli", "people") == veil.Budget(epsilon=2)


def test_an_empty_ledger_is_refused_rather_than_run_untracked(tmp_path: Path) -> None:
    people = write_people(tmp_path / "people.parquet")
    code, out, err = invoke(
        "query", SQL, "--table", f"people={people}", "--epsilon", "0.5", "--ledger", ""
    )
    assert code == 2
    assert "--ledger needs a value, not an empty one" in err
    assert out == ""


def test_empty_options_are_refused_in_every_command(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    code, _, err = invoke(
        "budget", "grant", "--analyst", "alice", "--dataset", "people", "--epsilon", "",
        "--ledger", url,
    )  # fmt: skip
    assert code == 2
    assert "--epsilon needs a value, not an empty one" in err
    code, _, err = invoke("serve", "--config", "")
    assert code == 2
    assert "--config needs a value, not an empty one" in err
    # an integer option's empty value is click's own refusal, naming the flag too
    code, _, err = invoke("query", SQL, "--table", "people=x.parquet", "--max-groups", "")
    assert code == 2
    assert "--max-groups" in err


def test_a_binary_config_file_is_refused_as_not_a_configuration(tmp_path: Path) -> None:
    config = tmp_path / "veil.toml"
    config.write_bytes(bytes(range(128, 256)) * 4)
    code, _, err = invoke("serve", "--config", str(config))
    assert code == 2, err
    assert "is not a TOML configuration: it is not UTF-8 text" in err
    assert "bug" not in err
