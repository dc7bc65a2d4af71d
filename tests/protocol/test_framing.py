import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.harness.memory import rss_mib
from tierlog.protocol import framing
from tierlog.protocol.framing import (
    DEFAULT_MAX_FRAME_BYTES,
    LARGE_BODY_BYTES,
    FrameDecoder,
    FrameTooLargeError,
    InvalidFrameError,
    encode_frame,
    encode_frame_parts,
    size_prefix,
)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    chunks, start = [], 0
    for p in points + [len(data)]:
        chunks.append(data[start:p])
        start = p
    return chunks


def test_encode_frame_and_prefix():
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(memoryview(b"xy")) == b"\x00\x00\x00\x02xy"
    assert size_prefix(258) == b"\x00\x00\x01\x02"
    assert b"".join(encode_frame_parts([b"ab", memoryview(b"cde")])) == encode_frame(b"abcde")


def test_several_frames_in_one_chunk_and_partial_tail():
    dec = FrameDecoder()
    stream = encode_frame(b"one") + encode_frame(b"") + encode_frame(b"three") + encode_frame(b"four")[:6]
    assert dec.feed(stream) == [b"one", b"", b"three"]
    assert dec.pending_frame_size == 4
    assert dec.buffered == 2
    assert dec.feed(b"ur") == [b"four"]
    assert dec.buffered == 0 and dec.pending_frame_size is None
    assert dec.feed(b"") == []


def test_frames_are_read_only_bytes():
    (frame,) = FrameDecoder().feed(encode_frame(b"payload"))
    assert type(frame) is bytes


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
    kind=st.sampled_from(["bytes", "bytearray", "memoryview"]),
)
def test_random_chunking_reassembles_every_frame(payloads, cuts, kind):
    stream = b"".join(encode_frame(p) for p in payloads)
    dec = FrameDecoder(max_frame_bytes=1000)
    out = []
    for chunk in _split(stream, cuts):
        if kind == "bytearray":
            buf = bytearray(chunk)
            out += dec.feed(buf)
            buf[:] = b"\xee" * len(buf)  # the caller reuses its buffer: retained data must not change
        elif kind == "memoryview":
            out += dec.feed(memoryview(bytearray(chunk)))
        else:
            out += dec.feed(chunk)
    assert out == payloads
    assert dec.buffered == 0


@settings(max_examples=50, deadline=None)
@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=5), seed=st.integers(0, 2**32))
def test_byte_by_byte_and_random_chunks(sizes, seed):
    rnd = random.Random(seed)
    payloads = [rnd.randbytes(n) for n in sizes]
    stream = b"".join(encode_frame(p) for p in payloads)
    dec = FrameDecoder()
    out, pos = [], 0
    while pos < len(stream):
        n = rnd.choice([1, 2, 3, 5, 64, 1000])
        out += dec.feed(stream[pos:pos + n])
        pos += n
    assert out == payloads


def test_large_frames_in_64k_chunks():
    rnd = random.Random(7)
    payloads = [rnd.randbytes(1 << 20) for _ in range(3)]
    stream = b"".join(encode_frame(p) for p in payloads)
    dec = FrameDecoder()
    out = []
    for i in range(0, len(stream), 65536):
        out += dec.feed(stream[i:i + 65536])
    assert out == payloads


@settings(max_examples=300, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40),
    kind=st.sampled_from(["bytes", "bytearray"]),
)
def test_random_chunking_reassembles_large_bodies_written_in_place(payloads, cuts, kind):
    """The same reassembly with every body of 20 bytes and up taken as "large" (written into its result as it
    arrives)."""
    stream = b"".join(encode_frame(p) for p in payloads)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(framing, "LARGE_BODY_BYTES", 20)
        dec = FrameDecoder(max_frame_bytes=1000)
        out = []
        for chunk in _split(stream, cuts):
            buf = bytearray(chunk) if kind == "bytearray" else chunk
            out += dec.feed(buf)
            if kind == "bytearray":
                buf[:] = b"\xee" * len(buf)
    assert out == payloads
    assert all(type(f) is bytes for f in out)
    assert dec.buffered == 0


