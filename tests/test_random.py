from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

import veil.random as vr
from support import SeededSource
from veil.errors import InternalError, InvalidArgumentError, RandomnessError

SRC = Path(vr.__file__).resolve().parent
FORBIDDEN_MODULES = {"random", "secrets", "numpy.random"}


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if mod in FORBIDDEN_MODULES or mod.startswith("numpy.random"):
                found.append(mod)
            if mod == "numpy":
                found += ["numpy.random" for a in node.names if a.name == "random"]
            if mod == "os":
                found += ["os.urandom" for a in node.names if a.name == "urandom"]
        elif isinstance(node, ast.Attribute):
            # np.random.<anything>, os.urandom, os.getrandom
            if (
                node.attr == "random"
                and isinstance(node.value, ast.Name)
                and node.value.id
                in {
                    "np",
                    "numpy",
                }
            ):
                found.append("numpy.random")
            if node.attr in {"urandom", "getrandom"} and isinstance(node.value, ast.Name):
                found.append(f"{node.value.id}.{node.attr}")
    return found


def test_no_module_but_veil_random_reads_randomness() -> None:
    offenders = {}
    for path in SRC.rglob("*.py"):
        if path.resolve() == Path(vr.__file__).resolve():
            continue
        bad = _violations(path)
        if bad:
            offenders[str(path.relative_to(SRC))] = bad
    assert offenders == {}


def test_the_scanner_catches_forbidden_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import random\nimport numpy as np\nfrom os import urandom\n"
        "import os\nx = np.random.default_rng()\ny = os.urandom(3)\n"
    )
    assert set(_violations(probe)) == {"random", "numpy.random", "os.urandom"}


@pytest.mark.parametrize("n", [0, 1, 31, 4096, 4097, 1 << 20])
def test_system_source_returns_exactly_n_bytes(n: int) -> None:
    assert len(vr.system_source().random_bytes(n)) == n


def test_system_source_bulk_streams_differ_between_calls() -> None:
    a = vr.system_source().random_bytes(1 << 16)
    b = vr.system_source().random_bytes(1 << 16)
    assert a != b


def test_system_source_bytes_look_uniform() -> None:
    data = vr.system_source().random_bytes(1 << 20)
    counts = [0] * 256
    for byte in data:
        counts[byte] += 1
    expected = len(data) / 256
    chi2 = sum((c - expected) ** 2 / expected for c in counts)
    # 255 degrees of freedom: P(chi2 > 375) < 1e-6 for a uniform source.
    assert chi2 < 375


def test_system_source_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(n: int) -> bytes:
        raise OSError("entropy pool unavailable")

    monkeypatch.setattr(os, "urandom", broken)
    with pytest.raises(RandomnessError, match="entropy pool unavailable"):
        vr.system_source().random_bytes(10)
    with pytest.raises(RandomnessError, match="refuses to continue"):
        vr.system_source().random_bytes(1 << 16)


def test_bulk_stream_serves_a_mebibyte_whatever_the_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    # all-ones seed bytes: read as a 16-byte nonce, they put the block counter at 2^32 - 1, one
    # block before it wraps (the ~4-in-a-million failure); the counter now starts at 0
    monkeypatch.setattr(os, "urandom", lambda n: b"\xff" * n)
    data = vr.system_source().random_bytes(1 << 20)
    nonce = bytes(4) + b"\xff" * 12
    cipher = Cipher(algorithms.ChaCha20(b"\xff" * 32, nonce), mode=None)
    assert data == cipher.encryptor().update(bytes(1 << 20))


@pytest.mark.parametrize("start", [2**32 - 1, 2**32 - 2])
def test_a_chacha20_counter_serves_the_blocks_up_to_its_wrap(start: int) -> None:
    # the library's counter semantics that STREAM_LIMIT rests on: from counter c, exactly
    # (2^32 - c) blocks of 64 bytes; from 0, STREAM_LIMIT bytes
    nonce = start.to_bytes(4, "little") + bytes(12)
    fits = (2**32 - start) * 64
    Cipher(algorithms.ChaCha20(bytes(32), nonce), mode=None).encryptor().update(bytes(fits))
    with pytest.raises(ValueError, match="overflow"):
        Cipher(algorithms.ChaCha20(bytes(32), nonce), mode=None).encryptor().update(bytes(fits + 1))
    assert vr.STREAM_LIMIT == 2**32 * 64


