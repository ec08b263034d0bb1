"""Survey weights over HTTP: the admin registers a dataset's weights column (with its bounds);
an analyst's queries are weighted by it, ``"weights": false`` opts out, and a refusal costs
nothing."""

from __future__ import annotations

from service_support import Service, write_people

SQL = (
    "SELECT grp, COUNT(*) AS n, AVG(income) AS m FROM weighted WHERE grp IN ('a', 'b') GROUP BY grp"
)


def _post(service: Service, who: str, path: str, body: dict[str, object]) -> tuple[int, dict]:
    r = service.client.post(path, json=body, headers=service.headers(who))
    return r.status_code, r.json()


def test_the_owners_weights_weight_an_analysts_queries(service: Service) -> None:
    write_people(service.dir / "weighted.parquet", rows=100)
    source = {"kind": "file", "path": str(service.dir / "weighted.parquet")}
    code, entry = _post(service, "root", "/v1/admin/datasets", {
        "name": "weighted", "source": source, "replace": True,
        "bounds": {"income": [0, 10_000], "user_id": [0, 3]}, "weights": "user_id",
        "domains": {"grp": ["a", "b"]},
    })  # fmt: skip
    assert code == 201, entry
    assert entry["weights"] == "user_id"
    code, granted = _post(service, "root", "/v1/admin/grants", {
        "analyst": "bob", "dataset": "weighted", "epsilon": 5,
    })  # fmt: skip
    assert code == 201, granted
    code, explained = _post(service, "bob", "/v1/explain", {
        "dataset": "weighted", "sql": SQL, "epsilon": 1,
    })  # fmt: skip
    assert code == 200, explained
    assert {u["measurement"] for u in explained["usage"]} == {
        "sum(user_id)", "sum(income * user_id)"
    }  # fmt: skip
    code, plain = _post(service, "bob", "/v1/explain", {
        "dataset": "weighted", "sql": SQL, "epsilon": 1, "weights": False,
    })  # fmt: skip
    assert code == 200, plain
    assert "sum(user_id)" not in {u["measurement"] for u in plain["usage"]}
    before = service.ledger.remaining("bob", "weighted")
    code, problem = _post(service, "bob", "/v1/query", {
        "dataset": "weighted", "sql": "SELECT MEDIAN(income) AS m FROM weighted", "epsilon": 1,
    })  # fmt: skip
    assert code == 400, problem
    assert "cannot be weighted" in problem["detail"]
    assert service.ledger.remaining("bob", "weighted") == before


def test_the_python_client_passes_weights(service: Service) -> None:
    from veil.client import Client

    test_the_owners_weights_weight_an_analysts_queries(service)  # registers "weighted"
    # the client over the in-process app: starlette's test transport (no server process)
    transport = service.client._transport  # type: ignore[attr-defined]
    with Client("http://127.0.0.1", service.keys["bob"], transport=transport) as bob:
        weighted = bob.explain("weighted", SQL, epsilon=1)
        plain = bob.explain("weighted", SQL, epsilon=1, weights=False)
        r = bob.query("weighted", SQL, epsilon=1, weights=False)
    assert {u.measurement for u in weighted.usage} >= {"sum(user_id)"}
    assert "sum(user_id)" not in {u.measurement for u in plain.usage}
    assert r.columns == ("grp", "n", "m")
