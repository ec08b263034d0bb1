"""Helpers shared by the tests (importable as ``support`` thanks to pytest's pythonpath)."""

from __future__ import annotations

import hashlib

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms


class SeededSource:
    """A deterministic :class:`veil.random.RandomSource` for repeatable statistical tests.

    A ChaCha20 keystream keyed by SHA-256 of the seed: uniform bytes, fast, and the same on
    every run. It is passed explicitly to the function under test; veil never uses it itself.
    """

    def __init__(self, seed: int | str) -> None:
        key = hashlib.sha256(f"veil-test-seed:{seed}".encode()).digest()
        self._enc = Cipher(algorithms.ChaCha20(key, bytes(16)), mode=None).encryptor()
        self.bytes_drawn = 0

    def random_bytes(self, n: int) -> bytes:
        self.bytes_drawn += n
        return self._enc.update(bytes(n))
