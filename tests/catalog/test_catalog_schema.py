"""The catalog's declared schema: the data owner's column types, checked when a dataset is
added and applied to every session on it (issue 18)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from veil import Budget, Catalog, Session
from veil.catalog import Source
from veil.cli import app
from veil.errors import InvalidArgumentError, SchemaError

CSV = "user_id,income,city\n" + "".join(f"{u},{1000 * (u % 7)},c{u % 3}\n" for u in range(60))
ODD = "999,N/A,c0\n"  # one person's cell that does not convert to DOUBLE


def ledger_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("type_name", "reason"),
    [
        ("NOTATYPE", "'NOTATYPE' is not a type"),
        ("HUGEINT", "type 'HUGEINT' is not supported"),
        ("DECIMAL(40, 2)", "needs 1 <= precision <= 38"),
        ("INTEGER(3)", "takes no parameters"),
    ],
)
def test_a_type_veil_does_not_read_is_refused_when_the_dataset_is_added(
    tmp_path: Path, type_name: str, reason: str
) -> None:
    csv = write(tmp_path, "people.csv", CSV)
    catalog = Catalog(ledger_url(tmp_path))
    with pytest.raises(InvalidArgumentError, match=reason) as caught:
        catalog.add_dataset(
            "people", source=Source("file", path=str(csv)), schema={"uid": type_name}
        )
    message = str(caught.value)
    assert "column 'uid'" in message
    assert "e.g. schema={'uid': 'DOUBLE'}" in message
    assert caught.value.for_cli().endswith("e.g. --column uid:DOUBLE")
    assert catalog.datasets() == []  # nothing registered


def test_a_column_declared_twice_is_refused_when_the_dataset_is_added(tmp_path: Path) -> None:
    csv = write(tmp_path, "people.csv", CSV)
    with pytest.raises(InvalidArgumentError, match=r"'INCOME' is declared twice"):
        Catalog(ledger_url(tmp_path)).add_dataset(
            "people",
            source=Source("file", path=str(csv)),
            schema={"income": "DOUBLE", "INCOME": "DOUBLE"},
        )


def test_a_toml_file_with_a_bad_type_registers_nothing_and_says_the_fix_in_toml(
    tmp_path: Path,
) -> None:
    write(tmp_path, "people.csv", CSV)
    config = write(
        tmp_path,
        "veil.toml",
        '[[datasets]]\nname = "ok"\nsource = { kind = "file", path = "people.csv" }\n\n'
        '[[datasets]]\nname = "people"\nsource = { kind = "file", path = "other.csv" }\n'
        'schema = { uid = "NOTATYPE" }\n',
    )
    catalog = Catalog(ledger_url(tmp_path))
    with pytest.raises(
        InvalidArgumentError,
        match=r"column 'uid': 'NOTATYPE' is not a type; .* e\.g\. schema = \{ uid = \"DOUBLE\" \}$",
    ):
        catalog.load_toml(config)
    assert catalog.datasets() == []  # not even the entry before it


def test_veil_catalog_load_prints_the_refusal_as_one_line_before_registering(
    tmp_path: Path,
) -> None:
    write(tmp_path, "people.csv", CSV)
    config = write(
        tmp_path,
        "veil.toml",
        '[[datasets]]\nname = "people"\nsource = { kind = "file", path = "people.csv" }\n'
        'schema = { "user id" = "NOTATYPE" }\n',
    )
    result = CliRunner().invoke(
        app, ["catalog", "load", str(config), "--ledger", ledger_url(tmp_path)]
    )
    assert result.exit_code == 2  # a user error
    assert result.stderr.startswith("error: table 'people', column 'user id': 'NOTATYPE' is not")
    assert result.stderr.rstrip().endswith('e.g. schema = { "user id" = "DOUBLE" }')
    assert Catalog(ledger_url(tmp_path)).datasets() == []


POSTGRES = Source("postgres", url="postgresql://owner@db.internal:5432/shop", table="shop.people")


def test_a_schema_on_a_postgres_source_is_refused_when_the_dataset_is_added(
    tmp_path: Path,
) -> None:
    catalog = Catalog(ledger_url(tmp_path))
    with pytest.raises(
        InvalidArgumentError, match=r"PostgreSQL table carries its own column types, so schema="
    ) as caught:
        catalog.add_dataset("people", source=POSTGRES, schema={"income": "DOUBLE"})
    assert "so --column is not accepted" in caught.value.for_cli()
    assert "CREATE VIEW" in str(caught.value)
    assert catalog.datasets() == []
    catalog.add_dataset("people", source=POSTGRES)  # without one it is registered


def test_veil_catalog_add_refuses_a_column_type_on_a_postgres_source(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["catalog", "add", "people", "--ledger", ledger_url(tmp_path), "--source", "postgres",
         "--url", POSTGRES.url or "", "--table", "shop.people", "--column", "income:DOUBLE"],
    )  # fmt: skip
    assert result.exit_code == 2  # a user error
    assert "so --column is not accepted on a postgres source" in result.stderr
    assert Catalog(ledger_url(tmp_path)).datasets() == []


def test_a_postgres_schema_stored_before_the_rule_is_refused_not_dropped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused before connecting; whoever opens the engine is an analyst, so the refusal
    says nothing of how the owner registered the source, and the operator's log says why
    (issue 33)."""
    pytest.importorskip("psycopg", reason="pip install 'veil[postgres]'")
    catalog = Catalog(ledger_url(tmp_path))
    spec = catalog.add_dataset("people", source=POSTGRES).to_json()
    spec["schema"] = {"income": "DOUBLE"}  # as an older veil stored it
    catalog.ledger.put_dataset("people", json.dumps(spec, sort_keys=True), replace=True)
    with (
        caplog.at_level("ERROR", logger="veil.sources"),
        pytest.raises(SchemaError, match="dataset 'people' cannot be read now") as caught,
    ):
        catalog.open_engine("people")
    assert "schema=" not in str(caught.value)
    assert "schema= declarations are not accepted" in caplog.text


