"""The catalog: owner-set metadata in the ledger database, sessions that may only narrow it,
and a dataset-wide cap across analysts."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import veil
from support import SeededSource
from veil import Budget, Catalog, Session
from veil.catalog import Source
from veil.errors import (
    BoundsError,
    BudgetExhaustedError,
    InvalidArgumentError,
    LedgerError,
    UnknownDatasetError,
)


@pytest.fixture
def people(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    n = 3000
    path = tmp_path / "people.parquet"
    pq.write_table(
        pa.table(
            {
                "user_id": rng.integers(0, 1000, n),  # about three rows per user
                "state": rng.choice(["CA", "NY", "TX"], n),
                "income": rng.uniform(0, 200_000, n),
            }
        ),
        path,
    )
    return path


def catalog(tmp_path: Path, people: Path, **extra: object) -> Catalog:
    c = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}")
    options: dict[str, object] = {
        "source": Source("file", path=str(people)),
        "privacy_unit": "user_id",
        "max_groups": 1,
        "max_rows_per_group": 2,
        "bounds": {"income": (0, 100_000)},
        "domains": {"state": ["CA", "NY", "TX"]},
        "max_epsilon": 1,
    }
    options.update(extra)
    c.add_dataset("people", **options)  # type: ignore[arg-type]
    return c


def test_a_dataset_is_stored_in_the_ledger_database_and_read_back(
    tmp_path: Path, people: Path
) -> None:
    catalog(tmp_path, people)
    again = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}")  # another process, the same file
    ds = again.dataset("people")
    assert ds.privacy_unit == "user_id"
    assert ds.max_rows_per_group == 2
    assert ds.public()["bounds"] == {"income": ["0", "100000"]}
    assert "source" not in ds.public()
    assert [d.name for d in again.datasets()] == ["people"]


def test_bounds_are_stored_as_the_text_of_the_doubles_the_engine_clamps_to(
    tmp_path: Path, people: Path
) -> None:
    """One value per constant (issue 33): the owner's decimal bounds are stored as the
    doubles the engine clamps to, in text that reads back as exactly those doubles."""
    from fractions import Fraction

    decimal = Fraction("0.10000000000000000001")  # not a double: stored as the double 0.1
    catalog(tmp_path, people, bounds={"income": (decimal, "12345.6789")})
    ds = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}").dataset("people")
    assert ds.public()["bounds"] == {"income": ["0.1", "12345.6789"]}
    assert ds.bounds["income"] == (Fraction(0.1), Fraction(12345.6789))


def test_adding_is_idempotent_and_a_change_needs_replace(tmp_path: Path, people: Path) -> None:
    c = catalog(tmp_path, people)
    catalog(tmp_path, people)  # the same metadata again: nothing changes
    with pytest.raises(LedgerError, match="replace=True"):
        c.add_dataset("people", source=Source("file", path=str(people)), privacy_unit=None)
    c.add_dataset(
        "people", source=Source("file", path=str(people)), privacy_unit="user_id", replace=True
    )
    assert c.dataset("people").bounds == {}


def test_one_source_is_one_unit_of_accounting(tmp_path: Path, people: Path) -> None:
    c = catalog(tmp_path, people)
    with pytest.raises(LedgerError, match="already registered as dataset 'people'"):
        c.add_dataset("people2", source=Source("file", path=str(people)))


def test_unknown_and_removed_datasets(tmp_path: Path, people: Path) -> None:
    c = catalog(tmp_path, people)
    with pytest.raises(UnknownDatasetError, match="no dataset 'nobody'"):
        c.dataset("nobody")
    c.remove("people")
    with pytest.raises(UnknownDatasetError):
        Session.from_catalog(c, "people", analyst="alice")


def open_session(c: Catalog, analyst: str = "alice", seed: int = 1) -> Session:
    if not c.ledger.has_grant(analyst, "people"):
        c.ledger.grant(analyst, "people", Budget(epsilon=5))
    return Session.from_catalog(c, "people", analyst=analyst)


def test_a_catalog_session_uses_the_owners_metadata(tmp_path: Path, people: Path) -> None:
    c = catalog(tmp_path, people)
    with open_session(c) as s:
        e = s.explain("SELECT state, COUNT(DISTINCT user_id) AS users, AVG(income) FROM people "
                      "GROUP BY state", epsilon=1)  # fmt: skip
        assert "privacy unit user_id: at most 1 group(s) and 2 row(s) per group" in str(e)
        r = s.sql("SELECT state, COUNT(*) AS n FROM people GROUP BY state", epsilon=0.5)
        assert sorted(row[0] for row in r.rows) == ["CA", "NY", "TX"]  # the owner's domain
        assert s.remaining() == Budget(epsilon="4.5")


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"bounds": {"income": (0, 200_000)}}, BoundsError, "widen the owner's"),
        ({"bounds": {"income": (-1, 100)}}, BoundsError, "widen the owner's"),
        ({"bounds": {"user_id": (0, 10)}}, BoundsError, "declared no bounds for 'user_id'"),
        ({"max_rows_per_group": 3}, InvalidArgumentError, "raises the owner's limit of 2"),
        ({"max_groups": 2}, InvalidArgumentError, "raises the owner's limit of 1"),
        ({"epsilon": 2}, InvalidArgumentError, "above the largest cost of one query"),
    ],
)
def test_widening_what_protects_the_data_is_refused_at_no_cost(
    tmp_path: Path, people: Path, options: dict[str, object], error: type[Exception], message: str
) -> None:
    c = catalog(tmp_path, people)
    query = "SELECT SUM(income) AS s FROM people"
    with open_session(c) as s:
        before = s.remaining()
        kwargs: dict[str, object] = {"epsilon": 0.5, **options}
        with pytest.raises(error, match=message):
            s.sql(query, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(error, match=message):
            s.explain(query, **kwargs)  # type: ignore[arg-type]
        assert s.remaining() == before
        assert [r for r in c.ledger.history("alice", "people") if r.event == "charge"] == []


def test_narrowing_is_allowed(tmp_path: Path, people: Path) -> None:
    c = catalog(tmp_path, people)
    with open_session(c) as s:
        r = s.sql(
            "SELECT AVG(income) AS m FROM people",
            epsilon=0.5,
            bounds={"income": (10_000, 90_000)},
            max_rows_per_group=1,
        )
        ((m,),) = r.rows
        assert 10_000 <= m <= 90_000


def test_a_delta_above_the_owners_is_refused(tmp_path: Path, people: Path) -> None:
    c = catalog(tmp_path, people, max_delta=1e-7)
    with open_session(c) as s, pytest.raises(InvalidArgumentError, match="largest δ"):
        s.sql("SELECT COUNT(*) FROM people", epsilon=0.5, delta=1e-6)


def test_the_dataset_cap_bounds_what_all_analysts_spend_together(
    tmp_path: Path, people: Path
) -> None:
    c = catalog(tmp_path, people, total=Budget(epsilon=3))
    assert c.ledger.dataset_cap("people") == (Budget(epsilon=3), Budget(epsilon=3))
    with open_session(c, "alice") as a, open_session(c, "bob") as b:
        a.sql("SELECT COUNT(*) AS n FROM people", epsilon=1)
        b.sql("SELECT COUNT(*) AS n FROM people WHERE income > 0", epsilon=1)
        a.sql("SELECT COUNT(*) AS n FROM people WHERE income > 1", epsilon=1)
        with pytest.raises(BudgetExhaustedError, match="the dataset's total across all analysts"):
            b.sql("SELECT COUNT(*) AS n FROM people WHERE income > 2", epsilon=0.5)
        assert b.remaining() == Budget(epsilon=4)  # bob's own grant is untouched
    assert c.ledger.dataset_cap("people") == (Budget(epsilon=3), Budget(epsilon=0))


def test_a_first_cap_counts_the_charges_already_made(tmp_path: Path, people: Path) -> None:
    c = catalog(tmp_path, people)
    with open_session(c) as s:
        s.sql("SELECT COUNT(*) AS n FROM people", epsilon=1)
    with pytest.raises(LedgerError, match="already spent more than the cap"):
        c.ledger.cap_dataset("people", Budget(epsilon="0.5"))
    c.ledger.cap_dataset("people", Budget(epsilon=2))
    assert c.ledger.dataset_cap("people") == (Budget(epsilon=2), Budget(epsilon=1))


def test_a_refund_gives_the_cap_back(tmp_path: Path, people: Path) -> None:
    c = catalog(tmp_path, people, total=Budget(epsilon=2))
    c.ledger.grant("alice", "people", Budget(epsilon=5))
    r = c.ledger.reserve("alice", "people", Budget(epsilon=1), fingerprint="x")
    assert c.ledger.dataset_cap("people") == (Budget(epsilon=2), Budget(epsilon=1))
    r.refund()
    assert c.ledger.dataset_cap("people") == (Budget(epsilon=2), Budget(epsilon=2))


def test_racing_analysts_never_commit_past_the_cap(tmp_path: Path, people: Path) -> None:
    """Eight threads, each its own ledger connection to one SQLite file, reserve 1/4 at a time
    for eight analysts whose own grants are larger than the cap: what is reserved never
    exceeds the cap of 3."""
    c = catalog(tmp_path, people, total=Budget(epsilon=3))
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    names = [f"a{i}" for i in range(8)]
    for n in names:
        c.ledger.grant(n, "people", Budget(epsilon=2))
    granted: list[int] = []
    lock = threading.Lock()

    def race(name: str) -> None:
        ledger = veil.Ledger(url)
        for i in range(8):
            try:
                ledger.reserve(name, "people", Budget(epsilon="0.25"), fingerprint=f"{name}{i}")
            except BudgetExhaustedError:
                continue
            with lock:
                granted.append(1)
        ledger.close()

    threads = [threading.Thread(target=race, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(granted) == 12  # exactly 3 / (1/4)
    assert c.ledger.dataset_cap("people") == (Budget(epsilon=3), Budget(epsilon=0))


def test_a_toml_file_declares_datasets_idempotently(tmp_path: Path, people: Path) -> None:
    (tmp_path / "data").mkdir()
    people.rename(tmp_path / "data" / "people.parquet")
    config = tmp_path / "veil.toml"
    config.write_text(
        """
