"""veil.client.Client against a real ``veil serve`` (uvicorn, one worker, a SQLite ledger),
started once for this module: the library's Result and errors, the cache, jobs, mechanisms,
and no blind resend of anything that may have been charged."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path

import httpx
import pytest

import veil
from client.relay import Relay, wait_until
from service.server import Deployment, Server, serve
from veil.accounting.records import Record
from veil.catalog import Catalog
from veil.client import ERRORS, Choice, Client, Explanation, Job, Noisy
from veil.errors import (
    AuthenticationError,
    BoundsError,
    BudgetExhaustedError,
    InvalidArgumentError,
    OutcomeUnknownError,
    RateLimitedError,
    SchemaError,
    ServiceError,
    ServiceUnavailableError,
    UnknownDatasetError,
    UnsupportedQueryError,
)
from veil.service.principals import Principals
from veil.service.problems import PROBLEMS

pytestmark = pytest.mark.system  # real servers (veil serve) on loopback

GROUPED = "SELECT state, COUNT(*) AS n, AVG(income) AS avg_income FROM people GROUP BY state"
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "python-client.md"

# analyst → {dataset: (epsilon, delta)}; each test spends its own analyst's grants
GRANTS: dict[str, dict[str, tuple[float | str, float]]] = {
    "alice": {"people": (10, 1e-6), "slow": (5, 0)},
    "carol": {"people": (1, 0)},
    "gone": {"people": (1, 0)},
    "hasty": {"people": (1, 0)},
    "mech": {"app": (5, 1e-5)},
    "slowpoke": {"people": (5, 0), "slow": (5, 0)},
    "reader": {"people": (2, 1e-6), "app": (1, 0)},  # the how-to guide's example
}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Deployment:
    d = Deployment(tmp_path_factory.mktemp("client"), service={"rate_limit": 100})
    d.add_table("people", 2000, users=1000)
    d.add_table("other", 200, seed=1)
    d.add_table("slow", 200, seed=2, min_response_ms=1000)  # every answer ≥ 1 s after arrival
    d.write()
    for analyst, grants in GRANTS.items():
        d.add_key(analyst)
        for dataset, (epsilon, delta) in grants.items():
            d.grant(analyst, dataset, epsilon, delta)
    return d


@pytest.fixture(scope="module")
def server(deployment: Deployment) -> Iterator[Server]:
    with serve(deployment.config, workers=1) as running:
        yield running


@pytest.fixture(scope="module")
def connect(server: Server, deployment: Deployment) -> Iterator[Callable[..., Client]]:
    """connect(analyst, url=…, **options): a Client with the analyst's key."""
    made: list[Client] = []

    def make(analyst: str, *, url: str | None = None, **options: object) -> Client:
        c = Client(url or server.base_url, deployment.keys[analyst], **options)  # type: ignore[arg-type]
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


def charges(client: Client, dataset: str, text: str) -> list[Record]:
    return [r for r in client.history(dataset) if r.event == "charge" and r.query == text]


def cache_hits(client: Client, dataset: str, fingerprint: str) -> int:
    history = client.history(dataset)
    return sum(1 for r in history if r.event == "cache_hit" and r.fingerprint == fingerprint)


# ------------------------------------------------------------------------------ answers


