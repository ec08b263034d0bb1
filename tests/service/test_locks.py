"""Authenticating a request is a read: it never waits for a writer holding the ledger's lock."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from veil.service.principals import Principals


def test_authentication_does_not_wait_for_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    principals = Principals(f"sqlite:///{path}")
    key = principals.add("alice")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")  # another worker mid-charge, holding the write lock
    found: list[object] = []
    reader = threading.Thread(target=lambda: found.append(principals.authenticate(key)))
    reader.start()
    reader.join(timeout=10)  # a locking read would wait the 60 s busy timeout
    alive = reader.is_alive()
    writer.execute("ROLLBACK")
    writer.close()
    reader.join()
    principals.close()
    assert not alive
    (who,) = found
    assert getattr(who, "name", None) == "alice"
