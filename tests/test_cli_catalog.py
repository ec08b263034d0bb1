"""`veil catalog add|show|remove|load`: the data owner's commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_support import invoke
from veil import Budget, Catalog, Session


def test_add_show_and_remove_a_dataset(tmp_path: Path, people: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    code, out, err = invoke(
        "catalog", "add", "people", "--ledger", url, "--path", str(people), "--privacy-unit", "uid",
        "--max-rows-per-group", "2", "--bounds", "income=0:100", "--domain", "state=CA,NY",
        "--max-epsilon", "1", "--total-epsilon", "5", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    added = json.loads(out)["dataset"]
    assert added["privacy_unit"] == "uid"
    assert added["domains"] == {"state": ["CA", "NY"]}
    code, out, _ = invoke("catalog", "show", "--ledger", url, "--format", "json")
    assert code == 0
    (shown,) = json.loads(out)["datasets"]
    assert shown["bounds"] == {"income": ["0", "100"]}
    assert shown["total"] == {"kind": "pure", "epsilon": "5"}
    code, out, _ = invoke("catalog", "show", "--ledger", url)
    assert code == 0
    assert "people" in out
    assert "ε ≤ 1" in out
    # the registered metadata is what a catalog session uses
    catalog = Catalog(url)
    catalog.ledger.grant("alice", "people", Budget(epsilon=1))
    with Session.from_catalog(catalog, "people", analyst="alice") as s:
        assert s.privacy_unit == "uid"
        assert s.contribution is not None
        assert s.contribution.max_rows_per_group == 2
    code, _, _ = invoke("catalog", "remove", "people", "--ledger", url)
    assert code == 0
    code, _, err = invoke("catalog", "show", "people", "--ledger", url)
    assert code == 2
    assert "no dataset 'people'" in err


def test_a_bad_domain_is_a_one_line_error_in_the_clis_syntax(tmp_path: Path, people: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    code, out, err = invoke(
        "catalog", "add", "people", "--ledger", url, "--path", str(people), "--domain", "state",
    )  # fmt: skip
    assert code == 2
    assert out == ""
    assert "--domain expects COLUMN=KEY,KEY" in err


def test_load_registers_a_toml_files_datasets_idempotently(tmp_path: Path, people: Path) -> None:
    config = tmp_path / "veil.toml"
    config.write_text(
        '[ledger]\nurl = "sqlite:///ledger.db"\n\n[[datasets]]\nname = "people"\n'
        'source = { kind = "file", path = "people.parquet" }\nprivacy_unit = "uid"\n'
        "bounds = { income = [0, 100] }\n",
        encoding="utf-8",
    )
    for _ in range(2):
        code, out, err = invoke("catalog", "load", str(config), "--format", "json")
        assert code == 0, err
        assert json.loads(out) == {"loaded": ["people"]}
    ds = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}").dataset("people")
    assert ds.source.path == str(tmp_path / "people.parquet")


@pytest.mark.parametrize(
    "ledger_line", ['ledger = "sqlite:///ledger.db"', '[ledger]\nurl = "sqlite:///ledger.db"']
)
def test_load_reads_either_form_of_the_ledger_line(
    tmp_path: Path, people: Path, ledger_line: str
) -> None:
    config = tmp_path / "veil.toml"
    config.write_text(
        f'{ledger_line}\n\n[[datasets]]\nname = "people"\n'
        'source = { kind = "file", path = "people.parquet" }\n',
        encoding="utf-8",
    )
    code, out, err = invoke("catalog", "load", str(config), "--format", "json")
    assert code == 0, err
    assert json.loads(out) == {"loaded": ["people"]}
    assert (tmp_path / "ledger.db").exists()  # relative to the file, not the working directory


def test_the_service_reads_the_same_config_file(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    from veil.service.config import ServiceConfig

    config = tmp_path / "veil.toml"
    config.write_text('[ledger]\nurl = "sqlite:///ledger.db"\n', encoding="utf-8")
    assert ServiceConfig.load(config).ledger == f"sqlite:///{(tmp_path / 'ledger.db').resolve()}"