def test_a_query_returns_the_librarys_result_with_error_bars_cost_and_remaining(
    connect: Callable[..., Client], server: Server, deployment: Deployment
) -> None:
    alice = connect("alice")
    r = alice.query("people", GROUPED, epsilon=Fraction(1, 2))
    assert isinstance(r, veil.Result)
    assert r.columns == ("state", "n", "avg_income")
    assert r.types == ("string", "integer", "real")
    assert [row[0] for row in r.rows] == ["CA", "NY", "TX", "WA"]  # the declared domain
    assert r.cost == veil.Budget(epsilon="1/2")
    assert not r.cached
    assert r.private
    assert r.remaining == veil.Budget(epsilon="19/2", delta="1/1000000")
    bars = r.error_bars(0.95)
    assert [[b is None for b in row] for row in bars] == [[True, False, False]] * 4
    assert all(b is not None and b > 0 for row in bars for b in row[1:])
    assert [u.measurement for u in r.usage] == ["count", "sum(income)"]
    assert sum((u.loss for u in r.usage), veil.Budget(epsilon=0)) == r.cost
    frame = r.to_pandas()
    assert list(frame.columns) == list(r.columns)
    assert len(frame) == 4
    assert str(frame["n"].dtype) == "int64"
    assert "± " in r._repr_html_()
    assert "cost: ε=0.5" in str(r)

    # the payload, as the service sent it (now from the cache), has exactly this shape
    with server.client(deployment.keys["alice"]) as raw:
        body = {"dataset": "people", "sql": GROUPED, "epsilon": "1/2"}
        payload = raw.post("/v1/query", json=body).json()
    assert payload["cached"] is True
    assert (payload["columns"], payload["rows"]) == (list(r.columns), r.rows)
    assert payload["error_bars"] == bars
    assert payload["fingerprint"] == r.fingerprint

    # and the library, in-process on the same ledger, gives the same answer (its cache)
    catalog = Catalog(deployment.url)
    try:
        with veil.Session.from_catalog(catalog, "people", analyst="alice") as session:
            local = session.sql(GROUPED, epsilon=Fraction(1, 2))
    finally:
        catalog.ledger.close()
    assert local.cached
    assert (local.columns, local.types, local.rows) == (r.columns, r.types, r.rows)
    assert local.error_bars(0.95) == bars
    assert (local.usage, local.fingerprint) == (r.usage, r.fingerprint)


def test_error_bars_at_a_level_the_answer_does_not_carry_are_refused(
    connect: Callable[..., Client],
) -> None:
    r = connect("alice").query("people", GROUPED, epsilon=Fraction(1, 2))  # cached by now
    with pytest.raises(InvalidArgumentError, match=r"level 0\.95 only .*error_bars\(0\.95\)"):
        r.error_bars(0.9)
    with pytest.raises(InvalidArgumentError, match="level must lie in"):
        r.error_bars(1.5)


def test_a_repeated_query_is_answered_from_the_cache_at_no_cost(
    connect: Callable[..., Client],
) -> None:
    alice = connect("alice")
    sql = "SELECT COUNT(*) AS n FROM people WHERE age >= 30"
    first = alice.query("people", sql, epsilon=0.1)
    second = alice.query("people", sql, epsilon=0.1)
    assert not first.cached
    assert first.cost == veil.Budget(epsilon=0.1)
    assert second.cached
    assert second.cost.is_zero()
    assert second.rows == first.rows
    assert second.remaining == first.remaining
    assert [c.status for c in charges(alice, "people", sql)] == ["committed"]
    assert cache_hits(alice, "people", first.fingerprint) == 1


def test_an_explanation_says_the_cost_and_charges_nothing(connect: Callable[..., Client]) -> None:
    alice = connect("alice")
    before = alice.remaining("people")
    e = alice.explain("people", "SELECT COUNT(*) AS n FROM people WHERE age >= 40", epsilon=0.1)
    assert isinstance(e, Explanation)
    assert e.cost == veil.Budget(epsilon="1/10")
    assert e.covered is True
    assert e.remaining == before
    assert set(e.errors) == {"n"}
    assert e.canonical["root"]["node"] == "aggregate"
    assert '"people"' in e.sql
    assert "cost: ε=0.1" in str(e)
    assert "covers it" in str(e)
    assert alice.remaining("people") == before
    narrowed = alice.explain("people", "SELECT COUNT(*) AS n FROM people", max_rows=1)
    assert narrowed.contribution.endswith("1 row(s) in all")  # a total the owner did not set


def test_accuracy_targets_choose_the_epsilon_over_http(connect: Callable[..., Client]) -> None:
    alice = connect("alice")
    e = alice.explain("people", "SELECT COUNT(*) AS n FROM people", target="n=±50")
    assert e.notes[0].startswith("smallest epsilon meeting every target: ")
    assert e.cost.epsilon is not None
    assert e.cost.epsilon < 1
    sql = "SELECT COUNT(*) AS n FROM people WHERE age >= 31"  # the same cost, a fresh charge
    r = alice.query("people", sql, target=["n=±50"])
    assert r.cost == e.cost
    assert all(b[0] is not None and b[0] <= 50 for b in r.error_bars(0.95))
    with pytest.raises(InvalidArgumentError, match="needs a public reference value"):
        alice.query("people", sql, target="n=±5%")
    with pytest.raises(InvalidArgumentError, match="the largest cost of one query"):
        alice.explain("people", sql, target="n=±0.01", references={"n": 10})


