"""The ledger's protocol on every storage: grant, reserve → commit | refund, remaining, the
cache, history, exactness."""

from __future__ import annotations

import copy
import threading
from fractions import Fraction
from pathlib import Path

import pytest

import veil
from veil import Budget, BudgetExhaustedError, Ledger, LedgerError, ReservationStateError


def test_ten_charges_of_a_tenth_exhaust_one_exactly_and_an_eleventh_is_refused(
    ledger: Ledger,
) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1.0))
    for i in range(10):
        ledger.reserve("alice", "people", Budget(epsilon=0.1), fingerprint=f"q{i}").commit()
    assert ledger.remaining("alice", "people") == Budget(epsilon=0)
    assert ledger.spent("alice", "people").epsilon == 1
    for tiny in ("1/1000000000000000000", 1e-300, 0.1):
        with pytest.raises(BudgetExhaustedError, match="remaining ε=0"):
            ledger.reserve("alice", "people", Budget(epsilon=tiny), fingerprint="q11")
    assert ledger.remaining("alice", "people") == Budget(epsilon=0)


def test_a_refusal_names_requested_remaining_and_the_difference(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1))
    ledger.reserve("alice", "people", Budget(epsilon=0.75), fingerprint="a").commit()
    with pytest.raises(BudgetExhaustedError) as info:
        ledger.reserve("alice", "people", Budget(epsilon=0.5), fingerprint="b")
    assert info.value.requested == Budget(epsilon=0.5)
    assert info.value.remaining == Budget(epsilon=0.25)
    message = str(info.value)
    assert "requested ε=0.5" in message
    assert "remaining ε=0.25" in message
    assert "short by ε=0.25" in message
    assert "'alice'" in message
    assert "'people'" in message


def test_a_reservation_is_charged_until_refunded(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1))
    r = ledger.reserve("alice", "people", Budget(epsilon=0.4), fingerprint="q")
    assert r.status == "reserved"
    assert ledger.remaining("alice", "people") == Budget(epsilon=0.6)
    r.refund()
    assert r.status == "refunded"
    assert ledger.remaining("alice", "people") == Budget(epsilon=1)
    statuses = [h.status for h in ledger.history("alice", "people") if h.event == "charge"]
    assert statuses == ["refunded"]


def test_a_committed_charge_stays_and_its_answer_is_cached_at_no_cost(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1))
    loss = Budget(epsilon=0.25)
    r = ledger.reserve("alice", "people", loss, fingerprint="fp1", data_version="v1")
    answer_id = r.commit({"count": 42, "error_bar": 3.5})
    assert r.status == "committed"
    assert r.answer_id == answer_id
    before = ledger.remaining("alice", "people")
    hit = ledger.cached_answer("alice", "people", fingerprint="fp1", data_version="v1", loss=loss)
    assert hit == {"count": 42, "error_bar": 3.5}
    assert ledger.remaining("alice", "people") == before == Budget(epsilon=0.75)
    hits = [h for h in ledger.history("alice", "people") if h.event == "cache_hit"]
    assert len(hits) == 1
    assert hits[0].answer_id == answer_id
    assert hits[0].fingerprint == "fp1"


@pytest.mark.parametrize(
    ("fingerprint", "data_version", "loss"),
    [
        ("fp2", "v1", Budget(epsilon=0.25)),
        ("fp1", "v2", Budget(epsilon=0.25)),
        ("fp1", "v1", Budget(epsilon=0.5)),
        ("fp1", "v1", Budget(epsilon=0.25, delta=1e-9)),
    ],
)
def test_the_cache_misses_when_fingerprint_data_version_or_loss_differ(
    ledger: Ledger, fingerprint: str, data_version: str, loss: Budget
) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1, delta=1e-6))
    ledger.reserve(
        "alice", "people", Budget(epsilon=0.25), fingerprint="fp1", data_version="v1"
    ).commit({"x": 1})
    found = ledger.cached_answer(
        "alice", "people", fingerprint=fingerprint, data_version=data_version, loss=loss
    )
    assert found is None
    assert [h.event for h in ledger.history("alice", "people")].count("cache_hit") == 0


def test_the_cache_is_per_analyst(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1))
    ledger.grant("bob", "people", Budget(epsilon=1))
    loss = Budget(epsilon=0.5)
    ledger.reserve("alice", "people", loss, fingerprint="f").commit({"x": 1})
    assert (
        ledger.cached_answer("bob", "people", fingerprint="f", data_version="", loss=loss) is None
    )


def test_every_charge_is_recorded_with_time_fingerprint_loss_status_and_answer(
    ledger: Ledger,
) -> None:
    ledger.grant("alice", "people", Budget(epsilon=2))
    r = ledger.reserve(
        "alice", "people", Budget(epsilon="1/3"), fingerprint="abc", data_version="7"
    )
    r.commit({"v": 1})
    grant, charge = ledger.history("alice", "people")[:2]
    assert grant.event == "grant"
    assert grant.loss == Budget(epsilon=2)
    assert charge.event == "charge"
    assert charge.id == r.id
    assert (charge.analyst, charge.dataset) == ("alice", "people")
    assert charge.fingerprint == "abc"
    assert charge.data_version == "7"
    assert charge.loss == Budget(epsilon=Fraction(1, 3))
    assert charge.status == "committed"
    assert charge.answer_id == r.answer_id
    assert charge.answer_id is not None
    assert charge.at.tzinfo is not None
    assert grant.at <= charge.at


