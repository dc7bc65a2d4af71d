"""Object keys, the .indexes and .manifest formats, and the transform stages (no storage involved)."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.kafka_uuid import uuid_from_str, uuid_to_str
from tierlog.tiered.metadata import IndexType, RemoteLogSegmentId, RemoteLogSegmentMetadata, TopicIdPartition
from tierlog.tiered.rsm import layout, transforms

TOPIC_CHARS = "abcXYZ019._-"


def _md(topic: str, topic_id: uuid.UUID, partition: int, start: int, segment_id: uuid.UUID):
    tp = TopicIdPartition(topic_id, topic, partition)
    return RemoteLogSegmentMetadata(RemoteLogSegmentId(tp, segment_id), start, start + 10, 0, 1, 0, 100, {0: start})


# ---------------------------------------------------------------------------------------------- keys


def test_key_format_is_the_documented_one():
    topic_id = uuid_from_str("XyZ0123456789abcdefABQ")
    segment_id = uuid_from_str("-_ab0123456789abcdefAg")  # base64 ids may start with '-' or '_'
    keys = layout.segment_keys(_md("orders", topic_id, 12, 1234, segment_id), "cluster/")
    assert keys.log == "cluster/orders-XyZ0123456789abcdefABQ/12/00000000000000001234--_ab0123456789abcdefAg.log"
    assert keys.indexes.endswith("1234--_ab0123456789abcdefAg.indexes")
    assert keys.manifest.endswith("1234--_ab0123456789abcdefAg.manifest")
    assert keys.all()[0] == keys.manifest


@settings(max_examples=200, deadline=None)
@given(topic=st.text(TOPIC_CHARS, min_size=1, max_size=60), partition=st.integers(0, 10_000),
       start=st.integers(0, 2**63 - 1), prefix=st.sampled_from(["", "p/", "a/b-", "x_"]),
       ids=st.tuples(st.uuids(), st.uuids()))
def test_parse_key_inverts_segment_keys(topic, partition, start, prefix, ids):
    md = _md(topic, ids[0], partition, start, ids[1])
    keys = layout.segment_keys(md, prefix)
    for key, suffix in ((keys.log, ".log"), (keys.indexes, ".indexes"), (keys.manifest, ".manifest")):
        parsed = layout.parse_key(key, prefix)
        assert parsed == layout.ParsedKey(topic, ids[0], partition, start, ids[1], suffix)


@pytest.mark.parametrize("key", [
    "",
    "orders-XyZ0123456789abcdefABQ/0/00000000000000000000-XyZ0123456789abcdefABQ.txt",
    "orders-XyZ0123456789abcdefABQ/00/00000000000000000000-XyZ0123456789abcdefABQ.log",
    "orders-XyZ0123456789abcdefABQ/0/0000000000000000000-XyZ0123456789abcdefABQ.log",
    "ordersXyZ0123456789abcdefABQ/0/00000000000000000000-XyZ0123456789abcdefABQ.log",
    "-XyZ0123456789abcdefABQ/0/00000000000000000000-XyZ0123456789abcdefABQ.log",
    "orders-XyZ0123456789abcdefABQ/0/x/00000000000000000000-XyZ0123456789abcdefABQ.log",
    "orders-XyZ0123456789abcdefABQ/0/00000000000000000000-XyZ0123456789abcdefABQ.log.0123.tmp",
])
def test_parse_key_ignores_foreign_keys(key):
    assert layout.parse_key(key) is None


def test_parse_key_requires_the_prefix():
    key = layout.segment_keys(_md("t", uuid.uuid4(), 0, 0, uuid.uuid4()), "a/").log
    assert layout.parse_key(key, "b/") is None and layout.parse_key(key, "a/") is not None


@pytest.mark.parametrize("prefix", ["/abs/", "a/../b/", "./", "a\\b/"])
def test_bad_prefixes_are_refused(prefix):
    with pytest.raises(ValueError):
        layout.check_prefix(prefix)


# ---------------------------------------------------------------------------------- .indexes object


@settings(max_examples=100, deadline=None)
@given(st.fixed_dictionaries({}, optional={t: st.binary(max_size=300) for t in IndexType}))
def test_indexes_object_round_trips(indexes):
    blob, entries = layout.encode_indexes(indexes)
    header = layout.decode_indexes_header(blob[:layout.INDEXES_HEADER_SIZE])
    assert header == entries
    for index_type in IndexType:
        assert layout.read_index(blob, index_type) == indexes.get(index_type)
    assert len(blob) == layout.INDEXES_HEADER_SIZE + sum(len(v) for v in indexes.values())


def test_indexes_header_byte_format():
    blob, _ = layout.encode_indexes({IndexType.OFFSET: b"\x00" * 8, IndexType.LEADER_EPOCH: b"0\n0\n"})
    assert layout.INDEXES_HEADER_SIZE == 132
    assert blob[:8] == b"TLIX\x00\x01\x00\x05"
    slot = struct.unpack_from(">bbhIqq", blob, 8)  # offset index
    assert slot == (0, 1, 0, crc32c.crc32c(b"\x00" * 8), 132, 8)
    assert struct.unpack_from(">bbhIqq", blob, 8 + 24 * 3) == (3, 0, 0, 0, 0, 0)  # no transaction index
    assert struct.unpack_from(">bbhIqq", blob, 8 + 24 * 4)[4:] == (140, 4)
    assert struct.unpack_from(">I", blob, 128)[0] == crc32c.crc32c(blob[:128])
    assert blob[132:] == b"\x00" * 8 + b"0\n0\n"


@pytest.mark.parametrize("damage, match", [
    (lambda b: b"XXXX" + b[4:], "magic"),
    (lambda b: b[:5] + b"\x09" + b[6:], "version"),
    (lambda b: b[:20] + b"\xff" + b[21:], "CRC"),
    (lambda b: b[:50], "truncated"),
])
def test_damaged_indexes_header_is_refused(damage, match):
    blob, _ = layout.encode_indexes({IndexType.OFFSET: b"12345678"})
    with pytest.raises(layout.IndexFormatError, match=match):
        layout.decode_indexes_header(damage(blob))


# ---------------------------------------------------------------------------------- .manifest object


def test_manifest_round_trips_and_is_versioned():
    md = _md("t", uuid.uuid4(), 2, 100, uuid.uuid4())
    _, entries = layout.encode_indexes({IndexType.OFFSET: b"x" * 16, IndexType.TIMESTAMP: b""})
    manifest = layout.SegmentManifest(
        topic="t", topic_id=md.topic_id_partition.topic_id, partition=2, segment_id=md.segment_id.id,
        start_offset=100, end_offset=110, max_timestamp_ms=5, leader_epochs={0: 100, 4: 105}, log_size=999,
        log_stored_size=500, indexes_size=148, indexes=entries,
        transforms=({"name": "zstd-chunks", "chunk_size": 10, "level": 3, "chunks": [[0, 0, 10, 5]]},),
        custom_metadata={"p": "", "s": 648}, broker_id=3, written_ms=7)
    raw = manifest.to_json()
    assert layout.SegmentManifest.from_json(raw) == manifest
    doc = json.loads(raw)
    assert doc["version"] == 1 and doc["segment"]["topic_id"] == uuid_to_str(md.topic_id_partition.topic_id)
    with pytest.raises(layout.ManifestFormatError, match="version"):
        layout.SegmentManifest.from_json(raw.replace(b'"version":1', b'"version":2'))
    with pytest.raises(layout.ManifestFormatError):
        layout.SegmentManifest.from_json(b"{not json")
    with pytest.raises(layout.ManifestFormatError, match="malformed"):
        layout.SegmentManifest.from_json(b'{"version":1,"segment":{}}')


# -------------------------------------------------------------------------------------------- stages


def _encode(data: bytes, stages, piece: int = 333):
    records: list[dict[str, Any]] = []
    pieces = [data[i:i + piece] for i in range(0, len(data), piece)]
    stored = b"".join(transforms.encode(stages, pieces, records))
    reads: list[tuple[int, int]] = []

    def read(start: int, length: int) -> bytes:
        reads.append((start, length))
        assert start >= 0 and start + length <= len(stored)
        return stored[start:start + length]

    return stored, records, transforms.original_reader(records, read), reads


@settings(max_examples=150, deadline=None)
@given(data=st.binary(max_size=5000) | st.builds(lambda n, b: b * n, st.integers(1, 400), st.binary(min_size=1,
                                                                                                   max_size=20)),
       chunk=st.integers(1, 1500), bounds=st.tuples(st.floats(0, 1), st.floats(0, 1)))
def test_zstd_chunks_ranged_read_returns_exact_bytes(data, chunk, bounds):
    _, records, read, reads = _encode(data, [transforms.ZstdChunks(chunk, level=1)])
    table = records[0]["chunks"]
    assert [c[0] for c in table] == list(range(0, len(data), chunk))
    start = int(bounds[0] * len(data))
    length = int(bounds[1] * (len(data) - start))
    assert read(start, length) == data[start:start + length]
    # Only the chunks covering the range are read, in one request.
    if length:
        assert len(reads) == 1
        first, last = start // chunk, (start + length - 1) // chunk
        assert reads[0] == (table[first][1], table[last][1] + table[last][3] - table[first][1])


class XorStage(transforms.Stage):
    """A toy stand-in for encryption: byte-wise, so any range maps to the same range."""

    name = "test-xor"

    def encode(self, chunks: Iterable[bytes], record: dict[str, Any]) -> Iterator[bytes]:
        record.update(name=self.name, key=0x5A)
        for chunk in chunks:
            yield bytes(b ^ 0x5A for b in chunk)

    @classmethod
    def decode_range(cls, record: Mapping[str, Any], read, start: int, length: int) -> bytes:
        return bytes(b ^ record["key"] for b in read(start, length))


def test_stages_compose():
    transforms.register_stage(XorStage)
    data = bytes(range(256)) * 40
    stored, records, read, _ = _encode(data, [transforms.ZstdChunks(1000), XorStage()])
    assert [r["name"] for r in records] == ["zstd-chunks", "test-xor"]
    assert len(stored) < len(data)
    for start, length in ((0, len(data)), (999, 2), (4321, 3000), (len(data) - 1, 1)):
        assert read(start, length) == data[start:start + length]


def test_corrupt_or_unknown_stages_are_reported():
    data = b"hello world" * 100
    stored, records, _, _ = _encode(data, [transforms.ZstdChunks(100)])
    broken = b"\x00" * len(stored)
    with pytest.raises(transforms.TransformError, match="decompress"):
        transforms.original_reader(records, lambda s, n: broken[s:s + n])(0, 10)
    with pytest.raises(transforms.TransformError, match="unknown transform"):
        transforms.original_reader([{"name": "rot13"}], lambda s, n: b"")


@settings(max_examples=100, deadline=None)
@given(topic=st.text(TOPIC_CHARS, min_size=1, max_size=60), prefix=st.sampled_from(["", "p/", "a/b-"]),
       ids=st.tuples(st.uuids(), st.uuids(), st.uuids()))
def test_parse_key_reads_both_layouts(topic, prefix, ids):
    """The cluster layout ({prefix}{clusterId}/{topic}-{id}/...) and the older one parse alike; only the
    cluster id tells them apart."""
    cluster = uuid_to_str(ids[2])
    md = _md(topic, ids[0], 3, 42, ids[1])
    in_cluster = layout.segment_keys(md, layout.cluster_prefix(prefix, cluster)).log
    older = layout.segment_keys(md, prefix).log
    assert layout.parse_key(in_cluster, prefix) == layout.ParsedKey(topic, ids[0], 3, 42, ids[1], ".log", cluster)
    assert layout.parse_key(older, prefix) == layout.ParsedKey(topic, ids[0], 3, 42, ids[1], ".log", None)


@pytest.mark.parametrize("cluster_id", ["", "a/b", ".", "..", "a\\b"])
def test_a_cluster_id_that_cannot_be_a_folder_is_refused(cluster_id):
    with pytest.raises(ValueError, match="cannot be a key folder"):
        layout.cluster_prefix("p/", cluster_id)