def test_datasets_budget_and_history_are_the_callers_own(connect: Callable[..., Client]) -> None:
    alice = connect("alice")
    assert [d.name for d in alice.datasets()] == ["people", "slow"]
    people = alice.dataset("people")
    assert people.privacy_unit == "user_id"
    assert people.max_epsilon == 1
    assert people.bounds["income"] == (0, 1_000_000)
    assert people.domains["state"] == ("CA", "NY", "TX", "WA")
    assert set(people.columns) == {"user_id", "state", "age", "income"}
    lines = {b.dataset: b for b in alice.budget()}
    assert set(lines) == {"people", "slow"}
    assert lines["slow"].granted == veil.Budget(epsilon=5)
    assert lines["slow"].used == 0
    assert alice.remaining("slow") == veil.Budget(epsilon=5)
    history = alice.history("slow")
    assert [r.event for r in history] == ["grant"]
    assert history[0].analyst == "alice"
    assert history[0].loss == veil.Budget(epsilon=5)


# ------------------------------------------------------------------------------ errors


def test_budget_exhaustion_raises_the_librarys_error_with_requested_and_remaining(
    connect: Callable[..., Client],
) -> None:
    carol = connect("carol")
    carol.query("people", "SELECT COUNT(*) AS n FROM people", epsilon="0.6")
    with pytest.raises(BudgetExhaustedError) as caught:
        carol.query("people", "SELECT SUM(income) AS s FROM people", epsilon="0.6")
    e = caught.value
    assert e.requested == veil.Budget(epsilon="3/5")
    assert e.remaining == veil.Budget(epsilon="2/5")
    # worded exactly as the library words it in-process
    assert str(e) == str(BudgetExhaustedError(e.requested, e.remaining, analyst="carol",
                                              dataset="people"))  # fmt: skip
    assert carol.remaining("people") == veil.Budget(epsilon="2/5")  # nothing was charged


def test_a_revoked_key_raises_the_authentication_error(
    connect: Callable[..., Client], server: Server, deployment: Deployment
) -> None:
    gone = connect("gone")
    assert gone.remaining("people") == veil.Budget(epsilon=1)
    with Principals(deployment.url) as principals:
        principals.revoke("gone")
    with pytest.raises(AuthenticationError, match="live API key") as caught:
        gone.budget()
    assert caught.value.status == 401
    with pytest.raises(AuthenticationError):
        gone.query("people", "SELECT COUNT(*) AS n FROM people", epsilon=0.5)
    with Client(server.base_url, "not-a-key") as stranger, pytest.raises(AuthenticationError):
        stranger.datasets()
    with veil.Ledger(deployment.url) as ledger:  # the refused query charged nothing
        assert ledger.remaining("gone", "people") == veil.Budget(epsilon=1)


def test_unknown_and_not_granted_datasets_raise_the_same_error(
    connect: Callable[..., Client],
) -> None:
    alice = connect("alice")
    messages = set()
    for name in ("nope", "other"):  # "other" exists, but alice holds no grant on it
        calls: list[Callable[[str], object]] = [
            alice.dataset,
            alice.history,
            alice.remaining,
            lambda n: alice.query(n, "SELECT COUNT(*) FROM other", epsilon=0.1),
            lambda n: alice.explain(n, "SELECT COUNT(*) FROM other"),
            lambda n: alice.laplace(n, 1, sensitivity=1, epsilon=0.1),
        ]
        for call in calls:
            with pytest.raises(UnknownDatasetError) as caught:
                call(name)
            messages.add(str(caught.value).replace(repr(name), "NAME"))
    assert len(messages) == 1, messages