def test_a_second_commit_and_a_refund_after_commit_raise_their_own_errors(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1))
    r = ledger.reserve("alice", "people", Budget(epsilon=0.5), fingerprint="q")
    r.commit()
    with pytest.raises(
        ReservationStateError, match="already committed; a reservation commits once"
    ):
        r.commit()
    with pytest.raises(ReservationStateError, match="cannot be refunded: it was committed"):
        r.refund()
    s = ledger.reserve("alice", "people", Budget(epsilon=0.25), fingerprint="q2")
    s.refund()
    with pytest.raises(ReservationStateError, match="was refunded; it cannot refund"):
        s.refund()
    with pytest.raises(ReservationStateError, match="was refunded; it cannot commit"):
        s.commit()
    assert ledger.remaining("alice", "people") == Budget(epsilon=0.5)


def test_grants_add_up_and_refuse_a_different_kind(ledger: Ledger) -> None:
    assert not ledger.has_grant("alice", "people")
    ledger.grant("alice", "people", Budget(epsilon=1))
    assert ledger.has_grant("alice", "people")
    assert ledger.grant("alice", "people", Budget(epsilon=0.5)) == Budget(epsilon=1.5)
    assert ledger.granted("alice", "people") == Budget(epsilon=1.5)
    with pytest.raises(LedgerError, match="holds a pure grant"):
        ledger.grant("alice", "people", Budget(rho=1))
    assert ledger.grant("alice", "people", Budget(epsilon=0, delta=1e-6)) == Budget(
        epsilon=1.5, delta=1e-6
    )


def test_a_grant_that_loses_the_race_to_create_the_budget_is_added_to_it(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes granting a new budget at once: both find no row, one inserts it, the
    other's insert breaks the unique (analyst, dataset) key and is retried as a top-up."""
    ledger.grant("alice", "people", Budget(epsilon=1), alert_thresholds=[1])  # the winner's
    real = ledger._sql
    blind = copy.copy(real)  # the loser's first look, taken before the winner's commit
    blind.budget_locked = real.budget_locked.replace("WHERE", "WHERE 1 = 0 AND", 1)
    monkeypatch.setattr(ledger, "_sql", blind)
    grant = ledger._grant
    looks: list[object] = []

    def racing(*args: object) -> Budget:
        looks.append(ledger._sql)
        try:
            return grant(*args)  # type: ignore[arg-type]
        finally:
            ledger._sql = real

    monkeypatch.setattr(ledger, "_grant", racing)
    assert ledger.grant("alice", "people", Budget(epsilon=0.5)) == Budget(epsilon=1.5)
    assert looks == [blind, real]
    assert ledger.granted("alice", "people") == Budget(epsilon=1.5)
    details = [r.detail for r in ledger.history("alice", "people") if r.event == "grant"]
    assert details == [f"total {Budget(epsilon=1)!r}", f"total {Budget(epsilon=1.5)!r}"]
    ledger.reserve("alice", "people", Budget(epsilon=1.5), fingerprint="q").commit()
    # the winner's thresholds were kept: one alert, at 100 %
    assert [a[2] for a in ledger.alerts() if a[:2] == ("alice", "people")] == [Fraction(1)]


def test_budgets_are_separate_per_analyst_and_dataset(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1))
    ledger.grant("alice", "trips", Budget(epsilon=1))
    ledger.grant("bob", "people", Budget(epsilon=1))
    ledger.reserve("alice", "people", Budget(epsilon=1), fingerprint="q").commit()
    assert ledger.remaining("alice", "people") == Budget(epsilon=0)
    assert ledger.remaining("alice", "trips") == Budget(epsilon=1)
    assert ledger.remaining("bob", "people") == Budget(epsilon=1)


def test_a_zcdp_grant_takes_pure_charges_as_half_epsilon_squared(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(rho=1))
    ledger.reserve("alice", "people", Budget(epsilon=1), fingerprint="a").commit()
    ledger.reserve("alice", "people", Budget(rho=0.25), fingerprint="b").commit()
    assert ledger.remaining("alice", "people") == Budget(rho=0.25)
    with pytest.raises(LedgerError, match=r"cannot pay for the \(ε, δ\) loss"):
        ledger.reserve("alice", "people", Budget(epsilon=0.1, delta=1e-9), fingerprint="c")
    assert ledger.remaining("alice", "people") == Budget(rho=0.25)


