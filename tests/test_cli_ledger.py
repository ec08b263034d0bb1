"""``veil ledger init|check|abandon`` and ``veil serve`` on a ledger that does not exist (issue
34: a ledger is never made behind an operator's back, nor trusted blindly)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import veil
from cli_support import invoke


def test_init_makes_a_ledger_of_nothing_or_an_empty_file_and_leaves_one_alone(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    code, out, _ = invoke("ledger", "init", "--ledger", url, "-f", "json")
    assert code == 0
    assert json.loads(out) == {"ledger": url, "created": True}
    with veil.Ledger(url, create=False) as ledger:
        ledger.grant("alice", "people", veil.Budget(epsilon=1))
    code, out, _ = invoke("ledger", "init", "--ledger", url)
    assert code == 0
    assert "a veil ledger already; unchanged" in out
    with veil.Ledger(url, create=False) as ledger:
        assert ledger.remaining("alice", "people") == veil.Budget(epsilon=1)
    empty = tmp_path / "restored.db"
    empty.touch()
    code, _, err = invoke("budget", "show", "--ledger", f"sqlite:///{empty}")
    assert code == 2
    assert "is empty (0 bytes)" in err
    assert "veil ledger init --ledger URL" in err
    code, out, _ = invoke("ledger", "init", "--ledger", f"sqlite:///{empty}")
    assert code == 0
    assert "made a new, empty ledger" in out


def test_init_refuses_another_applications_database(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE orders (id INTEGER)")
    db.close()
    code, _, err = invoke("ledger", "init", "--ledger", f"sqlite:///{path}")
    assert code == 2
    assert "not a veil ledger: it holds the tables orders and none of veil's" in err


def test_check_finds_a_rewritten_sum_and_lists_open_reservations(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with veil.Ledger(url) as ledger:
        ledger.grant("alice", "people", veil.Budget(epsilon=1))
        ledger.reserve("alice", "people", veil.Budget(epsilon="1/2"), fingerprint="q").commit()
        still = ledger.reserve("alice", "people", veil.Budget(epsilon="1/4"), fingerprint="r")
    code, out, _ = invoke("ledger", "check", "--ledger", url)
    assert code == 0
    assert "match their charges" in out
    assert f"#{still.id} alice on people" in out
    db = sqlite3.connect(tmp_path / "ledger.db")
    with db:
        db.execute("UPDATE veil_budgets SET spent_epsilon = '1/4'")
    db.close()
    code, out, _ = invoke("ledger", "check", "--ledger", url, "-f", "json")
    assert code == 1
    payload = json.loads(out)
    assert payload["mismatches"] == [
        "the grant of 'alice' on 'people': its charges sum to ε=3/4, δ=0, ρ=0, its running "
        "sums say ε=1/4, δ=0, ρ=0"
    ]
    assert [r["id"] for r in payload["reserved"]] == [still.id]


def test_abandon_resolves_open_reservations_older_than_asked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with veil.Ledger(url) as ledger:
        ledger.grant("alice", "people", veil.Budget(epsilon=1))
        stale = ledger.reserve("alice", "people", veil.Budget(epsilon="1/4"), fingerprint="r")
    code, out, _ = invoke("ledger", "abandon", "--ledger", url, "--older-than", "3600")
    assert (code, out.strip()) == (0, "0 reservation(s) resolved as abandoned")
    code, out, _ = invoke("ledger", "abandon", "--ledger", url, "--older-than", "0.000001")
    assert code == 0
    assert out.strip() == f"1 reservation(s) resolved as abandoned: #{stale.id}"
    with veil.Ledger(url) as ledger:
        found = ledger.charge(stale.id)
        assert found is not None
        assert found.status == "abandoned"
        assert ledger.remaining("alice", "people") == veil.Budget(epsilon="3/4")


def test_serve_refuses_a_ledger_that_does_not_exist_unless_told_to_make_one(
    tmp_path: Path,
) -> None:
    config = tmp_path / "veil.toml"
    config.write_text('ledger = "sqlite:///typo.db"\n', encoding="utf-8")
    code, _, err = invoke("serve", "--config", str(config), "--port", "1")
    assert code == 2
    assert "does not exist yet; create it with veil ledger init --config" in err
    assert not (tmp_path / "typo.db").exists()
    code, _, _ = invoke("ledger", "init", "--config", str(config))
    assert code == 0
    assert (tmp_path / "typo.db").exists()
