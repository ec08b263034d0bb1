"""The only place veil reads randomness.

Every random bit veil uses comes from :func:`system_source`, the operating system's CSPRNG,
or from a :class:`RandomSource` that a caller passes *explicitly* (tests pass a seeded one).
There is no global switch and no user-settable seed: a caller-supplied source is refused by
everything charged to a persistent ledger, and whatever is drawn from one is marked as not
private (:func:`is_private`).

Contract of :class:`SystemSource`:

- Requests of up to ``_DIRECT_LIMIT`` bytes are served by ``os.urandom`` (``getrandom(2)`` on
  Linux).
- Larger requests are served by a ChaCha20 keystream (RFC 8439) under a fresh 256-bit key and
  96-bit nonce read from ``os.urandom`` *for that request alone*, its 32-bit block counter
  starting at 0: one key and nonce give ``STREAM_LIMIT`` bytes (2^32 blocks of 64) before the
  counter would wrap, and a request longer than that is served in segments of at most
  ``STREAM_LIMIT`` bytes, each under its own fresh key and nonce. So no request of any size
  fails for the counter (a random starting counter made a 1 MiB request fail about 4 times in
  a million). The generator keeps no state between calls, so it is safe across threads and
  across ``fork`` (a Spark executor's forked workers never share a stream). ChaCha20 is a
  PRF; its keystream is computationally indistinguishable from uniform bytes, like the
  kernel's own CSPRNG which is built the same way.
- It fails closed: if the operating system cannot provide randomness, or returns a short
  read, :class:`veil.errors.RandomnessError` is raised and nothing is sampled.

:func:`read_ahead` wraps the system source for one loop of many small draws (a quantile or a
mode per group): it asks it for ``READ_AHEAD`` bytes at a time and serves the draws from them
in order, so thousands of draws cost a few system calls instead of one each. The wrapper lives
for that loop alone, on one thread; the bytes it did not use are dropped with it, never served
twice. A replayable source is never wrapped (its later draws would move by what was dropped).
"""

from __future__ import annotations

import base64
import os
from typing import Protocol, runtime_checkable

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from veil.errors import InternalError, InvalidArgumentError, RandomnessError

__all__ = [
    "READ_AHEAD",
    "STREAM_LIMIT",
    "RandomSource",
    "ReadAhead",
    "SystemSource",
    "is_private",
    "read_ahead",
    "refuse_replayable",
    "system_source",
    "token",
    "token_hex",
]

_DIRECT_LIMIT = 4096
_KEY_BYTES = 32
_NONCE_BYTES = 12  # RFC 8439's nonce; the 4 bytes before it are the block counter
_SEED_BYTES = _KEY_BYTES + _NONCE_BYTES
_BLOCK_BYTES = 64
STREAM_LIMIT = 2**32 * _BLOCK_BYTES
"""The most bytes one ChaCha20 key and nonce serve, the block counter running from 0 to
2^32 − 1 (256 GiB); longer requests take one fresh key and nonce per segment."""


@runtime_checkable
class RandomSource(Protocol):
    """A source of uniformly random bytes.

    A session may ask for them from another thread than the caller's — the noise of a query
    whose keys are all public is drawn on veil's worker thread while the engine reads
    (``veil.release.draw.draw_early``) — but never from two threads at once, and in the same
    order as on one thread."""

    def random_bytes(self, n: int) -> bytes:
        """Return exactly ``n`` independent, uniformly random bytes."""
        ...


def _urandom(n: int) -> bytes:
    try:
        data = os.urandom(n)
    except (OSError, NotImplementedError) as exc:
        raise RandomnessError(
            f"the operating system's random number generator failed ({exc}); "
            "veil refuses to continue without it"
        ) from exc
    if len(data) != n:
        raise RandomnessError(f"os.urandom returned {len(data)} bytes instead of {n}")
    return data


def token(nbytes: int = 32) -> str:
    """A secret of ``nbytes`` random bytes from the operating system, as URL-safe text (an API
    key, a job id): what ``secrets.token_urlsafe`` gives, read here like every other random
    byte veil uses."""
    return base64.urlsafe_b64encode(_urandom(nbytes)).rstrip(b"=").decode("ascii")


def token_hex(nbytes: int = 16) -> str:
    """:func:`token` as ``2·nbytes`` hexadecimal digits."""
    return _urandom(nbytes).hex()


def _segments(n: int, limit: int = STREAM_LIMIT) -> list[int]:
    """The lengths of the keystream segments that serve a request of ``n`` bytes: as few as
    possible, each at most ``limit`` bytes, summing to ``n``."""
    full, rest = divmod(n, limit)
    return [limit] * full + ([rest] if rest else [])


