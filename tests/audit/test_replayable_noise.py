"""Audit: noise the caller controls is refused where it could hurt, and marked everywhere else.

With a seeded source two charged queries draw the same noise; their difference (one with a
target's rows, one without) reveals the target exactly. So a caller-supplied source is refused
by anything charged to a persistent ledger, and a release drawn from one says it is not
private, in its printout and its JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import veil
from support import SeededSource
from veil.cli_output import OutputFormat, print_result
from veil.errors import InvalidArgumentError
from veil.release.result import NOT_PRIVATE, Result

TABLE = pa.table({"uid": [1, 2, 3, 4], "x": [1.0, 2.0, 3.0, 4.0]})


def file_ledger(tmp_path: Path) -> veil.Ledger:
    ledger = veil.Ledger(f"sqlite:///{tmp_path / 'ledger.db'}")
    ledger.grant("alice", "t", veil.Budget(epsilon=10))
    return ledger


def test_a_seeded_source_is_refused_by_a_session_on_a_persistent_ledger(tmp_path: Path) -> None:
    ledger = file_ledger(tmp_path)
    with pytest.raises(InvalidArgumentError, match="caller-supplied random source"):
        veil.Session.local(
            {"t": TABLE}, ledger=ledger, analyst="alice", dataset="t", source=SeededSource(1)
        )
    s = veil.Session.local({"t": TABLE}, ledger=ledger, analyst="alice", dataset="t")
    with pytest.raises(InvalidArgumentError, match="cannot be charged to the persistent ledger"):
        s.sql("SELECT COUNT(*) FROM t", epsilon=1, source=SeededSource(1))
    assert s.remaining() == veil.Budget(epsilon=10)


def test_a_seeded_source_is_refused_by_perturb_on_a_persistent_ledger(tmp_path: Path) -> None:
    ledger = file_ledger(tmp_path)
    with pytest.raises(InvalidArgumentError, match="caller-supplied random source"):
        veil.perturb(
            TABLE,
            epsilon=1,
            bounds={"x": (0, 5)},
            ledger=ledger,
            analyst="alice",
            dataset="t",
            source=SeededSource(1),
        )
    assert ledger.remaining("alice", "t") == veil.Budget(epsilon=10)


def test_a_release_from_a_seeded_source_says_it_is_not_private(
    capsys: pytest.CaptureFixture[str],
) -> None:
    s = veil.Session.local({"t": TABLE}, budget=veil.Budget(epsilon=10), source=SeededSource(1))
    r = s.sql("SELECT COUNT(*) AS n FROM t", epsilon=1)
    assert not r.private
    assert NOT_PRIVATE in str(r)
    assert r.to_json()["private"] is False
    assert not Result.from_json(r.to_json()).private
    print_result(r, OutputFormat.json)
    assert json.loads(capsys.readouterr().out)["private"] is False
    print_result(r, OutputFormat.table)
    assert "NOT PRIVATE" in capsys.readouterr().out


def test_a_release_from_the_system_source_is_private(tmp_path: Path) -> None:
    s = veil.Session.local({"t": TABLE}, ledger=file_ledger(tmp_path), analyst="alice", dataset="t")
    r = s.sql("SELECT COUNT(*) AS n FROM t", epsilon=1)
    assert r.private
    assert NOT_PRIVATE not in str(r)
    p = veil.perturb(TABLE, epsilon=1, bounds={"x": (0, 5)})
    assert p.private
    assert not veil.perturb(TABLE, epsilon=1, bounds={"x": (0, 5)}, source=SeededSource(2)).private


def test_a_mechanism_release_from_a_seeded_source_is_marked() -> None:
    from veil import mechanisms

    assert mechanisms.laplace(3.0, sensitivity=1, epsilon=1).private
    assert not mechanisms.laplace(3.0, sensitivity=1, epsilon=1, source=SeededSource(3)).private


def test_a_perturbation_from_a_seeded_source_says_not_private_in_its_printout_and_json() -> None:
    """A perturbation carried ``private=False`` but printed as any other and had no JSON form:
    its repr, its printout and its JSON say what a Result's do."""
    seeded = veil.perturb(
        TABLE,
        epsilon=1,
        bounds={"x": (0, 5)},
        categories={"uid": [1, 2, 3, 4]},
        source=SeededSource(2),
    )
    assert NOT_PRIVATE in repr(seeded)
    assert NOT_PRIVATE in str(seeded)
    assert "x: Laplace noise, ε=0.5, values clamped to [0, 5]" in str(seeded)
    assert "uid: randomized response over 4 categories, ε=0.5" in str(seeded)
    payload = json.loads(json.dumps(seeded.to_json()))
    assert payload["private"] is False
    assert payload["rows"] == 4
    assert payload["loss"] == veil.Budget(epsilon=1).to_dict()
    assert payload["columns"][0] == {
        "column": "x",
        "mechanism": "laplace",
        "epsilon": "1/2",
        "lower": "0",
        "upper": "5",
        "categories": [],
    }
    system = veil.perturb(TABLE, epsilon=1, bounds={"x": (0, 5)})
    assert NOT_PRIVATE not in repr(system)
    assert NOT_PRIVATE not in str(system)
    assert system.to_json()["private"] is True
