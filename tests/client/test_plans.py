"""Queries sent by veil.client.Client as a JSON plan (``plan=``: a :class:`veil.client.Plan`
or its JSON form) against a real ``veil serve``: the same charges, fingerprints and cached
answers as the equivalent SQL, explain free, and malformed plans refused free — by the client
before anything is sent, or by the service as a 4xx problem, never a 5xx."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

import veil
from client.relay import wait_until
from service.server import Deployment, Server, serve
from veil.client import Client, Job, Plan
from veil.errors import (
    InvalidArgumentError,
    OutcomeUnknownError,
    SchemaError,
    UnsupportedQueryError,
    UserError,
    VeilError,
)

pytestmark = pytest.mark.system  # real servers (veil serve) on loopback

GROUPED_SQL = (
    "SELECT state, COUNT(*) AS n, MEDIAN(income) AS mid FROM people WHERE age >= 30 GROUP BY state"
)
GROUPED = Plan().where("age >= 30").group_by("state").count("n").median("income", "mid")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    d = Deployment(tmp_path_factory.mktemp("plans"), service={"rate_limit": 100})
    d.add_table("people", 2000, users=1000)
    # units with up to 5 rows in up to 2 groups: something for limits="auto" to choose
    d.add_table("heavy", 2000, seed=1, users=400, max_groups=2, max_rows_per_group=5)
    d.add_table("slow", 200, seed=2, min_response_ms=1000)  # every answer ≥ 1 s after arrival
    d.write()
    for analyst in ("alice", "bob", "carol", "dave"):
        d.add_key(analyst)
        d.grant(analyst, "people", 10, 1e-6)
    d.grant("bob", "heavy", 10, 1e-6)
    d.grant("carol", "slow", 5, 0)
    return d


@pytest.fixture(scope="module")
def server(deployment: Deployment) -> Iterator[Server]:
    with serve(deployment.config, workers=1) as running:
        yield running


def connect(server: Server, deployment: Deployment, analyst: str) -> Client:
    return Client(server.base_url, deployment.keys[analyst])


def charged(client: Client, dataset: str = "people") -> list[Fraction]:
    """The ε of each committed charge on ``dataset``, oldest first."""
    return [
        Fraction(r.loss.epsilon)
        for r in client.history(dataset)
        if r.event == "charge" and r.status == "committed" and r.loss is not None
    ]


def cache_hits(client: Client, fingerprint: str) -> int:
    return sum(
        1
        for r in client.history("people")
        if r.event == "cache_hit" and r.fingerprint == fingerprint
    )


# ------------------------------------------------------------------------------ the JSON form


def test_the_builder_writes_the_services_json_form() -> None:
    plan = Plan().where("age >= 18").group_by("state").agg("count").agg("median", "income")
    assert plan.to_json() == {
        "aggregates": [
            {"function": "count"},
            {"function": "quantile", "column": "income", "quantile": "1/2"},
        ],
        "where": ["age >= 18"],
        "group_by": ["state"],
    }
    full = (
        Plan()
        .where("age >= 18")
        .where("income > 0")
        .group_by_keys("state", ["CA", "NY"], alias="st")
        .bin("age", 0, Fraction(65, 2), 120, alias="band")
        .quantile("income", 0.9, "p")
        .sum("income")
        .having("p > 0")
        .order_by("st")
        .order_by("p", descending=True)
        .limit(3, 1)
        .select("st", "band", "p")
    )
    assert full.to_json() == {
        "aggregates": [
            {"function": "quantile", "column": "income", "quantile": 0.9, "alias": "p"},
            {"function": "sum", "column": "income"},
        ],
        "where": ["age >= 18", "income > 0"],
        "group_by": [
            {"column": "state", "keys": ["CA", "NY"], "alias": "st"},
            {"column": "age", "bins": [0, "65/2", 120], "alias": "band"},
        ],
        "having": "p > 0",
        "order_by": ["st", {"column": "p", "descending": True}],
        "limit": 3,
        "offset": 1,
        "select": ["st", "band", "p"],
    }
    assert Plan().count() != Plan()  # immutable: each call a new plan
    base = Plan()
    base.count()
    assert base == Plan()


# ------------------------------------------------------------------------------ refused locally


@pytest.fixture(scope="module")
def nowhere() -> Iterator[Client]:
    """A client of a port nobody listens on: what it refuses, it refuses before sending
    (were anything sent, it would raise ServiceUnavailableError instead)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Client(f"http://127.0.0.1:{port}", "key", retries=0) as c:
        yield c


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Plan().agg("medain", "income"), r"'medain' .*did you mean 'median'.*use one of"),
        (lambda: Plan().agg("mode", "state"), r"'mode' needs a public list .* as SQL"),
        (lambda: Plan().agg("sum"), r"sum needs a column, e\.g\. agg\('sum', 'income'\)"),
        (lambda: Plan().agg("quantile", "age"), r"quantile needs its q"),
        (lambda: Plan().agg("avg", "age", quantile=0.5), r"avg takes no quantile"),
        (lambda: Plan().agg("median", "age", quantile=0.5), r"median is the quantile 1/2"),
        (lambda: Plan().quantile("age", float("nan")), r"the quantile must be finite"),
        (lambda: Plan().quantile("age", True), r"the quantile must be a number, got True"),
        (lambda: Plan().where(""), r"where\(\) must be a non-empty string"),
        (lambda: Plan().group_by(3), r"group_by\(\) column must be a non-empty string"),  # type: ignore[arg-type]
        (lambda: Plan().group_by_keys("state", "CA"), r"a list of the public keys"),
        (lambda: Plan().group_by_keys("state", [object()]), r"a public key must be"),
        (lambda: Plan().bin("age", 10), r"at least two edges"),
        (lambda: Plan().count().having("n > 1").having("n < 9"), r"joined by AND"),
        (lambda: Plan().count().limit(-1), r"limit\(\)'s count must be a whole number"),
        (lambda: Plan().count().limit(True), r"limit\(\)'s count must be a whole number"),  # type: ignore[arg-type]
        (lambda: Plan().count(alias=""), r"an alias must be a non-empty string"),
    ],
)
def test_the_builder_refuses_what_it_can_decide_naming_the_value_and_the_fix(
    build: Any, message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        build()


def test_a_request_needs_exactly_one_query_and_a_plan_an_aggregate(nowhere: Client) -> None:
    with pytest.raises(InvalidArgumentError, match=r"exactly one of sql .* not both"):
        nowhere.query("people", GROUPED_SQL, plan=GROUPED, epsilon=1)
    with pytest.raises(InvalidArgumentError, match=r"exactly one of sql .* got neither"):
        nowhere.explain("people", epsilon=1)
    with pytest.raises(InvalidArgumentError, match=r"at least one aggregate.*Plan\(\)\.agg"):
        nowhere.query("people", plan=Plan().group_by("state"), epsilon=1)
    with pytest.raises(InvalidArgumentError, match=r"plan must be a veil.client.Plan .* got str"):
        nowhere.query("people", plan="SELECT 1", epsilon=1)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError, match=r"sql must be a string, got int"):
        nowhere.explain("people", 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"epsilon must be finite"):
        nowhere.query("people", plan=GROUPED, epsilon=float("inf"))


