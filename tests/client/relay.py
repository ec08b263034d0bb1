"""A TCP relay on 127.0.0.1 in front of a real server, that loses connections the way networks
do (import as ``client.relay``).

- ``"relay"``: bytes pass both ways;
- ``"drop_answer"``: the request passes to the server, and the client's connection is closed
  when the server's answer begins — the server received the request and acted on it, the
  client gets no answer;
- ``"drop_first"``: the first connection is closed at once, unanswered (the request never
  reaches the server); later ones are relayed.

``listen_after``: the port is bound at once but listens only after that many seconds, so a
connection before then is refused (nothing was sent). ``connections`` counts the connections
accepted.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from typing import Literal

__all__ = ["Relay", "wait_until"]

Mode = Literal["relay", "drop_answer", "drop_first"]


class Relay:
    def __init__(self, upstream: str, mode: Mode = "relay", *, listen_after: float = 0.0) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self._upstream = (host, int(port))
        self.mode = mode
        self.connections = 0
        self._listen_after = listen_after
        self._stopped = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stopped.set()
        self._thread.join(5)
        self._sock.close()

    def _serve(self) -> None:
        if self._stopped.wait(self._listen_after):
            return
        self._sock.listen(16)
        while not self._stopped.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            first = self.connections == 0
            self.connections += 1
            if self.mode == "drop_first" and first:
                conn.close()
                continue
            threading.Thread(target=self._pipe, args=(conn,), daemon=True).start()

    def _pipe(self, conn: socket.socket) -> None:
        up = socket.create_connection(self._upstream, timeout=30)
        conn.settimeout(30)
        threading.Thread(target=_copy, args=(conn, up), daemon=True).start()
        try:
            while data := up.recv(65536):
                if self.mode == "drop_answer":
                    break  # the answer has begun: the server is done with the request
                conn.sendall(data)
        except OSError:
            pass
        finally:
            for s in (conn, up):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()


def _copy(src: socket.socket, dst: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := src.recv(65536):
            dst.sendall(data)
        dst.shutdown(socket.SHUT_WR)


def wait_until(check: Callable[[], bool], within_s: float = 10.0) -> None:
    """Poll ``check()`` until it is true (a condition on another process)."""
    deadline = time.monotonic() + within_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not true within {within_s} s: {check}")
        time.sleep(0.05)
