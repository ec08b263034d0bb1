"""Every endpoint × {no key, bad key, revoked key, analyst A, analyst B, admin}.

Alice holds grants on ``people`` and ``app``; Bob on ``other``; root is an administrator with no
grant. No analyst reads another's dataset, budget, history or job; admin endpoints need the
admin key; a dataset not granted answers exactly like one that does not exist.
"""

from __future__ import annotations

from typing import Any

import pytest

from service_support import SQL, Service

CALLERS = ("none", "bad", "revoked", "alice", "bob", "root")

QUERY = {"dataset": "people", "sql": SQL, "epsilon": 0.1}
LAPLACE = {"dataset": "app", "values": 10, "sensitivity": 1, "epsilon": 0.1, "integer": True}

# (method, path, body, expected status per caller alice / bob / root)
ALICES: list[tuple[str, str, dict[str, Any] | None, tuple[int, int, int]]] = [
    ("GET", "/v1/datasets/people", None, (200, 404, 404)),
    ("POST", "/v1/query", QUERY, (200, 404, 404)),
    ("POST", "/v1/explain", QUERY, (200, 404, 404)),
    ("GET", "/v1/history?dataset=people", None, (200, 404, 404)),
    ("POST", "/v1/mechanisms/laplace", LAPLACE, (200, 404, 404)),
    (
        "POST",
        "/v1/mechanisms/gaussian",
        {"dataset": "app", "values": [1, 2], "sensitivity": 1, "epsilon": 0.1, "delta": "0.000001"},
        (200, 404, 404),
    ),
    (
        "POST",
        "/v1/mechanisms/exponential",
        {"dataset": "app", "candidates": ["x", "y"], "scores": [1, 2], "sensitivity": 1,
         "epsilon": 0.1},
        (200, 404, 404),
    ),
    (
        "POST",
        "/v1/mechanisms/randomized-response",
        {"dataset": "app", "values": ["x", "y"], "categories": ["x", "y"], "epsilon": 1},
        (200, 404, 404),
    ),
]  # fmt: skip

OWN = [("GET", "/v1/datasets"), ("GET", "/v1/budget")]

ADMIN: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/v1/admin/datasets", None),
    ("GET", "/v1/admin/datasets/people", None),
    ("GET", "/v1/admin/principals", None),
    ("POST", "/v1/admin/principals", {"name": "carol"}),
    ("POST", "/v1/admin/principals/bob/rotate", None),
    ("GET", "/v1/admin/grants", None),
    ("POST", "/v1/admin/grants", {"analyst": "bob", "dataset": "people", "epsilon": 1}),
    ("GET", "/v1/admin/audit", None),
    ("GET", "/v1/admin/audit?format=csv", None),
    ("GET", "/v1/admin/alerts", None),
    ("DELETE", "/v1/admin/datasets/other", None),
    ("DELETE", "/v1/admin/principals/bob", None),
    ("GET", "/metrics", None),  # it names every dataset with its spend
]


def _call(service: Service, who: str, method: str, path: str, body: Any) -> Any:
    return service.client.request(method, path, json=body, headers=service.headers(who))


@pytest.mark.parametrize(("method", "path", "body", "expected"), ALICES)
@pytest.mark.parametrize("who", CALLERS)
def test_alices_resources_answer_only_alice(
    service: Service, who: str, method: str, path: str, body: Any, expected: tuple[int, ...]
) -> None:
    r = _call(service, who, method, path, body)
    if who in ("none", "bad", "revoked"):
        assert r.status_code == 401
        assert r.json()["type"] == "urn:veil:problem:unauthorized"
        assert r.headers["www-authenticate"].startswith("Bearer")
        return
    want = dict(zip(("alice", "bob", "root"), expected, strict=True))[who]
    assert r.status_code == want, r.text
    if want == 404:  # exactly what an unknown dataset answers
        assert r.json() == {
            "type": "urn:veil:problem:not-found",
            "title": "Not found",
            "status": 404,
            "detail": "no such dataset",
            "instance": path.split("?")[0],
        }


@pytest.mark.parametrize(("method", "path"), OWN)
@pytest.mark.parametrize("who", CALLERS)
def test_listings_show_only_the_callers_own(
    service: Service, who: str, method: str, path: str
) -> None:
    r = _call(service, who, method, path, None)
    if who in ("none", "bad", "revoked"):
        assert r.status_code == 401
        return
    assert r.status_code == 200
    text = r.text
    mine = {"alice": {"people"}, "bob": {"other"}, "root": set()}[who]
    for dataset in ("people", "other"):
        assert (f'"{dataset}"' in text) == (dataset in mine), (who, text)


@pytest.mark.parametrize(("method", "path", "body"), ADMIN)
@pytest.mark.parametrize("who", CALLERS)
def test_admin_endpoints_need_the_admin_key(
    service: Service, who: str, method: str, path: str, body: Any
) -> None:
    r = _call(service, who, method, path, body)
    expected = {"none": 401, "bad": 401, "revoked": 401, "alice": 403, "bob": 403}.get(who)
    if expected is not None:
        assert r.status_code == expected
        assert r.headers["content-type"] == "application/problem+json"
    else:
        assert 200 <= r.status_code < 300, r.text


def test_a_job_is_visible_to_its_owner_only(service: Service) -> None:
    r = _call(service, "alice", "POST", "/v1/query?async=true", QUERY)
    assert r.status_code == 202
    url = r.headers["location"]
    assert r.json()["url"] == url
    for who, status in (("bob", 404), ("root", 404), ("none", 401), ("revoked", 401)):
        assert _call(service, who, "GET", url, None).status_code == status
    bogus = _call(service, "alice", "GET", "/v1/jobs/" + "0" * 32, None)
    assert bogus.json() == _call(service, "bob", "GET", url, None).json() | {
        "instance": "/v1/jobs/" + "0" * 32
    }


def test_health_openapi_and_problems_need_no_key(service: Service) -> None:
    for path in ("/healthz", "/openapi.json", "/problems"):
        assert service.client.get(path).status_code == 200
