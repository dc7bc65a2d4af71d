"""Kafka's murmur2 hash, bit for bit as the Java client computes it.

Two things depend on it matching Java exactly: the producer's default partitioner (the same key
must land on the same partition whichever client wrote it) and the topic-based remote log metadata
manager's choice of metadata partition.
"""

from __future__ import annotations

import struct

_M32 = 0xFFFFFFFF
_SEED = 0x9747B28C
_M = 0x5BD1E995


def to_int32(x: int) -> int:
    """Wrap an integer to a signed 32-bit value, as Java's int arithmetic does."""
    x &= _M32
    return x - (1 << 32) if x & 0x80000000 else x


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit hash (seed 0x9747b28c, little-endian blocks)."""
    data = bytes(data)
    n = len(data)
    h = (_SEED ^ n) & _M32
    end = n - n % 4
    for (k,) in struct.iter_unpack("<I", data[:end]):
        k = (k * _M) & _M32
        k ^= k >> 24
        k = (k * _M) & _M32
        h = ((h * _M) & _M32) ^ k
    tail = n - end
    if tail >= 3:
        h ^= data[end + 2] << 16
    if tail >= 2:
        h ^= data[end + 1] << 8
    if tail >= 1:
        h ^= data[end]
        h = (h * _M) & _M32
    h ^= h >> 13
    h = (h * _M) & _M32
    h ^= h >> 15
    return to_int32(h)


def to_positive(h: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, which overflows for MIN_VALUE)."""
    return h & 0x7FFFFFFF


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int: Kafka spreads partitions
    over replica fetchers with it."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return to_int32(h)