# ------------------------------------------------------------------------------ on the service


def test_a_plan_and_its_sql_are_one_query_charged_once(
    server: Server, deployment: Deployment
) -> None:
    with connect(server, deployment, "alice") as alice:
        by_plan = alice.query("people", plan=GROUPED, epsilon="1/2")
        assert isinstance(by_plan, veil.Result)
        assert not by_plan.cached
        assert by_plan.cost == veil.Budget(epsilon="1/2")
        assert by_plan.columns == ("state", "n", "mid")
        assert [row[0] for row in by_plan.rows] == ["CA", "NY", "TX", "WA"]  # the domain
        assert by_plan.remaining == veil.Budget(epsilon="19/2", delta="1/1000000")
        by_sql = alice.query("people", GROUPED_SQL, epsilon="1/2")
        assert by_sql.cached
        assert by_sql.cost == veil.Budget(epsilon=0)
        assert by_sql.fingerprint == by_plan.fingerprint
        assert by_sql.rows == by_plan.rows
        again = alice.query("people", plan=GROUPED.to_json(), epsilon=0.5)  # its JSON form
        assert again.cached
        assert again.rows == by_plan.rows
        assert charged(alice) == [Fraction(1, 2)]
        assert cache_hits(alice, by_plan.fingerprint) == 2
        assert alice.remaining("people") == veil.Budget(epsilon="19/2", delta="1/1000000")