def test_refusals_become_the_librarys_errors_and_charge_nothing(
    connect: Callable[..., Client],
) -> None:
    alice = connect("alice")
    before = alice.remaining("people")
    with pytest.raises(UnsupportedQueryError, match="neither grouped nor aggregated") as caught:
        alice.query("people", "SELECT state, age, COUNT(*) FROM people GROUP BY state",
                    epsilon=0.1)  # fmt: skip
    assert caught.value.position == (1, 15)
    assert str(caught.value).endswith("(at line 1, column 15)")
    with pytest.raises(InvalidArgumentError, match="max_rows_per_group"):
        alice.query("people", "SELECT COUNT(*) FROM people", epsilon=0.1, max_rows_per_group=5)
    with pytest.raises(BoundsError, match="income"):
        alice.query("people", "SELECT SUM(income) FROM people", epsilon=0.1,
                    bounds={"income": (0, 10**9)})  # fmt: skip
    with pytest.raises(SchemaError, match="salary"):
        alice.query("people", "SELECT SUM(salary) FROM people", epsilon=0.1)
    with pytest.raises(InvalidArgumentError, match="epsilon"):
        alice.query("people", "SELECT COUNT(*) FROM people", epsilon=2)  # the owner's cap is 1
    with pytest.raises(InvalidArgumentError, match="finite"):
        alice.query("people", "SELECT COUNT(*) FROM people", epsilon=float("nan"))
    assert alice.remaining("people") == before


def test_past_the_rate_limit_the_error_carries_retry_after(
    connect: Callable[..., Client], deployment: Deployment
) -> None:
    hasty = connect("hasty")
    caught = None
    for _ in range(120):  # the limit is 100 a minute per key
        try:
            hasty.budget()
        except RateLimitedError as e:
            caught = e
            break
    assert caught is not None
    assert caught.retry_after >= 1
    assert "requests per minute" in str(caught)
    with pytest.raises(RateLimitedError):  # a rate-limited query is refused before anything
        hasty.query("people", "SELECT COUNT(*) AS n FROM people", epsilon=0.5)
    with veil.Ledger(deployment.url) as ledger:
        assert ledger.remaining("hasty", "people") == veil.Budget(epsilon=1)


def test_every_problem_type_of_the_service_has_its_exception() -> None:
    assert set(ERRORS) == set(PROBLEMS)


def test_an_answer_that_is_not_a_problem_document_is_a_service_error() -> None:
    page = httpx.MockTransport(lambda _: httpx.Response(502, text="<html>Bad gateway</html>"))
    with Client("http://127.0.0.1:9", "k", transport=page, retries=0) as c:
        with pytest.raises(ServiceError, match="HTTP 502 without a veil problem document"):
            c.budget()
        with pytest.raises(ServiceError, match="HTTP 502"):
            c.query("people", "SELECT COUNT(*) FROM people", epsilon=0.1)


# ------------------------------------------------------------------------------ jobs


def test_an_async_query_is_a_job_polled_to_its_answer(connect: Callable[..., Client]) -> None:
    alice = connect("alice")
    sql = "SELECT COUNT(*) AS n FROM people WHERE age < 50"
    job = alice.query("people", sql, epsilon=0.2, wait=False)
    assert isinstance(job, Job)
    assert job.dataset == "people"
    assert len(job.id) == 32
    r = job.result(timeout=30)
    assert isinstance(r, veil.Result)
    assert not r.cached
    assert r.cost == veil.Budget(epsilon=0.2)
    assert job.state() == "done"
    again = alice.job(job.id).result()  # the stored answer, read again: nothing charged
    assert again.rows == r.rows
    assert not again.cached
    assert [c.status for c in charges(alice, "people", sql)] == ["committed"]
    with pytest.raises(InvalidArgumentError, match="no job"):
        alice.job("0" * 32)
    with pytest.raises(InvalidArgumentError, match="no job"):  # not carol's job
        connect("carol").job(job.id)


# ------------------------------------------------------------------------------ mechanisms