def test_a_file_ledger_keeps_everything_across_reopening(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with Ledger(url) as first:
        first.grant("alice", "people", Budget(epsilon=1))
        first.reserve("alice", "people", Budget(epsilon=0.3), fingerprint="a").commit({"x": 1})
        kept = first.reserve("alice", "people", Budget(epsilon=0.2), fingerprint="b")
    with Ledger(url) as second:
        assert second.remaining("alice", "people") == Budget(epsilon=0.5)
        found = second.cached_answer(
            "alice", "people", fingerprint="a", data_version="", loss=Budget(epsilon=0.3)
        )
        assert found == {"x": 1}
        statuses = [h.status for h in second.history("alice", "people") if h.event == "charge"]
        assert statuses == ["committed", "reserved"]
        assert kept.id == second.history("alice", "people")[2].id


def test_a_path_opens_a_sqlite_file_and_the_default_is_a_file_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Ledger(tmp_path / "p.db") as led:
        led.grant("a", "d", Budget(epsilon=1))
    assert (tmp_path / "p.db").exists()
    monkeypatch.chdir(tmp_path)
    with Ledger() as led:
        assert led.url == "sqlite:///veil-ledger.db"
    assert (tmp_path / "veil-ledger.db").exists()


def test_veil_exports_the_ledger() -> None:
    assert veil.Ledger is Ledger


def test_threads_sharing_one_ledger_cannot_overspend(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1))
    outcomes: list[str] = []

    def spend() -> None:
        for _ in range(25):
            try:
                ledger.reserve("alice", "people", Budget(epsilon=0.01), fingerprint="t").commit()
                outcomes.append("ok")
            except BudgetExhaustedError:
                outcomes.append("refused")

    threads = [threading.Thread(target=spend) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 100
    assert outcomes.count("refused") == 100
    assert ledger.remaining("alice", "people") == Budget(epsilon=0)
    assert ledger.check("alice", "people").epsilon == 1


def test_grants_lists_every_budget(ledger: Ledger) -> None:
    assert ledger.grants() == []
    ledger.grant("bob", "trips", Budget(rho=1))
    ledger.grant("alice", "people", Budget(epsilon=1))
    assert ledger.grants() == [("alice", "people"), ("bob", "trips")]


def test_two_answers_to_one_question_are_both_kept_and_the_first_is_served(ledger: Ledger) -> None:
    ledger.grant("alice", "people", Budget(epsilon=1))
    loss = Budget(epsilon=0.25)
    first = ledger.reserve("alice", "people", loss, fingerprint="f")
    second = ledger.reserve("alice", "people", loss, fingerprint="f")
    second_id = second.commit({"x": 2})
    first_id = first.commit({"x": 1})
    assert first_id != second_id
    charges = {h.id: h.answer_id for h in ledger.history("alice", "people") if h.event == "charge"}
    assert charges == {first.id: first_id, second.id: second_id}
    found = ledger.cached_answer("alice", "people", fingerprint="f", data_version="", loss=loss)
    assert found == {"x": 2}  # the earliest released answer


def _race(*calls: tuple[str, object]) -> dict[str, str]:
    """Run each (name, call) in its own thread, released together: 'ok' or 'lost' each."""
    start = threading.Barrier(len(calls))
    seen: dict[str, str] = {}

    def act(name: str, call: object) -> None:
        start.wait()
        try:
            call()  # type: ignore[operator]
            seen[name] = "ok"
        except ReservationStateError:
            seen[name] = "lost"

    threads = [threading.Thread(target=act, args=c) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return seen


@pytest.fixture(params=["sqlite-file", "postgresql"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The storages two Ledger objects can share (an in-memory one lives in one object)."""
    if request.param == "sqlite-file":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


def test_a_commit_and_a_refund_of_one_reservation_racing_leave_exactly_one_outcome(
    shared_url: str,
) -> None:
    # two processes' handles on one reservation (two Ledger objects, two connection pools):
    # a commit locks only the charge row, a refund the charge row then the budget; whichever
    # locks the charge first wins, the other finds it no longer reserved — never both, never
    # a deadlock, and the budget's running sums always match the records
    from veil.accounting.reservation import Reservation

    loss = Budget(epsilon=Fraction(1, 100))
    with Ledger(shared_url) as one, Ledger(shared_url) as two:
        one.grant("alice", "people", Budget(epsilon=1))
        wins = {"commit": 0, "refund": 0}
        for i in range(30):
            mine = one.reserve("alice", "people", loss, fingerprint=f"f{i}")
            theirs = Reservation(two, mine.id, "alice", "people", loss, f"f{i}", "")
            seen = _race(("commit", lambda r=mine: r.commit({"x": 1})), ("refund", theirs.refund))
            assert sorted(seen.values()) == ["lost", "ok"], seen
            wins[next(k for k, v in seen.items() if v == "ok")] += 1
            one.check("alice", "people")  # the stored sums equal the records' sums
        spent = one.check("alice", "people").epsilon
        assert spent == wins["commit"] * loss.eps
        assert one.remaining("alice", "people") == Budget(epsilon=1 - spent)