def _chacha20_stream(seed: bytes, n: int) -> bytes:
    """``n`` bytes of the ChaCha20 keystream under key ``seed[:32]`` and nonce ``seed[32:44]``,
    the block counter starting at 0.

    Contract: ``seed`` is ``_SEED_BYTES`` bytes fresh from the OS CSPRNG, used for this stream
    alone; ``0 <= n <= STREAM_LIMIT``, so the counter never wraps (a longer request is
    refused as a bug of the caller, who splits it with :func:`_segments`). The keystream is
    RFC 8439's: computationally indistinguishable from uniform for a secret key."""
    if len(seed) != _SEED_BYTES:
        raise RandomnessError(f"a ChaCha20 seed is {_SEED_BYTES} bytes, not {len(seed)}")
    if not 0 <= n <= STREAM_LIMIT:
        raise InternalError(
            f"a ChaCha20 stream serves 0 to {STREAM_LIMIT} bytes, not {n} (this is a bug)"
        )
    counter = bytes(4)  # little-endian block counter 0, then the 96-bit nonce
    nonce = counter + seed[_KEY_BYTES:]
    cipher = Cipher(algorithms.ChaCha20(seed[:_KEY_BYTES], nonce), mode=None)
    stream = cipher.encryptor().update(bytes(n))
    if len(stream) != n:
        raise RandomnessError(f"the ChaCha20 stream returned {len(stream)} bytes, not {n}")
    return stream


class SystemSource:
    """The operating system's CSPRNG, with a per-request ChaCha20 stream for bulk requests."""

    def random_bytes(self, n: int) -> bytes:
        if n < 0:
            raise InvalidArgumentError(f"cannot draw a negative number of bytes ({n})")
        if n <= _DIRECT_LIMIT:
            return _urandom(n)
        return b"".join(_chacha20_stream(_urandom(_SEED_BYTES), size) for size in _segments(n))

    def __repr__(self) -> str:
        return "SystemSource()"


_SYSTEM = SystemSource()

READ_AHEAD = 4096
"""The bytes :class:`ReadAhead` asks its source for at a time (one ``os.urandom`` call)."""


class ReadAhead:
    """``source`` read ahead: its bytes fetched ``READ_AHEAD`` at a time and served in order.

    Contract: the bytes returned by successive calls, concatenated, are a prefix of the
    concatenation of what the source returned — every byte served once, in the source's
    order, none skipped or repeated. A request longer than what is buffered plus a chunk takes
    the rest straight from the source. What is still buffered when the reader is dropped is
    never used. Not for sharing between threads (a loop's reader is its own), and for the
    system source only (:func:`read_ahead`)."""

    __slots__ = ("_at", "_buffer", "_source")

    def __init__(self, source: RandomSource) -> None:
        self._source = source
        self._buffer = b""
        self._at = 0

    def random_bytes(self, n: int) -> bytes:
        if n < 0:
            raise InvalidArgumentError(f"cannot draw a negative number of bytes ({n})")
        at, buffer = self._at, self._buffer
        end = at + n
        if end <= len(buffer):
            self._at = end
            return buffer[at:end]
        head = buffer[at:]
        need = n - len(head)
        if need >= READ_AHEAD:
            self._buffer, self._at = b"", 0
            tail = self._source.random_bytes(need)
            if len(tail) != need:
                raise RandomnessError(f"the source returned {len(tail)} bytes instead of {need}")
            return head + tail
        chunk = self._source.random_bytes(READ_AHEAD)
        if len(chunk) != READ_AHEAD:
            raise RandomnessError(f"the source returned {len(chunk)} bytes instead of {READ_AHEAD}")
        self._buffer, self._at = chunk, need
        return head + chunk[:need]

    def __repr__(self) -> str:
        return f"ReadAhead({self._source!r})"


def read_ahead(source: RandomSource) -> RandomSource:
    """``source`` read ahead (:class:`ReadAhead`) for one loop of many small draws if it is
    the system source, whose dropped bytes are nothing lost; any other source as it is, so a
    seeded source's later draws stay where they were."""
    return ReadAhead(source) if isinstance(source, SystemSource) else source


def system_source() -> RandomSource:
    """The default source: the operating system's CSPRNG (see the module contract)."""
    return _SYSTEM


def is_private(source: RandomSource | None) -> bool:
    """Whether noise drawn from ``source`` is private: only the system CSPRNG (``None`` means
    it). Any other source — a seeded one for tests — can be replayed, so two releases drawn
    from it with the same seed cancel: such releases are marked as not private, and a session
    or perturbation charged to a persistent ledger refuses them."""
    return source is None or isinstance(source, SystemSource)


def refuse_replayable(source: RandomSource | None, *, persistent: bool, ledger: str) -> None:
    """Refuse a caller-supplied ``source`` for a charge kept in a persistent ledger (named
    ``ledger`` in the message): two charged releases drawn from the same seed cancel, and their
    difference reveals a person exactly. In-memory ledgers (tests) may use one."""
    if not is_private(source) and persistent:
        raise InvalidArgumentError(
            f"source={source!r} is a caller-supplied random source, which would make the noise "
            f"replayable, so it cannot be charged to the persistent ledger {ledger}; drop "
            "source= (veil draws from the operating system's CSPRNG), or test on an in-memory "
            "ledger"
        )