[ledger]
url = "sqlite:///ledger.db"

[[datasets]]
name = "people"
source = { kind = "file", path = "data/people.parquet" }
privacy_unit = "user_id"
max_rows_per_group = 2
bounds = { income = [0, 100000] }
domains = { state = ["CA", "NY", "TX"] }
max_epsilon = 1.0
total_epsilon = 10
""",
        encoding="utf-8",
    )
    c = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}")
    (ds,) = c.load_toml(config)
    c.load_toml(config)  # loaded again at the next start: no change, no error
    assert ds.source.path == str(tmp_path / "data" / "people.parquet")
    assert ds.total == Budget(epsilon=10)
    c.ledger.grant("alice", "people", Budget(epsilon=1))
    with Session.from_catalog(c, "people", analyst="alice", source=None) as s:
        assert s.sql("SELECT COUNT(*) AS n FROM people", epsilon=1).rows[0][0] > 0


def test_a_toml_entry_with_an_unknown_key_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "veil.toml"
    config.write_text(
        '[[datasets]]\nname = "x"\nsource = { kind = "file", path = "x.csv" }\nprivacy = "id"\n',
        encoding="utf-8",
    )
    with pytest.raises(InvalidArgumentError, match=r"unknown key\(s\) \['privacy'\]"):
        Catalog("sqlite://").load_toml(config)


def test_a_seeded_source_is_refused_on_the_catalogs_persistent_ledger(
    tmp_path: Path, people: Path
) -> None:
    c = catalog(tmp_path, people)
    with pytest.raises(veil.VeilError, match=r"(?i)seed|replay|source"):
        Session.from_catalog(c, "people", analyst="alice", source=SeededSource(1))


def test_a_zcdp_cost_is_held_to_the_owners_epsilon_cap(tmp_path: Path, people: Path) -> None:
    query = "SELECT COUNT(*) AS n FROM people"
    c = catalog(tmp_path, people)  # ε ≤ 1 per query, no δ allowed
    with open_session(c) as s:
        before = s.remaining()
        with pytest.raises(InvalidArgumentError, match="no pure-ε bound"):
            s.sql(query, epsilon=Budget(rho=100))
        assert s.remaining() == before
    c.add_dataset(
        "people",
        source=Source("file", path=str(people)),
        privacy_unit="user_id",
        max_rows_per_group=2,
        bounds={"income": (0, 100_000)},
        domains={"state": ["CA", "NY", "TX"]},
        max_epsilon=1,
        max_delta=1e-6,
        replace=True,
    )
    c.ledger.grant("carol", "people", Budget(rho=10))
    with Session.from_catalog(c, "people", analyst="carol") as s:
        with pytest.raises(InvalidArgumentError, match=r"above the largest cost"):
            s.sql(query, epsilon=Budget(rho=1))  # ≈ ε 8.4 at δ = 1e-6
        assert s.remaining() == Budget(rho=10)
        s.sql(query, epsilon=Budget(rho="0.005"))  # ≈ ε 0.53 at δ = 1e-6: within the cap


def test_a_refused_change_leaves_the_cap_alone(tmp_path: Path, people: Path) -> None:
    c = catalog(tmp_path, people, total=Budget(epsilon=3))
    with pytest.raises(LedgerError, match="replace=True"):
        c.add_dataset("people", source=Source("file", path=str(people)), total=Budget(epsilon=100))
    assert c.ledger.dataset_cap("people") == (Budget(epsilon=3), Budget(epsilon=3))


PER_STATE = "SELECT state, SUM(income) AS s FROM people GROUP BY state"


def test_per_group_bounds_may_only_narrow_the_owners_each_group_named(
    tmp_path: Path, people: Path
) -> None:
    # per-group bounds are held to the owner's bounds group by group: one group's pair past
    # them is refused before anything is reserved, naming that group; all inside runs
    c = catalog(tmp_path, people)
    inside = {"CA": (0, 50_000), "NY": (10_000, 100_000), "TX": (0, 100_000)}
    with open_session(c) as s:
        before = s.remaining()
        for wide in ({**inside, "NY": (10_000, 150_000)}, {**inside, "TX": (-5, 100)}):
            label = next(k for k in wide if wide[k] != inside[k])
            for call in (s.sql, s.explain):
                with pytest.raises(BoundsError, match=rf"'income' in group '{label}' widen"):
                    call(PER_STATE, epsilon=0.5, bounds={"income": wide})
        assert s.remaining() == before
        assert [r for r in c.ledger.history("alice", "people") if r.event == "charge"] == []
        r = s.sql(PER_STATE, epsilon=0.5, bounds={"income": inside})
        assert sorted(row[0] for row in r.rows) == ["CA", "NY", "TX"]
        assert s.remaining() == Budget(epsilon="4.5")
