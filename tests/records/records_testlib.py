"""Shared hypothesis strategies and helpers for the tierlog.records tests."""

from __future__ import annotations

import random
import struct

from crc32c import crc32c
from hypothesis import strategies as st

from tierlog.records import RECORD_BATCH_OVERHEAD, CompressionType

HEADER = struct.Struct(">qiibIhiqqqhii")
ALL_CODECS = list(CompressionType)


def payload(size: int, seed: int, compressible: bool) -> bytes:
    rnd = random.Random(seed)
    if compressible:
        words = [rnd.randbytes(rnd.randint(1, 8)) for _ in range(16)]
        out = bytearray()
        while len(out) < size:
            out += rnd.choice(words)
        return bytes(out[:size])
    return rnd.randbytes(size)


# None, empty, small arbitrary, and occasionally large (up to 200 KB, random or compressible).
blobs = st.one_of(
    st.none(),
    st.just(b""),
    st.binary(max_size=40),
    st.builds(payload, st.integers(1000, 200_000), st.integers(0, 2**32), st.booleans()),
)
small_blobs = st.one_of(st.none(), st.just(b""), st.binary(max_size=16))
headers = st.lists(st.tuples(st.text(max_size=12), small_blobs), max_size=4)
timestamps = st.one_of(st.none(), st.integers(0, 2**45))
record_tuples = st.tuples(blobs, blobs, headers, timestamps)
record_lists = st.lists(record_tuples, min_size=1, max_size=12)
# Same, but every timestamp given: the encoded size does not depend on the clock, so a test may draw
# positions inside the batch without making hypothesis' data generation flaky.
stable_record_lists = st.lists(st.tuples(blobs, blobs, headers, st.integers(0, 2**45)), min_size=1, max_size=12)


def raw_batch(body: bytes, count: int, *, attributes: int = 0, last_offset_delta: int | None = None,
              base_offset: int = 0, producer_id: int = -1, base_sequence: int = -1,
              magic: int = 2) -> bytearray:
    """A batch around an arbitrary records ``body`` with a correct CRC, for crafting bad batches."""
    if last_offset_delta is None:
        last_offset_delta = count - 1
    buf = bytearray(HEADER.pack(base_offset, RECORD_BATCH_OVERHEAD - 12 + len(body), -1, magic, 0, attributes,
                                last_offset_delta, 1000, 1000, producer_id, 0, base_sequence, count))
    buf += body
    fix_crc(buf)
    return buf


def fix_crc(buf: bytearray, pos: int = 0) -> None:
    length = struct.unpack_from(">i", buf, pos + 8)[0]
    struct.pack_into(">I", buf, pos + 17, crc32c(bytes(buf[pos + 21:pos + 12 + length])))


def set_field(buf: bytearray, fmt: str, offset: int, value: int, pos: int = 0) -> None:
    """Overwrite one header field and fix the CRC, as a misbehaving but CRC-correct producer would."""
    struct.pack_into(fmt, buf, pos + offset, value)
    fix_crc(buf, pos)
