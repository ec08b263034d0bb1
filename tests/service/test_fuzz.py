"""Property-based fuzzing of the served OpenAPI document (schemathesis) against a real server.

Every operation of ``/openapi.json`` is called with generated requests — valid ones and ones
the schema forbids (bodies, parameters, paths) — with an analyst's key and with an
administrator's:
no answer is a 5xx; every answer's status, content type, declared headers and body are ones the
document declares for the operation (a refusal's body is the ``Problem`` schema); and every
refusal is a problem document (``application/problem+json`` whose ``status`` is the
response's). Deterministic (``derandomize``) and bounded (``max_examples`` per operation).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.server import Deployment, Server, serve

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

MAX_EXAMPLES = 25
ANALYST = "fuzz-analyst"
ADMIN = "fuzz-admin-3c9e"  # a name the fuzzer will not revoke or rotate by chance
FUZZ = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    d = Deployment(tmp_path_factory.mktemp("fuzz"))
    d.service = {"rate_limit": 1_000_000, "query_timeout_s": 60}
    d.add_table("people", 500, seed=4)
    d.write()
    d.add_key(ANALYST)
    d.add_key(ADMIN, "admin", cli=True)
    d.grant(ANALYST, "people", 1000)
    return d


@pytest.fixture(scope="module")
def server(deployment: Deployment) -> Iterator[Server]:
    with serve(deployment.config, workers=2) as s:
        yield s


@pytest.fixture(scope="module")
def api(server: Server) -> Any:
    return schemathesis.openapi.from_url(f"{server.base_url}/openapi.json")


def problem_document(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 4xx is an RFC 9457 problem document whose status is the response's."""
    if not 400 <= response.status_code < 500:
        return None
    kind = response.headers.get("content-type", [""])
    kind = kind[0] if isinstance(kind, list) else kind
    assert kind.startswith("application/problem+json"), f"{response.status_code} as {kind}"
    body = response.json()
    assert isinstance(body, dict)
    assert str(body.get("type", "")).startswith("urn:veil:problem:"), body
    assert body.get("status") == response.status_code, body
    return True


# Queries for the fuzzer to put where a body has "sql": answered, refused, outside the subset.
SQL = (
    "SELECT COUNT(*) AS n FROM people",
    "SELECT state, COUNT(*) AS n, SUM(income) AS s FROM people GROUP BY state",
    "SELECT AVG(income) AS a, VAR_POP(age) AS v FROM people WHERE age >= 30",
    "SELECT age, COUNT(*) AS n FROM people GROUP BY age",
    "SELECT state, COUNT(*) AS n FROM people GROUP BY state HAVING n > 10 ORDER BY n DESC",
    "SELECT * FROM people",
    "SELECT COUNT(*) FROM people JOIN people p2 ON people.user_id = p2.user_id",
    "DROP TABLE people",
)


def _steer(case: Any, how: str, sql: str) -> Any:
    """Most cases name the granted dataset, the analyst and a real query where the generated
    ones had random strings, and some also drop the options an analyst may not set, so that
    the fuzzing reaches past "no such dataset" into queries, charges and releases."""
    if how == "raw":
        return case
    if isinstance(case.body, dict):
        for key, value in (("dataset", "people"), ("analyst", ANALYST), ("sql", sql)):
            if isinstance(case.body.get(key), str):
                case.body[key] = value
        if how == "clean" and "sql" in case.body:
            for key in ("privacy_unit", "bounds", "max_groups", "max_rows_per_group", "delta"):
                case.body.pop(key, None)
            case.body["epsilon"] = "0.01"
    if isinstance(case.query, dict) and isinstance(case.query.get("dataset"), str):
        case.query["dataset"] = "people"
    # (never DELETE /v1/admin/datasets/people: the other cases need it)
    if (
        isinstance(case.path_parameters, dict)
        and "dataset" in case.operation.path
        and case.method.upper() != "DELETE"
    ):
        case.path_parameters = {**case.path_parameters, "name": "people"}
    return case


STEER = ("clean", "named", "clean", "raw")

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    problem_document,
]


def _cases() -> list[tuple[str, str, GenerationMode]]:
    """(method, path, mode) of every operation of the committed document (a service test
    checks it is the one served; the fuzzing reads the served one): valid requests for each,
    and requests the schema forbids for those with a body or query parameters (a path of
    free strings has nothing to break)."""
    from veil.service.app import OPENAPI_PATH

    doc = json.loads(OPENAPI_PATH.read_text(encoding="utf-8"))
    out = []
    for path, ops in sorted(doc["paths"].items()):
        for method, op in sorted(ops.items()):
            out.append((method.upper(), path, GenerationMode.POSITIVE))
            query = any(p.get("in") == "query" for p in op.get("parameters", []))
            if "requestBody" in op or query:
                out.append((method.upper(), path, GenerationMode.NEGATIVE))
    return out


CASES = _cases()


@pytest.mark.parametrize("who", [ANALYST, ADMIN])
@pytest.mark.parametrize(
    ("method", "path", "mode"), CASES, ids=[f"{m} {p} {g.value}" for m, p, g in CASES]
)
def test_no_generated_request_fails_the_service_or_its_schema(
    api: Any, deployment: Deployment, method: str, path: str, mode: GenerationMode, who: str
) -> None:
    operation = api[path][method]
    headers = {"Authorization": f"Bearer {deployment.keys[who]}"}

    generated = operation.as_strategy(generation_mode=mode)
    steer = itertools.cycle(STEER)  # in turn, not drawn: Hypothesis favours the first choice
    cases = st.tuples(generated, st.sampled_from(SQL)).map(
        lambda t: _steer(t[0], next(steer), t[1])
    )

    @FUZZ
    @given(case=cases)
    def fuzz(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)

    fuzz()