def test_a_stream_longer_than_one_key_serves_is_refused_as_a_bug() -> None:
    with pytest.raises(InternalError, match="this is a bug"):
        vr._chacha20_stream(bytes(44), vr.STREAM_LIMIT + 1)
    assert vr._chacha20_stream(bytes(44), 0) == b""


@pytest.mark.parametrize(
    ("n", "limit", "expected"),
    [(10, 4, [4, 4, 2]), (8, 4, [4, 4]), (3, 4, [3]), (4, 4, [4]), (2**40, 2**38, [2**38] * 4)],
)
def test_long_requests_are_split_into_segments_of_one_key_each(
    n: int, limit: int, expected: list[int]
) -> None:
    assert vr._segments(n, limit) == expected
    assert vr._segments(1 << 20) == [1 << 20]  # everything a query draws: one key


def test_system_source_rejects_a_short_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "urandom", lambda n: b"\x00" * (n - 1))
    with pytest.raises(RandomnessError, match="instead of"):
        vr.system_source().random_bytes(8)


@pytest.mark.system
def test_system_source_streams_differ_across_fork() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.write(write, vr.system_source().random_bytes(1 << 13)[:64])
        os._exit(0)
    os.close(write)
    parent = vr.system_source().random_bytes(1 << 13)[:64]
    child = os.read(read, 64)
    os.waitpid(pid, 0)
    assert child != parent


class _Counting(vr.SystemSource):
    """The system source, counting its calls (a subclass: private, and read ahead)."""

    def __init__(self) -> None:
        self.calls = 0

    def random_bytes(self, n: int) -> bytes:
        self.calls += 1
        return super().random_bytes(n)


class _Short:
    """A source that returns one byte fewer than asked."""

    def random_bytes(self, n: int) -> bytes:
        return bytes(max(n - 1, 0))


def test_read_ahead_serves_the_sources_bytes_once_each_in_order() -> None:
    """Whatever the requests' sizes — inside a chunk, across a chunk's end, longer than a
    chunk — their bytes, end to end, are the source's stream from its start, none skipped or
    repeated; the source is asked for no more than one chunk beyond them."""
    sizes = [0, 1, 3, 17, 4, 4_071, 4_096, 4_097, 1, 9_000, 5, 12_000, 2, 4_095, 1, 0, 8]
    wrapped = SeededSource("read ahead")
    reader = vr.ReadAhead(wrapped)
    served = [reader.random_bytes(n) for n in sizes]
    assert [len(b) for b in served] == sizes
    total = sum(sizes)
    assert b"".join(served) == SeededSource("read ahead").random_bytes(total)
    assert total <= wrapped.bytes_drawn < total + vr.READ_AHEAD


def test_read_ahead_asks_the_source_a_chunk_at_a_time() -> None:
    source = _Counting()
    reader = vr.read_ahead(source)
    assert isinstance(reader, vr.ReadAhead)
    words = [reader.random_bytes(17) for _ in range(1_000)]
    assert source.calls == -(-17_000 // vr.READ_AHEAD)  # 5 calls for 1,000 draws
    assert len(set(words)) == 1_000


def test_read_ahead_wraps_the_system_source_only() -> None:
    """A replayable source is left as it is: dropping its unused tail would move its later
    draws (and the tests that replay them)."""
    seeded = SeededSource("as it is")
    assert vr.read_ahead(seeded) is seeded
    assert isinstance(vr.read_ahead(vr.system_source()), vr.ReadAhead)


def test_read_ahead_fails_closed() -> None:
    with pytest.raises(RandomnessError, match="4095 bytes instead of 4096"):
        vr.ReadAhead(_Short()).random_bytes(8)  # a chunk
    with pytest.raises(RandomnessError, match="9999 bytes instead of 10000"):
        vr.ReadAhead(_Short()).random_bytes(10_000)  # past a chunk: straight from the source
    with pytest.raises(InvalidArgumentError, match="negative"):
        vr.ReadAhead(vr.system_source()).random_bytes(-1)