def test_the_mechanism_endpoints_release_noisy_values_and_charge_the_grant(
    connect: Callable[..., Client],
) -> None:
    mech = connect("mech")
    lap = mech.laplace("app", [10, 20], sensitivity=1, epsilon="1/2")
    assert isinstance(lap, Noisy)
    assert lap.mechanism == "laplace"
    assert len(lap.values) == 2
    assert lap.loss == veil.Budget(epsilon="1/2")
    assert lap.sensitivity == 1
    assert lap.remaining == veil.Budget(epsilon="9/2", delta="1/100000")
    assert lap.error_bar(0.95) > 0
    assert "sensitivity you claimed" in lap.note
    with pytest.raises(InvalidArgumentError, match=r"level 0\.95 only"):
        lap.error_bar(0.5)
    counted = mech.laplace("app", 100, sensitivity=1, epsilon=1, integer=True)
    assert isinstance(counted.values, int)
    assert counted.mechanism == "discrete_laplace"
    gauss = mech.gaussian("app", [1.5], sensitivity=1, epsilon="1/2", delta="1/1000000")
    assert gauss.loss == veil.Budget(epsilon="1/2", delta="1/1000000")
    assert len(gauss.values) == 1
    assert gauss.error_bar() > 0
    best = mech.exponential("app", ["a", "b", "c"], [0, 0, 100], sensitivity=1, epsilon=1)
    assert isinstance(best, Choice)
    assert (best.index, best.choice) == (2, "c")
    rr = mech.randomized_response("app", ["x", "y", "x"], categories=["x", "y"], epsilon=1)
    assert set(rr.values) <= {"x", "y"}
    assert len(rr.values) == 3
    with pytest.raises(InvalidArgumentError, match="no additive noise"):
        rr.error_bar()
    with pytest.raises(BudgetExhaustedError) as caught:
        mech.laplace("app", 1, sensitivity=1, epsilon=100)
    assert caught.value.requested == veil.Budget(epsilon=100)
    assert caught.value.remaining == mech.remaining("app")
    described = [r.query for r in mech.history("app") if r.event == "charge"]  # newest first
    assert described[-1] is not None
    assert described[-1].startswith("laplace over 2 value(s)")
    assert len(described) == 5


# ------------------------------------------------------------------------------ no blind resend


def test_a_query_whose_answer_times_out_is_not_sent_again(
    connect: Callable[..., Client], server: Server
) -> None:
    sql = "SELECT COUNT(*) AS n FROM slow"
    with Relay(server.base_url) as relay:  # counts the connections the client opens
        # the answer comes after ≥ 1 s (the pad), however fast the machine
        impatient = connect("slowpoke", url=relay.url, timeout=0.3)
        with pytest.raises(OutcomeUnknownError, match=r"history\('slow'\)") as caught:
            impatient.query("slow", sql, epsilon=0.5)
        # it gave up on its one request (a wait would have had the answer, not this error)
        # and did not ask for another: a resend after a timeout needs a new connection
        assert relay.connections == 1
    assert "from the service's cache at no cost" in str(caught.value)
    patient = connect("slowpoke")
    # as the message says: the charge is in the history, committed once; nothing was resent
    wait_until(lambda: [c.status for c in charges(patient, "slow", sql)] == ["committed"])
    (charge,) = charges(patient, "slow", sql)
    assert cache_hits(patient, "slow", str(charge.fingerprint)) == 0
    again = patient.query("slow", sql, epsilon=0.5)  # the same query: the committed answer
    assert again.cached
    assert again.cost.is_zero()
    assert len(charges(patient, "slow", sql)) == 1
    assert again.remaining == veil.Budget(epsilon="9/2")


def test_a_query_whose_connection_drops_after_it_arrived_is_not_sent_again(
    connect: Callable[..., Client], server: Server
) -> None:
    sql = "SELECT AVG(age) AS a FROM people"
    with Relay(server.base_url, "drop_answer") as relay:
        lossy = connect("slowpoke", url=relay.url)
        with pytest.raises(OutcomeUnknownError, match=r"history\('people'\)"):
            lossy.query("people", sql, epsilon=0.25)
        assert relay.connections == 1
    direct = connect("slowpoke")
    wait_until(lambda: [c.status for c in charges(direct, "people", sql)] == ["committed"])
    (charge,) = charges(direct, "people", sql)
    assert cache_hits(direct, "people", str(charge.fingerprint)) == 0
    again = direct.query("people", sql, epsilon=0.25)
    assert again.cached
    assert again.cost.is_zero()
    assert len(charges(direct, "people", sql)) == 1


def test_a_mechanism_call_whose_connection_drops_is_not_sent_again(
    connect: Callable[..., Client], server: Server
) -> None:
    mech = connect("mech")
    before = len([r for r in mech.history("app") if r.event == "charge"])
    with Relay(server.base_url, "drop_answer") as relay:
        lossy = connect("mech", url=relay.url)
        with pytest.raises(OutcomeUnknownError, match="draws fresh noise and charges again"):
            lossy.laplace("app", [1, 2, 3], sensitivity=1, epsilon="0.01")
        assert relay.connections == 1
    wait_until(lambda: len([r for r in mech.history("app") if r.event == "charge"]) > before)
    after = [r for r in mech.history("app") if r.event == "charge"]
    assert len(after) == before + 1
    assert after[0].query is not None  # the newest charge
    assert after[0].query.startswith("laplace over 3 value(s)")


