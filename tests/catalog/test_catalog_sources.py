"""A catalog source's identity and layout (issue 33).

* Identity: the set of (device, inode) of the files a source expands to. A hard link, a glob
  matching one file of another dataset, the same file under another spelling, a DuckDB source
  reading the file: each is refused at registration. The adversarial review spent ε = 10
  against an owner's cap of 2 through five names of one file; now four are refused and the
  cap holds.
* Layout: a glob's CSV header (or Parquet columns) is fixed when it is registered; later
  files are held to it (skipped when they differ), so one person's file decides only its rows.
* Whoever opens a dataset's engine is an analyst: a source that cannot be opened is refused
  without naming a file; the operator's log (``veil.sources``) names it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from veil import Budget, Catalog, Session
from veil.catalog import Source
from veil.errors import BudgetExhaustedError, InvalidArgumentError, LedgerError, SchemaError

HEADER = "user_id,income"


def _catalog(tmp_path: Path) -> Catalog:
    return Catalog(f"sqlite:///{tmp_path / 'ledger.db'}")


def _people(path: Path, rows: int = 50) -> Path:
    pq.write_table(
        pa.table({"user_id": list(range(rows)), "income": [float(i % 7) for i in range(rows)]}),
        path,
    )
    return path


def test_one_file_under_five_names_is_one_dataset_and_its_cap_holds(tmp_path: Path) -> None:
    people = _people(tmp_path / "people.parquet")
    linked = tmp_path / "linked.parquet"
    os.link(people, linked)
    database = tmp_path / "copy.duckdb"
    duckdb.connect(str(database)).close()
    catalog = _catalog(tmp_path)
    options = {"privacy_unit": "user_id", "bounds": {"income": (0, 10)}}
    catalog.add_dataset("people", source=Source("file", path=str(people)),
                        total=Budget(epsilon=2), **options)  # fmt: skip
    others = {
        "hard link": Source("file", path=str(linked)),
        "glob of one file": Source("file", path=str(tmp_path / "peo*.parquet")),
        "another spelling": Source("file", path=f"{tmp_path}/./x/../people.parquet"),
        "a DuckDB source reading it": Source("duckdb", path=str(database), table=str(people)),
    }  # fmt: skip
    for i, (what, source) in enumerate(others.items()):
        with pytest.raises(LedgerError, match=r"file|already registered"):
            catalog.add_dataset(f"alias{i}", source=source, **options)
        assert f"alias{i}" not in {d.name for d in catalog.datasets()}, what
    catalog.ledger.grant("alice", "people", Budget(epsilon=10))
    spent = 0
    with Session.from_catalog(catalog, "people", analyst="alice") as session:
        for i in range(10):  # ten distinct questions (an asked one is answered from the cache)
            try:
                session.sql(f"SELECT COUNT(*) AS n FROM people WHERE income > {i}", epsilon=1)
            except BudgetExhaustedError:
                break
            spent += 1
    assert spent == 2  # the owner's cap, not 10 through five names


def test_a_glob_overlapping_another_datasets_files_is_refused_either_way(tmp_path: Path) -> None:
    folder = tmp_path / "people"
    folder.mkdir()
    for i in range(3):
        _people(folder / f"p{i}.parquet", rows=5)
    catalog = _catalog(tmp_path)
    catalog.add_dataset("one", source=Source("file", path=str(folder / "p1.parquet")))
    with pytest.raises(LedgerError, match="are files of dataset 'one' too"):
        catalog.add_dataset("all", source=Source("file", path=str(folder / "*.parquet")))
    catalog.add_dataset("others", source=Source("file", path=str(folder / "p[02].parquet")))
    assert {d.name for d in catalog.datasets()} == {"one", "others"}


def test_distinct_tables_of_one_duckdb_database_are_distinct_sources(tmp_path: Path) -> None:
    database = tmp_path / "shop.duckdb"
    con = duckdb.connect(str(database))
    con.execute("CREATE TABLE a AS SELECT 1 AS x; CREATE TABLE b AS SELECT 2 AS x")
    con.close()
    catalog = _catalog(tmp_path)
    catalog.add_dataset("a", source=Source("duckdb", path=str(database), table="a"))
    catalog.add_dataset("b", source=Source("duckdb", path=str(database), table="b"))
    link = tmp_path / "same.duckdb"
    os.link(database, link)
    with pytest.raises(LedgerError, match="are files of dataset 'a' too"):
        catalog.add_dataset("a2", source=Source("duckdb", path=str(link), table="A"))


def _shop(tmp_path: Path) -> Path:
    """A DuckDB database with ``people`` and, in it, every way of naming its rows again."""
    database = tmp_path / "shop.duckdb"
    people = _people(tmp_path / "people.parquet")
    con = duckdb.connect(str(database))
    con.execute(
        "CREATE TABLE people AS SELECT range AS user_id, range % 7 AS income FROM range(30);"
        "CREATE TABLE visits AS SELECT range AS user_id, 1 AS n FROM range(5);"
        "CREATE VIEW adults AS SELECT * FROM people WHERE income > 2;"
        "CREATE VIEW of_a_view AS SELECT user_id FROM adults;"
        "CREATE VIEW joined AS SELECT * FROM visits JOIN people USING (user_id);"
        "CREATE TABLE people_copy AS SELECT * FROM people;"
        f"CREATE VIEW from_parquet AS SELECT * FROM read_parquet('{people}');"
        f"CREATE VIEW from_the_file AS SELECT * FROM '{people}';"
    )
    con.close()
    return database


@pytest.mark.parametrize(
    ("alias", "owner"),
    [
        ("adults", "people"),  # a view of the table
        ("of_a_view", "people"),  # a view of a view of it
        ("joined", "people"),  # a view that reads it among others
        ("people_copy", "people"),  # a copy in the same database
        ("from_parquet", "file"),  # a view reading another dataset's file
        ("from_the_file", "file"),  # the same, with the file as the table
    ],
)
def test_a_view_or_a_copy_of_a_registered_duckdb_table_is_refused(
    tmp_path: Path, alias: str, owner: str
) -> None:
    database = _shop(tmp_path)
    catalog = _catalog(tmp_path)
    catalog.add_dataset(
        "people",
        source=Source("duckdb", path=str(database), table="people"),
        total=Budget(epsilon=2),
    )
    catalog.add_dataset("file", source=Source("file", path=str(tmp_path / "people.parquet")))
    with pytest.raises(LedgerError, match=f"dataset '{owner}'") as err:
        catalog.add_dataset("alias", source=Source("duckdb", path=str(database), table=alias))
    assert "alias" not in {d.name for d in catalog.datasets()}
    assert str(tmp_path) not in str(err.value)


def test_a_copy_of_a_table_in_another_database_is_refused(tmp_path: Path) -> None:
    database = _shop(tmp_path)
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute(f"ATTACH '{database}' AS shop (READ_ONLY)")
    con.execute("CREATE TABLE copied AS SELECT * FROM shop.people; DETACH shop")
    con.close()
    catalog = _catalog(tmp_path)
    catalog.add_dataset("people", source=Source("duckdb", path=str(database), table="people"))
    with pytest.raises(LedgerError, match="same rows as dataset 'people'"):
        catalog.add_dataset("copied", source=Source("duckdb", path=str(other), table="copied"))


def test_tables_of_other_rows_in_one_database_stay_distinct_sources(tmp_path: Path) -> None:
    database = _shop(tmp_path)
    catalog = _catalog(tmp_path)
    catalog.add_dataset("people", source=Source("duckdb", path=str(database), table="people"))
    catalog.add_dataset("visits", source=Source("duckdb", path=str(database), table="visits"))
    with pytest.raises(LedgerError, match=r"dataset '(people|visits)'"):  # it reads both
        catalog.add_dataset("joined", source=Source("duckdb", path=str(database), table="joined"))
    assert {d.name for d in catalog.datasets()} == {"people", "visits"}


def _csvs(folder: Path, people: int = 20) -> None:
    folder.mkdir(exist_ok=True)
    for uid in range(people):
        (folder / f"p{uid:03d}.csv").write_text(f"{HEADER}\n{uid},{uid % 5}\n", encoding="utf-8")


def test_a_globs_header_is_recorded_and_kept_when_it_is_registered_again(tmp_path: Path) -> None:
    folder = tmp_path / "people"
    _csvs(folder)
    catalog = _catalog(tmp_path)
    source = Source("file", path=str(folder / "*.csv"))
    ds = catalog.add_dataset("people", source=source, privacy_unit="user_id")
    assert ds.source.layout == HEADER
    (folder / "a-person.csv").write_text("9999,3\n", encoding="utf-8")  # no header, sorts first
    again = catalog.add_dataset("people", source=source, privacy_unit="user_id", replace=True)
    assert again.source.layout == HEADER  # not read again from the files there now
    catalog.ledger.grant("alice", "people", Budget(epsilon=5))
    with Session.from_catalog(catalog, "people", analyst="alice") as session:
        rows = session.engine.connection.sql('SELECT * FROM "people"').fetchall()  # type: ignore[attr-defined]
        session.sql("SELECT COUNT(*) AS n FROM people", epsilon=1)  # answered
    assert len(rows) == 20
    assert ("9999", "3") not in rows


def test_files_that_differ_at_registration_are_refused_unless_the_header_is_given(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "people"
    _csvs(folder)
    (folder / "a-person.csv").write_text("9999,3\n", encoding="utf-8")
    catalog = _catalog(tmp_path)
    glob = str(folder / "*.csv")
    with pytest.raises(SchemaError, match=r"does not start with the header of .*or give the head"):
        catalog.add_dataset("people", source=Source("file", path=glob))
    ds = catalog.add_dataset("people", source=Source("file", path=glob, layout=HEADER))
    assert ds.source.layout == HEADER
    with pytest.raises(InvalidArgumentError, match="no file matches"):
        catalog.add_dataset("nobody", source=Source("file", path=str(tmp_path / "none*.csv")))


def test_a_source_that_cannot_be_opened_is_refused_without_naming_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    people = _people(tmp_path / "secret_clinic_records.parquet")
    catalog = _catalog(tmp_path)
    catalog.add_dataset("people", source=Source("file", path=str(people)), privacy_unit="user_id")
    catalog.ledger.grant("alice", "people", Budget(epsilon=5))
    people.unlink()
    with (
        caplog.at_level(logging.ERROR, logger="veil.sources"),
        pytest.raises(SchemaError, match="dataset 'people' cannot be read now") as caught,
    ):
        Session.from_catalog(catalog, "people", analyst="alice")
    assert "secret_clinic" not in str(caught.value)
    assert str(tmp_path) not in str(caught.value)
    assert "secret_clinic_records.parquet" in caplog.text
