"""Over HTTP, against a real server: one person's file of a glob changes nothing but its rows,
and no problem detail names a file, a path or a directory of the data owner (issue 33).

The review's case: a dataset of per-person CSV files; a file without the header (named after
its person) turned every query into a free refusal quoting the file's server path. Now the
header is recorded when the dataset is registered, a file that does not start with it is
skipped (the operator's log names it), and every answer is 200 on both neighbours. A dataset
whose file is gone is refused in words that name neither the file nor its directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from service.server import Deployment, Server, serve

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

HEADER = "user_id,age,income"
PERSON = "dana_kowalski_hiv_clinic.csv"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    d = Deployment(tmp_path_factory.mktemp("owner"))
    d.service = {"query_timeout_s": 120}
    common = {"privacy_unit": "user_id", "max_epsilon": 1.0, "max_delta": 1e-6}
    # D′ (clinic) and D (clinic_d: the same files and one person's file without the header,
    # registered with the header its owner gives)
    for name, layout in (("clinic", None), ("clinic_d", HEADER)):
        folder = d.root / name
        folder.mkdir()
        for uid in range(40):
            (folder / f"p{uid:03d}.csv").write_text(
                f"{HEADER}\n{uid},{20 + uid % 50},{uid % 9 * 1000}\n", encoding="utf-8"
            )
        source: dict[str, str] = {"kind": "file", "path": f"{name}/*.csv"}
        if layout is not None:
            (folder / PERSON).write_text("9999,37,5000\n", encoding="utf-8")
            source["layout"] = layout
        d.datasets.append({
            "name": name, "source": source,
            "schema": {"user_id": "BIGINT", "age": "BIGINT", "income": "DOUBLE"},
            "bounds": {"income": [0, 10_000], "age": [0, 120]}, **common,
        })  # fmt: skip
    pq.write_table(pa.table({"user_id": [1, 2], "income": [1.0, 2.0]}), d.root / "gone.parquet")
    d.datasets.append({
        "name": "gone", "source": {"kind": "file", "path": "gone.parquet"},
        "bounds": {"income": [0, 10]}, **common,
    })  # fmt: skip
    d.write()
    d.add_key("alice")
    d.grant("alice", "clinic", 5.0)
    d.grant("alice", "clinic_d", 5.0)
    d.grant("alice", "gone", 5.0)
    return d


@pytest.fixture(scope="module")
def server(deployment: Deployment) -> Iterator[Server]:
    with serve(deployment.config, workers=1) as running:
        yield running


def _ask(server: Server, key: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    with server.client(key) as client:
        r = client.post("/v1/query", json=body)
        return r.status_code, r.json()


def _no_owner_detail(deployment: Deployment, text: str) -> None:
    for secret in (str(deployment.root), "clinic/", ".csv", ".parquet", "dana", "gone.parquet"):
        assert secret not in text, (secret, text)


def test_a_persons_file_without_the_header_changes_no_answer(
    server: Server, deployment: Deployment
) -> None:
    key = deployment.keys["alice"]
    shapes = [
        "SELECT COUNT(*) AS n FROM {t} WHERE age > {i}",
        "SELECT SUM(income) AS s FROM {t} WHERE age > {i}",
        "SELECT AVG(age) AS a FROM {t} WHERE income > {i}",
    ]
    i = iter(range(10**6))

    def answers(table: str) -> list[int]:
        asked = [s.format(t=table, i=next(i)) for s in shapes]
        return [_ask(server, key, {"dataset": table, "sql": q, "epsilon": "0.1"})[0] for q in asked]

    assert answers("clinic") == answers("clinic_d") == [200, 200, 200]
    # a person's file arriving later, under a glob a pooled engine already reads
    clinic = deployment.root / "clinic"
    (clinic / PERSON).write_text(f"{HEADER},hiv\n9999,37,5000,1\n", encoding="utf-8")
    assert answers("clinic") == [200, 200, 200]  # one more column: skipped too
    (clinic / PERSON).unlink()


def test_problem_details_name_no_file_or_path(server: Server, deployment: Deployment) -> None:
    key = deployment.keys["alice"]
    (deployment.root / "gone.parquet").unlink(missing_ok=True)
    status, problem = _ask(
        server, key, {"dataset": "gone", "sql": "SELECT COUNT(*) AS n FROM gone", "epsilon": "0.1"}
    )
    assert status == 400, problem
    assert problem["type"] == "urn:veil:problem:schema"
    assert "cannot be read now" in problem["detail"]
    _no_owner_detail(deployment, str(problem))
    for sql in ("SELECT SUM(nope) AS s FROM clinic", "SELECT COUNT(*) AS n FROM clinic WHERE x"):
        status, problem = _ask(server, key, {"dataset": "clinic", "sql": sql, "epsilon": "0.1"})
        assert status == 400, problem
        _no_owner_detail(deployment, str(problem))


def test_the_python_client_says_the_same_words(server: Server, deployment: Deployment) -> None:
    from veil.client import Client
    from veil.errors import SchemaError

    (deployment.root / "gone.parquet").unlink(missing_ok=True)
    with (
        Client(server.base_url, deployment.keys["alice"]) as client,
        pytest.raises(SchemaError, match="cannot be read now") as caught,
    ):
        client.query("gone", "SELECT COUNT(*) AS n FROM gone WHERE income > 1", epsilon=0.1)
    _no_owner_detail(deployment, str(caught.value))


def test_the_files_are_the_owners_to_see_at_registration(tmp_path: Path) -> None:
    """The owner who registers a glob whose files differ is told which, by name."""
    from veil.catalog import Catalog, Source
    from veil.errors import SchemaError

    folder = tmp_path / "clinic"
    folder.mkdir()
    (folder / "p1.csv").write_text(f"{HEADER}\n1,2,3\n", encoding="utf-8")
    (folder / PERSON).write_text("9999,37,5000\n", encoding="utf-8")
    catalog = Catalog(f"sqlite:///{tmp_path / 'ledger.db'}")
    with pytest.raises(SchemaError, match="dana_kowalski"):
        catalog.add_dataset("clinic", source=Source("file", path=str(folder / "*.csv")))
