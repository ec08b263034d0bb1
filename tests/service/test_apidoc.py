"""The OpenAPI document's bearer key, operation ids, examples and sql/plan rule; 405's Allow."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from service_support import Service
from veil.service import models
from veil.service.apidoc import EXAMPLES, OPERATION_IDS, SECURITY_SCHEME
from veil.service.app import OPENAPI_PATH

DOC: dict[str, Any] = json.loads(OPENAPI_PATH.read_text(encoding="utf-8"))
OPERATIONS = [
    (method.upper(), path, op) for path, ops in DOC["paths"].items() for method, op in ops.items()
]


def test_every_operation_has_its_stable_id_once() -> None:
    ids = {(method, path): op["operationId"] for method, path, op in OPERATIONS}
    assert ids == dict(OPERATION_IDS)
    assert len(set(ids.values())) == len(ids)


def test_every_operation_that_needs_a_key_declares_the_bearer_scheme() -> None:
    scheme = DOC["components"]["securitySchemes"][SECURITY_SCHEME]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    public = {(m, p) for m, p, op in OPERATIONS if "security" not in op}
    assert public == {("GET", "/healthz"), ("GET", "/problems")}
    for _m, _p, op in OPERATIONS:
        if "security" in op:
            assert op["security"] == [{SECURITY_SCHEME: []}]
            assert "401" in op["responses"]


_BODIES: dict[str, type[BaseModel]] = {
    "query": models.QueryRequest,
    "explain": models.ExplainRequest,
    "findBounds": models.BoundsRequest,
    "laplace": models.LaplaceRequest,
    "gaussian": models.GaussianRequest,
    "exponential": models.ExponentialRequest,
    "randomizedResponse": models.RandomizedResponseRequest,
    "adminGrant": models.GrantRequest,
    "adminAddPrincipal": models.AnalystCreate,
}


@pytest.mark.parametrize("operation", sorted(EXAMPLES))
def test_every_example_is_a_valid_request_of_its_operation(operation: str) -> None:
    (op,) = [op for _m, _p, op in OPERATIONS if op["operationId"] == operation]
    shown = op["requestBody"]["content"]["application/json"]["examples"]
    assert shown == {k: dict(v) for k, v in EXAMPLES[operation].items()}
    for example in shown.values():
        _BODIES[operation].model_validate(example["value"])


@pytest.mark.parametrize("schema", ["QueryRequest", "ExplainRequest"])
def test_the_document_says_exactly_one_of_sql_or_plan(schema: str) -> None:
    jsonschema_rs = pytest.importorskip("jsonschema_rs")  # schemathesis's validator
    declared = DOC["components"]["schemas"][schema]
    assert "exactly one of `sql`" in declared["description"]
    validator = jsonschema_rs.Draft202012Validator(
        {"$ref": f"#/components/schemas/{schema}", "components": DOC["components"]}
    )
    sql = {"dataset": "people", "sql": "SELECT COUNT(*) AS n FROM people", "epsilon": 1}
    plan = {"aggregates": [{"function": "count", "alias": "n"}]}
    given = {"sql": sql, "plan": {"dataset": "people", "plan": plan, "epsilon": 1}}
    for body in (given["sql"], given["plan"], sql | {"plan": None}):
        assert validator.is_valid(body), body
        models.QueryRequest.model_validate(body)  # and the service takes it
    neither = {"dataset": "people", "epsilon": 1}
    for body in (sql | {"plan": plan}, neither, neither | {"sql": None, "plan": None}):
        assert not validator.is_valid(body), body
        with pytest.raises(ValidationError, match="exactly one of sql"):
            models.QueryRequest.model_validate(body)


def test_a_wrong_method_answers_405_with_allow(service: Service) -> None:
    r = service.client.delete("/v1/query", headers=service.headers("alice"))
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"
    assert r.json()["type"] == "urn:veil:problem:method-not-allowed"
    r = service.client.put("/v1/admin/datasets/people", headers=service.headers("root"))
    assert r.status_code == 405
    assert sorted(m.strip() for m in r.headers["allow"].split(",")) == ["DELETE", "GET"]