# -- a declared CSV column, answered whatever one person's cell holds -----------------------


def outcome(tmp_path: Path, csv: Path, schema: dict[str, str] | None, sql: str) -> tuple[Any, ...]:
    """Released or refused (free), on a catalog dataset over ``csv``; the rows' shape."""
    catalog = Catalog(f"sqlite:///{tmp_path / f'{csv.stem}.db'}")
    catalog.add_dataset(
        "people",
        source=Source("file", path=str(csv)),
        privacy_unit="user_id",
        bounds={"income": (0, 10_000)},
        schema=schema,
    )
    catalog.ledger.grant("alice", "people", Budget(epsilon=5))
    with Session.from_catalog(catalog, "people", analyst="alice") as session:
        try:
            result = session.sql(sql, epsilon=1)
        except SchemaError as exc:
            assert session.remaining() == Budget(epsilon=5)  # refused free
            return ("refused", str(exc))
        return ("released", result.columns, len(result.rows))


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT AVG(income) AS m FROM people",
        "SELECT COUNT(*) AS n FROM people WHERE income > 1500",
        "SELECT SUM(income) AS s, COUNT(DISTINCT user_id) AS u FROM people",
    ],
)
def test_a_declared_double_column_with_one_na_cell_is_answered_as_without_that_row(
    tmp_path: Path, sql: str
) -> None:
    schema = {"user_id": "BIGINT", "income": "DOUBLE"}
    with_odd = outcome(tmp_path, write(tmp_path, "with.csv", CSV + ODD), schema, sql)
    without = outcome(tmp_path, write(tmp_path, "without.csv", CSV), schema, sql)
    assert with_odd == without
    assert with_odd[0] == "released"


def test_without_the_declaration_the_column_is_text_on_both_neighbours(tmp_path: Path) -> None:
    sql = "SELECT AVG(income) AS m FROM people"
    with_odd = outcome(tmp_path, write(tmp_path, "with.csv", CSV + ODD), None, sql)
    without = outcome(tmp_path, write(tmp_path, "without.csv", CSV), None, sql)
    assert with_odd == without
    assert with_odd[0] == "refused"
    assert "'income' is string" in with_odd[1]
