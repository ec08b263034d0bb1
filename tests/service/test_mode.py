"""MODE over HTTP: candidates listed by WHERE, the margin in the answer's notes, and a MODE
without candidates refused at no cost."""

from __future__ import annotations

from service_support import Service


def _post(service: Service, body: dict[str, object]) -> tuple[int, dict]:
    r = service.client.post("/v1/query", json=body, headers=service.headers("alice"))
    return r.status_code, r.json()


def test_a_mode_over_listed_candidates_is_released_with_its_margin(service: Service) -> None:
    sql = "SELECT MODE(grp) AS m FROM people WHERE grp IN ('a', 'b', 'c')"
    code, answer = _post(service, {"dataset": "people", "sql": sql, "epsilon": 1})
    assert code == 200, answer
    assert answer["rows"][0][0] in ("a", "b", "c")
    assert answer["error_bars"] == [[None]]
    assert "every other of the 3 candidates by ≥" in answer["notes"][0]


def test_a_mode_without_candidates_is_refused_for_free(service: Service) -> None:
    before = service.ledger.remaining("alice", "people")
    sql = "SELECT MODE(grp) FROM people"
    code, problem = _post(service, {"dataset": "people", "sql": sql, "epsilon": 1})
    assert (code, problem["type"]) == (400, "urn:veil:problem:invalid-argument")
    assert "MODE(grp) chooses among public candidates" in problem["detail"]
    assert service.ledger.remaining("alice", "people") == before
