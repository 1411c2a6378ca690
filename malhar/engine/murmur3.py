"""Spark's Murmur3 hash of an int, so malhar can place a row on an exact Spark partition.

``df.repartition(n, col)`` sends a row to ``pmod(murmur3(col, seed=42), n)``.
For every target partition we precompute one int key that hashes there.
"""

from __future__ import annotations

_C1, _C2, _M = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M


def hash_int(value: int, seed: int = 42) -> int:
    """``org.apache.spark.unsafe.hash.Murmur3_x86_32.hashInt`` (a signed 32-bit result)."""
    k1 = (value & _M) * _C1 & _M
    k1 = _rotl(k1, 15) * _C2 & _M
    h1 = (seed & _M) ^ k1
    h1 = (_rotl(h1, 13) * 5 + 0xE6546B64) & _M
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _M
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _M
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def partition_keys(n: int) -> list[int]:
    """``keys[p]`` is an int that ``repartition(n, col)`` sends to Spark partition ``p``."""
    keys: list[int | None] = [None] * n
    found, candidate = 0, 0
    while found < n:
        p = hash_int(candidate) % n
        if keys[p] is None:
            keys[p] = candidate
            found += 1
        candidate += 1
    return keys  # type: ignore[return-value]