def test_a_query_lost_before_it_reached_the_service_is_not_sent_again_either(
    connect: Callable[..., Client], server: Server
) -> None:
    sql = "SELECT COUNT(*) AS n FROM people WHERE income > 1000"
    with Relay(server.base_url, "drop_first") as relay:
        lossy = connect("slowpoke", url=relay.url)
        with pytest.raises(OutcomeUnknownError):  # the client cannot tell where it was lost
            lossy.query("people", sql, epsilon=0.25)
        assert relay.connections == 1
    direct = connect("slowpoke")
    assert charges(direct, "people", sql) == []  # "no charge": safe to send, once
    assert not direct.query("people", sql, epsilon=0.25).cached


def test_a_read_is_sent_again_after_a_dropped_connection(
    connect: Callable[..., Client], server: Server
) -> None:
    with Relay(server.base_url, "drop_first") as relay:
        reader = connect("slowpoke", url=relay.url)
        assert {b.dataset for b in reader.budget()} == {"people", "slow"}
        assert relay.connections == 2


def test_a_charging_request_never_goes_on_a_kept_alive_connection(
    connect: Callable[..., Client], server: Server
) -> None:
    with Relay(server.base_url) as relay:
        c = connect("slowpoke", url=relay.url)
        c.budget()  # a read: its connection is kept alive for the next read
        c.query("people", "SELECT COUNT(*) AS n FROM people WHERE age < 25", epsilon=0.1)
        c.budget()
        c.laplace("people", 1, sensitivity=1, epsilon=0.01)
        c.history("people")
        assert relay.connections == 3  # one kept for the reads, one for each charging request


def test_a_refused_connection_is_tried_again_because_nothing_was_sent(
    connect: Callable[..., Client], server: Server
) -> None:
    sql = "SELECT COUNT(*) AS n FROM people WHERE age > 60"
    with Relay(server.base_url, listen_after=0.25) as relay:
        late = connect("slowpoke", url=relay.url, retries=4)
        r = late.query("people", sql, epsilon=0.25)
        assert not r.cached
        assert relay.connections == 1
    assert len(charges(connect("slowpoke"), "people", sql)) == 1


def test_a_service_that_cannot_be_reached_is_unavailable_and_nothing_was_sent() -> None:
    with socket.socket() as bound:  # bound, never listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{bound.getsockname()[1]}"
        unreachable = pytest.raises(ServiceUnavailableError, match="nothing was sent, in 2 att")
        with Client(url, "k", retries=1) as c, unreachable:
            c.query("people", "SELECT COUNT(*) FROM people", epsilon=0.1)


def test_the_client_never_shows_its_key_and_refuses_bad_arguments() -> None:
    c = Client("http://127.0.0.1:9", "s3cret-key")
    assert "s3cret" not in repr(c)
    c.close()
    with pytest.raises(InvalidArgumentError, match="http"):
        Client("ftp://example.org", "k")
    with pytest.raises(InvalidArgumentError, match="api_key"):
        Client("http://127.0.0.1:9", "")
    with pytest.warns(veil.VeilWarning, match="plain HTTP"):
        Client("http://veil.example.org", "k").close()


# ------------------------------------------------------------------------------ the docs


def _guide_block() -> str:
    text = GUIDE.read_text(encoding="utf-8")
    found = re.search(r"```python\n(?P<code>.*?)\n```", text, re.S)
    assert found is not None, "the Python client's how-to guide has no python block"
    return found.group("code")


def test_the_guides_client_example_runs_against_a_service(
    server: Server, deployment: Deployment, tmp_path: Path
) -> None:
    env = {**os.environ, "VEIL_URL": server.base_url, "VEIL_KEY": deployment.keys["reader"]}
    done = subprocess.run(
        [sys.executable, "-c", _guide_block()],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "cost: ε=0.5" in done.stdout


def test_without_httpx_the_client_says_which_extra_to_install() -> None:
    probe = (
        "import sys; sys.modules['httpx'] = None\n"
        "import veil.client\n"  # importing the module needs no httpx
        "from veil.errors import MissingDependencyError\n"
        "try:\n"
        "    veil.client.Client('http://127.0.0.1:9', 'k')\n"
        "except MissingDependencyError as e:\n"
        "    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "pip install 'veil[client]'" in done.stdout