def test_a_plan_with_auto_bounds_and_limits_charges_what_its_sql_does(
    server: Server, deployment: Deployment
) -> None:
    plan = Plan().where("age >= 40").avg("income", "m")
    sql = "SELECT AVG(income) AS m FROM heavy WHERE age >= 40"
    options: dict[str, Any] = {
        "epsilon": 1,
        "bounds": "auto",
        "bounds_share": "1/5",
        "limits": "auto",
        "limits_share": "1/4",
    }
    with connect(server, deployment, "bob") as bob:
        explained = bob.explain("heavy", plan=plan, **options)
        assert explained.cost == veil.Budget(epsilon=1)
        assert charged(bob, "heavy") == []  # explain charges nothing
        by_plan = bob.query("heavy", plan=plan, **options)
        assert by_plan.cost == veil.Budget(epsilon=1)
        assert [c.column for c in by_plan.auto_bounds] == ["income"]
        assert by_plan.auto_limits is not None
        steps = sorted(charged(bob, "heavy"))
        assert sum(steps) == 1
        assert steps == sorted([Fraction(1, 5), Fraction(1, 4), Fraction(11, 20)])
        by_sql = bob.query("heavy", sql, **options)
        assert by_sql.cached
        assert by_sql.cost == veil.Budget(epsilon=0)
        assert by_sql.fingerprint == by_plan.fingerprint
        assert by_sql.rows == by_plan.rows
        assert sorted(charged(bob, "heavy")) == steps  # nothing more


def test_explaining_a_plan_charges_nothing_and_says_what_its_sql_would_cost(
    server: Server, deployment: Deployment
) -> None:
    with connect(server, deployment, "carol") as carol:
        by_plan = carol.explain("people", plan=GROUPED, epsilon="1/4")
        by_sql = carol.explain("people", GROUPED_SQL, epsilon="1/4")
        assert by_plan.cost == by_sql.cost == veil.Budget(epsilon="1/4")
        assert by_plan.errors == by_sql.errors
        assert by_plan.canonical == by_sql.canonical
        assert carol.explain("people", plan=GROUPED).cost == veil.Budget(epsilon=1)  # default ε
        assert charged(carol) == []
        assert carol.remaining("people") == veil.Budget(epsilon=10, delta="1/1000000")


def test_every_aggregate_of_the_builder_is_the_sql_ones(
    server: Server, deployment: Deployment
) -> None:
    plan = (
        Plan()
        .count_distinct("user_id", "units")
        .count("aged", column="age")
        .sum("income", "s")
        .avg("income", "a")
        .variance("income", "v")
        .stddev("income", "sd")
        .agg("var_pop", "age", "vp")
        .agg("stddev_pop", "age", "sdp")
        .quantile("income", Decimal("0.9"), "p90")
        .min("age", "lo")
        .max("age", "hi")
        .limit(5)
    )
    assert "offset" not in plan.to_json()
    sql = (
        "SELECT COUNT(DISTINCT user_id) AS units, COUNT(age) AS aged, SUM(income) AS s, "
        "AVG(income) AS a, VARIANCE(income) AS v, STDDEV(income) AS sd, VAR_POP(age) AS vp, "
        "STDDEV_POP(age) AS sdp, QUANTILE_CONT(income, 0.9) AS p90, MIN(age) AS lo, "
        "MAX(age) AS hi FROM people LIMIT 5"
    )
    options: dict[str, Any] = {"epsilon": "1/2", "delta": "1/1000000", "weights": False}
    with connect(server, deployment, "carol") as carol:
        by_plan = carol.explain("people", plan=plan, max_rows_per_group=1, **options)
        by_sql = carol.explain("people", sql, max_rows_per_group=1, **options)
        assert by_plan.canonical == by_sql.canonical
        assert by_plan.cost == by_sql.cost
        assert [u.measurement for u in by_plan.usage] == [u.measurement for u in by_sql.usage]
        assert charged(carol) == []


