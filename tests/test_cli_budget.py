"""`veil budget show|grant|history` against a temporary SQLite ledger, via typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import veil
from cli_support import invoke


@pytest.fixture
def ledger_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


def test_grant_then_show_reports_the_grant_as_json(ledger_url: str) -> None:
    code, out, _ = invoke(
        "budget", "grant", "--ledger", ledger_url, "--analyst", "alice", "--dataset", "people",
        "--epsilon", "1", "--delta", "1e-6", "--format", "json",
    )  # fmt: skip
    assert code == 0
    granted = json.loads(out)
    assert granted["total"]["exact"] == {"epsilon": "1", "delta": "1/1000000"}
    code, out, _ = invoke("budget", "show", "--ledger", ledger_url, "--format", "json")
    assert code == 0
    (row,) = json.loads(out)["budgets"]
    assert (row["analyst"], row["dataset"]) == ("alice", "people")
    assert row["remaining"]["epsilon"] == 1.0
    assert row["remaining"]["delta"] == 1e-6


def test_grants_add_up_and_are_written_to_the_ledger_file(ledger_url: str) -> None:
    for eps in ("0.5", "1/4"):
        code, _, _ = invoke(
            "budget", "grant", "--ledger", ledger_url, "-a", "bob", "--dataset", "d", "-e", eps
        )
        assert code == 0
    with veil.Ledger(ledger_url) as ledger:
        assert ledger.granted("bob", "d") == veil.Budget(epsilon="3/4")


def test_show_prints_a_table_with_what_is_used(ledger_url: str) -> None:
    with veil.Ledger(ledger_url) as ledger:
        ledger.grant("alice", "people", veil.Budget(epsilon=2))
        ledger.reserve("alice", "people", veil.Budget(epsilon=0.5), fingerprint="q1").commit()
    code, out, _ = invoke("budget", "show", "--ledger", ledger_url)
    assert code == 0
    assert "alice" in out
    assert "ε=1.5" in out
    assert "25%" in out


def test_show_filters_and_says_when_nothing_matches(ledger_url: str) -> None:
    with veil.Ledger(ledger_url) as ledger:
        ledger.grant("alice", "people", veil.Budget(epsilon=2))
    code, out, err = invoke("budget", "show", "--ledger", ledger_url, "--analyst", "zed")
    assert code == 2
    assert out == ""
    assert "the ledger has no budget for analyst 'zed'" in err


def test_history_lists_grants_and_charges_newest_first(ledger_url: str) -> None:
    with veil.Ledger(ledger_url) as ledger:
        ledger.grant("alice", "people", veil.Budget(epsilon=1))
        ledger.reserve("alice", "people", veil.Budget(epsilon=0.25), fingerprint="f" * 64).commit()
        ledger.reserve("alice", "people", veil.Budget(epsilon=0.25), fingerprint="e" * 64).refund()
    code, out, _ = invoke(
        "budget", "history", "--ledger", ledger_url, "-a", "alice", "--dataset", "people",
        "-f", "json",
    )  # fmt: skip
    assert code == 0
    payload = json.loads(out)
    events = [(h["event"], h["status"]) for h in payload["history"]]
    assert events[-1] == ("grant", None)
    assert [e for e in events if e[0] == "charge"] == [
        ("charge", "refunded"),
        ("charge", "committed"),
    ]
    assert payload["remaining"]["exact"]["epsilon"] == "3/4"
    assert payload["next"] is None


def test_history_is_shown_a_page_at_a_time_with_the_cursor_of_older_events(
    ledger_url: str,
) -> None:
    with veil.Ledger(ledger_url) as ledger:
        ledger.grant("alice", "people", veil.Budget(epsilon=1))
        for i in range(5):
            ledger.reserve("alice", "people", veil.Budget(epsilon="1/8"), fingerprint=f"q{i}")
        every = [r.id for r in reversed(ledger.history("alice", "people"))]
    seen: list[int] = []
    cursor: list[str] = []
    while True:
        code, out, _ = invoke(
            "budget", "history", "--ledger", ledger_url, "-a", "alice", "--dataset", "people",
            "-f", "json", "--limit", "2", *cursor,
        )  # fmt: skip
        assert code == 0
        payload = json.loads(out)
        seen += [h["id"] for h in payload["history"]]
        if payload["next"] is None:
            break
        cursor = ["--before", str(payload["next"])]
    assert seen == every
    code, out, _ = invoke(
        "budget", "history", "--ledger", ledger_url, "-a", "alice", "--dataset", "people",
        "--limit", "2",
    )  # fmt: skip
    assert f"older: --before {every[1]}" in " ".join(out.split())
    code, _, err = invoke(
        "budget", "history", "--ledger", ledger_url, "-a", "alice", "--dataset", "people",
        "--limit", "0",
    )  # fmt: skip
    assert code == 2
    assert "limit must be a whole number of events from 1 to 1000, got 0" in err


def test_history_as_a_table_and_as_csv(ledger_url: str) -> None:
    with veil.Ledger(ledger_url) as ledger:
        ledger.grant("alice", "people", veil.Budget(epsilon=1))
        ledger.reserve("alice", "people", veil.Budget(epsilon=0.25), fingerprint="abc").commit()
    code, out, _ = invoke(
        "budget", "history", "--ledger", ledger_url, "-a", "alice", "--dataset", "people"
    )
    assert code == 0
    assert "committed" in out
    assert "remaining ε=0.75" in out
    code, out, _ = invoke(
        "budget", "history", "--ledger", ledger_url, "-a", "alice", "--dataset", "people",
        "-f", "csv",
    )  # fmt: skip
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "id,at,event,status,loss,fingerprint,detail,query"
    assert len(lines) == 3


def test_history_of_an_unknown_analyst_is_a_user_error(ledger_url: str) -> None:
    with veil.Ledger(ledger_url) as led:
        led.grant("alice", "people", veil.Budget(epsilon=1))
    code, out, err = invoke(
        "budget", "history", "--ledger", ledger_url, "-a", "carol", "--dataset", "people"
    )
    assert code == 2
    assert out == ""
    assert err.startswith("error: unknown analyst 'carol'")
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "say how much to grant"),
        (("--epsilon", "-1"), "--epsilon must not be negative, got -1"),
        (("--epsilon", "lots"), "--epsilon must be a number such as 0.5"),
        (("--rho", "0.1", "--epsilon", "1"), "give either --rho or --epsilon"),
    ],
)
def test_bad_grants_exit_with_code_2_and_one_line(
    ledger_url: str, args: tuple[str, ...], message: str
) -> None:
    code, _, err = invoke(
        "budget", "grant", "--ledger", ledger_url, "-a", "x", "--dataset", "d", *args
    )
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_a_malformed_ledger_url_is_a_user_error() -> None:
    code, _, err = invoke("budget", "show", "--ledger", "bogus://nowhere")
    assert code == 2
    assert "unsupported ledger database 'bogus'" in err


def test_a_zcdp_grant_is_shown_in_rho(ledger_url: str) -> None:
    code, out, _ = invoke(
        "budget", "grant", "--ledger", ledger_url, "-a", "z", "--dataset", "d", "--rho", "0.5"
    )
    assert code == 0
    assert "ρ=0.5" in out


def test_export_dumps_the_whole_ledger_for_an_audit(ledger_url: str) -> None:
    with veil.Ledger(ledger_url) as ledger:
        ledger.grant("alice", "people", veil.Budget(epsilon=1))
        ledger.reserve("alice", "people", veil.Budget(epsilon=0.25), fingerprint="abc").commit()
    code, out, _ = invoke("budget", "export", "--ledger", ledger_url)
    assert code == 0
    dump = json.loads(out)
    assert [b["analyst"] for b in dump["budgets"]] == ["alice"]
    assert [e["event"] for e in dump["events"]][:2] == ["grant", "charge"]
    code, out, _ = invoke("budget", "export", "--ledger", ledger_url, "-f", "csv")
    assert code == 0
    assert out.splitlines()[0].startswith("id,at,analyst,dataset,event")
    code, _, err = invoke("budget", "export", "--ledger", ledger_url, "-f", "table")
    assert code == 2
    assert "export writes json or csv" in err
