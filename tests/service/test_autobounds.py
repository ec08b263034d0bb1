"""Auto bounds over HTTP: ``"bounds": "auto"`` (all, per column, per group) in query and
explain requests, the chosen bounds in the answer, ``POST /v1/bounds``, the owner's bounds as
the outer range, and problem documents (free) for bad requests."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest

import veil
from service_support import Service, write_people

SQL = "SELECT AVG(income) AS m FROM people"
GROUPED = "SELECT grp, AVG(income) AS m FROM grouped GROUP BY grp"


def _post(service: Service, who: str, path: str, body: dict[str, object]) -> tuple[int, dict]:
    r = service.client.post(path, json=body, headers=service.headers(who))
    return r.status_code, r.json()


def _grouped(service: Service) -> None:
    """A dataset with public groups (the owner's domain) and bounds (0, 10 000)."""
    write_people(service.dir / "grouped.parquet", rows=4000)
    source = {"kind": "file", "path": str(service.dir / "grouped.parquet")}
    code, entry = _post(service, "root", "/v1/admin/datasets", {
        "name": "grouped", "source": source, "replace": True, "privacy_unit": "user_id",
        "bounds": {"income": [0, 10_000]}, "domains": {"grp": ["a", "b", "z"]},
    })  # fmt: skip
    assert code == 201, entry
    code, granted = _post(service, "root", "/v1/admin/grants", {
        "analyst": "bob", "dataset": "grouped", "epsilon": 10,
    })  # fmt: skip
    assert code == 201, granted


def test_auto_bounds_cost_what_explain_says_and_stay_within_the_owners(service: Service) -> None:
    before = service.ledger.remaining("alice", "people")
    code, explained = _post(service, "alice", "/v1/explain", {
        "dataset": "people", "sql": SQL, "epsilon": 1, "bounds": "auto", "bounds_share": "1/4",
    })  # fmt: skip
    assert code == 200, explained
    assert explained["cost"]["exact"]["epsilon"] == "1"
    assert any("auto bounds for 'income'" in n for n in explained["notes"])
    assert service.ledger.remaining("alice", "people") == before
    code, answer = _post(service, "alice", "/v1/query", {
        "dataset": "people", "sql": SQL, "epsilon": 1, "bounds": {"income": "auto"},
        "bounds_share": "1/4",
    })  # fmt: skip
    assert code == 200, answer
    (chosen,) = answer["auto_bounds"]
    assert chosen["column"] == "income"
    assert chosen["within"] == [0, 10_000]  # the owner's bounds: only ever narrowed
    assert 0 <= chosen["lower"] < chosen["upper"] <= 10_000
    assert chosen["loss"]["exact"]["epsilon"] == "1/4"
    assert chosen["key"] is None
    assert answer["cost"]["exact"]["epsilon"] == "1"
    assert service.ledger.remaining("alice", "people") == veil.Budget(epsilon=4)
    assert before == veil.Budget(epsilon=5)
    assert answer["notes"][0].startswith("auto bounds for 'income': [")


def test_per_group_auto_bounds_over_http(service: Service) -> None:
    _grouped(service)
    body = {"dataset": "grouped", "sql": GROUPED, "epsilon": 2,
            "bounds": {"income": {"auto": "grp"}}}  # fmt: skip
    code, explained = _post(service, "bob", "/v1/explain", body)
    assert code == 200, explained
    assert any("for each of the 3 groups of 'grp'" in n for n in explained["notes"])
    code, answer = _post(service, "bob", "/v1/query", body)
    assert code == 200, answer
    assert [r[0] for r in answer["rows"]] == ["a", "b", "z"]
    (chosen,) = answer["auto_bounds"]
    assert chosen["key"] == "grp"
    assert [g["group"] for g in chosen["groups"]] == ["a", "b", "z"]
    assert all(0 <= g["lower"] < g["upper"] <= 10_000 for g in chosen["groups"])
    assert service.ledger.remaining("bob", "grouped") == veil.Budget(epsilon=8)


def test_bounds_endpoint_then_the_query_pays_for_the_bounds_once(service: Service) -> None:
    _grouped(service)
    code, found = _post(service, "bob", "/v1/bounds", {
        "dataset": "grouped", "columns": ["income"], "epsilon": "1/5", "by": "grp",
    })  # fmt: skip
    assert code == 200, found
    (entry,) = found["bounds"]
    assert entry["key"] == "grp"
    assert found["cost"]["exact"]["epsilon"] == "1/5"
    assert found["remaining"]["exact"]["epsilon"] == "49/5"
    code, answer = _post(service, "bob", "/v1/query", {
        "dataset": "grouped", "sql": GROUPED, "epsilon": 2, "bounds": {"income": {"auto": "grp"}},
    })  # fmt: skip
    assert code == 200, answer
    (chosen,) = answer["auto_bounds"]
    assert chosen["cached"]
    assert chosen["groups"] == entry["groups"]
    # the query's bounds step (ε 2/10) was the endpoint's: only the rest is charged
    assert service.ledger.remaining("bob", "grouped") == veil.Budget(epsilon=Fraction(8))


def test_the_bounds_endpoint_stays_within_the_owners_range(service: Service) -> None:
    code, found = _post(service, "alice", "/v1/bounds", {
        "dataset": "people", "columns": ["income"], "epsilon": 1, "within": {"income": [0, 5000]},
    })  # fmt: skip
    assert code == 200, found
    assert found["bounds"][0]["within"] == [0, 5000]
    assert 0 <= found["bounds"][0]["lower"] < found["bounds"][0]["upper"] <= 5000


BAD = [
    ("/v1/query", {"sql": SQL, "epsilon": 1, "bounds": "automatic"}, 422, "invalid-request"),
    ("/v1/query", {"sql": SQL, "epsilon": 1, "bounds": {"income": "max"}}, 422, "invalid-request"),
    ("/v1/query", {"sql": SQL, "epsilon": 1, "bounds": {"income": {"auto": "grp"}}}, 400,
     "no GROUP BY key 'grp'"),
    ("/v1/query", {"sql": "SELECT grp, AVG(income) AS m FROM people GROUP BY grp", "epsilon": 1,
                   "bounds": {"income": {"auto": "grp"}}}, 400,
     "the groups of 'grp' are not public"),
    ("/v1/query", {"sql": SQL, "epsilon": 1, "bounds": "auto", "bounds_share": "3/2"}, 400,
     "bounds_share must lie strictly between 0 and 1"),
    ("/v1/query", {"sql": SQL, "epsilon": 1, "bounds_share": "1/10"}, 400, "no bounds are 'auto'"),
    ("/v1/query", {"plan": {"aggregates": [{"function": "avg", "column": "income"}]},
                   "epsilon": 1, "bounds": {"nope": "auto"}}, 400,
     "no aggregate of this query clamps 'nope'"),
    ("/v1/explain", {"plan": {"aggregates": [{"function": "avg", "column": "income"}]},
                     "epsilon": 1, "bounds_share": "1/10"}, 400, "no bounds are 'auto'"),
    ("/v1/explain", {"sql": SQL, "epsilon": 1, "bounds": {"nope": "auto"}}, 400,
     "no aggregate of this query clamps 'nope'"),
    ("/v1/bounds", {"columns": ["income"], "epsilon": 1, "within": {"income": [0, 20_000]}}, 400,
     "widen the owner's"),
    ("/v1/bounds", {"columns": ["income"], "epsilon": 1, "by": "grp"}, 400,
     "the groups of 'grp' are not public"),
    ("/v1/bounds", {"columns": ["income"], "epsilon": 1, "by": "income + 1"}, 400,
     "must be a column with a declared domain"),
    ("/v1/bounds", {"columns": ["nope"], "epsilon": 1}, 400, "nope"),
    ("/v1/bounds", {"columns": [], "epsilon": 1}, 422, "invalid-request"),
    ("/v1/bounds", {"columns": ["income"], "epsilon": 100}, 400, "above the largest cost"),
    ("/v1/query", {"sql": SQL, "epsilon": "21/10", "bounds": "auto"}, 400,
     "above the largest cost"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "body", "status", "said"), BAD)
def test_bad_auto_bounds_requests_are_problem_documents_and_free(
    service: Service, path: str, body: dict[str, object], status: int, said: str
) -> None:
    before = service.ledger.remaining("alice", "people")
    code, problem = _post(service, "alice", path, {"dataset": "people", **body})
    assert code == status, problem
    assert said in problem["detail"] or said in problem["type"], problem
    assert service.client.post(path, json={"dataset": "people", **body}).status_code == 401
    assert service.ledger.remaining("alice", "people") == before


def test_the_python_client_asks_for_auto_bounds(service: Service) -> None:
    from veil.client import Client

    _grouped(service)
    transport = service.client._transport  # type: ignore[attr-defined]
    with Client("http://127.0.0.1", service.keys["bob"], transport=transport) as bob:
        explained = bob.explain("grouped", GROUPED, epsilon=2, bounds={"income": {"auto": "grp"}})
        (found,) = bob.bounds("grouped", ["income"], epsilon=Fraction(1, 5), by="grp")
        r = bob.query("grouped", GROUPED, epsilon=2, bounds={"income": {"auto": "grp"}})
        plain = bob.query("grouped", GROUPED, epsilon=1, bounds="auto", bounds_share=0.2)
    assert explained.cost == veil.Budget(epsilon=2)
    assert found.key == "grp"
    (chosen,) = r.auto_bounds
    assert isinstance(chosen, veil.autobounds.ChosenBounds)
    assert chosen.cached
    assert chosen.value == found.value
    assert set(chosen.value) == {"a", "b", "z"}  # type: ignore[arg-type]
    (one,) = plain.auto_bounds
    assert one.key is None
    assert one.loss == veil.Budget(epsilon=Fraction(1, 5))
    assert 0 <= one.lower < one.upper <= 10_000


def test_a_repeat_is_answered_from_the_cache_free_and_a_job_answers_the_same(
    service: Service,
) -> None:
    _grouped(service)
    body = {"dataset": "grouped", "sql": GROUPED, "epsilon": 2,
            "bounds": {"income": {"auto": "grp"}}}  # fmt: skip
    code, first = _post(service, "bob", "/v1/query", body)
    assert code == 200, first
    code, again = _post(service, "bob", "/v1/query", body)
    assert code == 200, again
    assert again["cached"]
    assert again["cost"]["exact"]["epsilon"] == "0"
    assert again["rows"] == first["rows"]
    assert again["auto_bounds"][0]["groups"] == first["auto_bounds"][0]["groups"]
    r = service.client.post("/v1/query?async=true", json=body, headers=service.headers("bob"))
    assert r.status_code == 202, r.text
    job = r.json()["url"]
    deadline = time.monotonic() + 120  # a safety net only: the job ends when it ends
    state = service.client.get(job, headers=service.headers("bob")).json()
    while state["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
        state = service.client.get(job, headers=service.headers("bob")).json()
    assert state["state"] == "done", state
    assert state["answer"]["rows"] == first["rows"]
    assert state["answer"]["auto_bounds"][0]["cached"]
    assert service.ledger.remaining("bob", "grouped") == veil.Budget(epsilon=8)