def test_a_plan_runs_as_a_job_when_asked(server: Server, deployment: Deployment) -> None:
    with connect(server, deployment, "carol") as carol:
        job = carol.query("people", plan=Plan().count("n"), epsilon="1/10", wait=False)
        assert isinstance(job, Job)
        answer = job.result(timeout=60)
        assert answer.columns == ("n",)
        assert answer.cost == veil.Budget(epsilon="1/10")


def test_a_plan_whose_answer_times_out_is_not_sent_again(
    server: Server, deployment: Deployment
) -> None:
    plan = Plan().count("n")
    impatient = Client(server.base_url, deployment.keys["carol"], timeout=0.3)
    with impatient, pytest.raises(OutcomeUnknownError, match=r"find this plan .*history\('slow'\)"):
        impatient.query("slow", plan=plan, epsilon="1/2")  # the answer comes after ≥ 1 s
    with connect(server, deployment, "carol") as carol:

        def charges() -> list[tuple[str | None, str | None]]:
            history = carol.history("slow")
            return [(r.status, r.query) for r in history if r.event == "charge"]

        wait_until(lambda: [status for status, _ in charges()] == ["committed"])
        ((_, text),) = charges()
        assert text is not None
        assert text.startswith('{"')  # the plan's canonical JSON, as the message says
        again = carol.query("slow", plan=plan, epsilon="1/2")
        assert again.cached
        assert again.cost.is_zero()
        assert len(charges()) == 1


@pytest.mark.parametrize(
    ("plan", "options", "error", "words"),
    [
        ({"aggregates": []}, {}, InvalidArgumentError, "aggregates"),
        (
            {"aggregates": [{"function": "count", "colour": "x"}]},
            {},
            InvalidArgumentError,
            "colour",
        ),
        (
            {"where": "age > 3", "aggregates": [{"function": "count"}]},
            {},
            InvalidArgumentError,
            "where",
        ),
        (
            {"aggregates": [{"function": "medain", "column": "age"}]},
            {},
            UnsupportedQueryError,
            "medain",
        ),
        ({"aggregates": [{"function": "avg", "column": "nope"}]}, {}, SchemaError, "nope"),
        (
            {"aggregates": [{"function": "count"}], "where": ["random() > 0"]},
            {},
            UnsupportedQueryError,
            "random",
        ),
        ({"aggregates": [{"function": "count"}]}, {"target": "n=±50"}, InvalidArgumentError, "sql"),
        (
            {"aggregates": [{"function": "avg", "column": "income"}]},
            {"bounds": {"income": {"auto": "state"}}},
            InvalidArgumentError,
            "group by",
        ),
    ],
)
def test_a_malformed_plan_is_a_problem_error_and_free_never_a_5xx(
    server: Server,
    deployment: Deployment,
    plan: dict[str, Any],
    options: dict[str, Any],
    error: type[VeilError],
    words: str,
) -> None:
    with connect(server, deployment, "dave") as dave:
        for ask in (dave.query, dave.explain):
            with pytest.raises(error) as caught:
                ask(
                    "people",
                    plan=plan,
                    **({} if "target" in options else {"epsilon": 1}),
                    **options,
                )
            assert isinstance(caught.value, UserError), caught.value  # not a 5xx's error
            assert words in str(caught.value).lower(), caught.value
        assert charged(dave) == []