def test_large_frames_over_many_reads_come_back_whole():
    """Bodies above LARGE_BODY_BYTES in 256 KiB reads, one read ending exactly after a size prefix."""
    rnd = random.Random(11)
    payloads = [rnd.randbytes(LARGE_BODY_BYTES + 12345), b"small", rnd.randbytes(LARGE_BODY_BYTES)]
    stream = b"".join(encode_frame(p) for p in payloads)
    second = 4 + len(payloads[0])
    cuts = sorted({*range(0, len(stream), 262144), second + 4, second + 4 + 5 + 4})
    dec = FrameDecoder()
    out = []
    for a, b in zip(cuts, cuts[1:] + [len(stream)]):
        out += dec.feed(stream[a:b])
        if b == second + 4:
            assert dec.pending_frame_size == 5 and dec.buffered == 0
    assert [len(f) for f in out] == [len(p) for p in payloads]
    assert out == payloads
    assert all(type(f) is bytes for f in out)


def test_a_half_received_large_frame_holds_what_arrived_and_is_given_back_when_dropped():
    """A 100 MiB frame of which 40 MiB arrived holds about 40 MiB (not the announced size), and dropping the
    decoder (the connection closed) gives it back to the system at once."""
    dec = FrameDecoder()
    before = rss_mib()
    dec.feed(size_prefix(100 * 1024 * 1024))
    for i in range(160):
        dec.feed(bytes([i % 256]) * 262144)  # a new object per read, as the socket delivers them
    assert dec.buffered == 40 * 1024 * 1024
    held = rss_mib() - before
    assert 35 <= held <= 48, held
    del dec
    assert rss_mib() - before <= 8


def test_too_large_rejected_as_soon_as_size_is_known():
    dec = FrameDecoder(max_frame_bytes=100)
    assert dec.feed(encode_frame(b"x" * 100)) == [b"x" * 100]  # the limit itself is allowed
    assert dec.feed(b"\x00\x00") == []
    with pytest.raises(FrameTooLargeError) as info:
        dec.feed(b"\x00\x65")  # 101: the 4th byte of the prefix, no body byte sent yet
    assert info.value.size == 101 and info.value.limit == 100
    assert isinstance(info.value, InvalidFrameError)
    with pytest.raises(FrameTooLargeError):  # the decoder stays failed
        dec.feed(b"more")


def test_default_limit_is_socket_request_max_bytes():
    dec = FrameDecoder()
    assert dec.max_frame_bytes == DEFAULT_MAX_FRAME_BYTES == 104857600
    assert dec.feed(struct.pack(">i", DEFAULT_MAX_FRAME_BYTES)) == []
    assert dec.pending_frame_size == DEFAULT_MAX_FRAME_BYTES
    with pytest.raises(FrameTooLargeError) as info:
        FrameDecoder().feed(struct.pack(">i", DEFAULT_MAX_FRAME_BYTES + 1) + b"body")
    assert info.value.size == DEFAULT_MAX_FRAME_BYTES + 1


def test_too_large_after_complete_frames_in_same_chunk():
    dec = FrameDecoder(max_frame_bytes=10)
    with pytest.raises(FrameTooLargeError):
        dec.feed(encode_frame(b"ok") + struct.pack(">i", 11))


@pytest.mark.parametrize("size", [-1, -2**31])
def test_negative_size_is_invalid(size):
    dec = FrameDecoder()
    with pytest.raises(InvalidFrameError) as info:
        dec.feed(struct.pack(">i", size))
    assert not isinstance(info.value, FrameTooLargeError)
    assert info.value.size == size


def test_bad_limit():
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_bytes=-1)
