"""The CLI's default δ and the advice when a budget runs out (issue 9, the audit's gaps): a
query without ``--delta`` spends the grant's δ in proportion to its ε, as in Python, and a
refusal names the flags that fix it."""

from __future__ import annotations

import json
from pathlib import Path

import veil
from cli_support import invoke


def test_the_default_delta_is_the_grant_s_share_and_running_out_names_the_flags(
    people: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with veil.Ledger(url) as ledger:
        ledger.grant("cli", "t", veil.Budget(epsilon=4, delta=1e-6))
    grouped = ("SELECT state, COUNT(*) AS n FROM t GROUP BY state", "-t", f"t={people}")
    for _ in range(2):  # ε = 1 of 4 without --delta: a quarter of the grant's δ each
        code, _, err = invoke("query", *grouped, "-e", "1", "-u", "uid", "--ledger", url,
                              "--format", "json")  # fmt: skip
        assert code == 0, err
        grouped = ("SELECT state, COUNT(*) AS n FROM t WHERE uid > 0 GROUP BY state", *grouped[1:])
    _, out, _ = invoke("budget", "show", "--ledger", url, "--format", "json")
    (row,) = json.loads(out)["budgets"]
    assert row["remaining"]["exact"] == {"epsilon": "2", "delta": "1/2000000"}
    code, _, err = invoke(  # asks all that is left of δ and more
        "query", *grouped[:1], "-t", f"t={people}", "-e", "1", "-d", "1e-6", "-u", "uid",
        "--ledger", url,
    )  # fmt: skip
    assert code == 2
    assert "δ ran out" in err
    assert "list the keys (WHERE col IN ('a', 'b'))" in err
    assert "ask for a smaller --delta" in err
    assert "veil budget grant" in err
    assert "smaller delta" not in err
    code, _, err = invoke("query", "SELECT COUNT(*) AS n FROM t", "-t", f"t={people}", "-e", "3",
                          "-u", "uid", "--ledger", url)  # fmt: skip
    assert code == 2
    assert "ask a cheaper query (a smaller --epsilon)" in err
    assert "(smaller epsilon)" not in err
