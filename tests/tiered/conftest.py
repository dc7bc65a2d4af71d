"""Fixtures for the remote storage tests: a real rolled segment written by tierlog's own log, segment
metadata for it, and configured storage managers of every backend (``make_rsm``; ``seaweedfs`` and
``s3proxy`` on the harness's real S3 servers). Live tiered brokers come from the harness (tests/harness)."""

from __future__ import annotations

import random
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness.prerequisites import unavailable
from tests.tiered.rsmlib import S3_KINDS, ZSTD
from tierlog.records import build_batch
from tierlog.storage import Log, LogConfig
from tierlog.storage.producer_state import snapshot_path
from tierlog.tiered.metadata import (
    IndexType,
    LogSegmentData,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    TopicIdPartition,
)
from tierlog.tiered.rsm import create_remote_storage_manager

TOPIC_ID_PARTITION = TopicIdPartition(uuid.UUID("5f2c9e4a-1b7d-4c3e-9a8f-0d6e2b1c3a47"), "orders.v1-eu", 3)
# Two epochs inside the segment, so the leader-epoch checkpoint has two lines.
EPOCHS = {0: 0, 3: 40}


@dataclass(frozen=True)
class LocalSegment:
    data: LogSegmentData
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    files: dict  # IndexType or "log" -> bytes as stored locally

    def metadata(self, tp: TopicIdPartition = TOPIC_ID_PARTITION, **changes) -> RemoteLogSegmentMetadata:
        """COPY_SEGMENT_STARTED metadata with a fresh segment id, as the copy task builds it."""
        fields = dict(segment_id=RemoteLogSegmentId.generate(tp), start_offset=self.start_offset,
                      end_offset=self.end_offset, max_timestamp_ms=self.max_timestamp_ms, broker_id=1,
                      event_timestamp_ms=1_700_000_000_000, segment_size_in_bytes=len(self.files["log"]),
                      segment_leader_epochs=EPOCHS)
        fields.update(changes)
        return RemoteLogSegmentMetadata(**fields)


@pytest.fixture(scope="session")
def segment(tmp_path_factory) -> LocalSegment:
    """The first rolled segment of a log with idempotent batches of varied sizes (about 20 KB)."""
    d = tmp_path_factory.mktemp("local") / "orders.v1-eu-3"
    lg = Log.open(str(d), "orders.v1-eu", 3, LogConfig(segment_bytes=20_000, index_interval_bytes=512))
    rnd = random.Random(7)
    seq = 0
    try:
        while len(lg.segments) < 2:
            n = rnd.randint(1, 6)
            recs = [(b"k%d" % i, rnd.randbytes(rnd.randint(10, 400)), [], 1_700_000_000_000 + seq + i)
                    for i in range(n)]
            epoch = 0 if lg.log_end_offset < EPOCHS[3] else 3
            lg.append_as_leader(build_batch(recs, producer_id=1000, producer_epoch=0, base_sequence=seq),
                                leader_epoch=epoch)
            seq += n
        first, nxt = lg.segments[0], lg.segments[1]
        end_offset = nxt.base_offset - 1
        max_ts = first.max_timestamp_and_offset()[0]
    finally:
        lg.close()
    txn = tmp_path_factory.mktemp("txn") / "00000000000000000000.txnindex"
    # Kafka's .txnindex entries: version, producer id, first offset, last offset, last stable offset.
    txn.write_bytes(b"".join(struct.pack(">hqqqq", 0, 1000 + i, 5 * i, 5 * i + 3, 5 * i) for i in range(3)))
    epoch_checkpoint = (f"0\n{len(EPOCHS)}\n" + "".join(f"{e} {o}\n" for e, o in EPOCHS.items())).encode()
    data = LogSegmentData(log_segment=Path(first.log_path), offset_index=Path(first.offset_index.path),
                          time_index=Path(first.time_index.path),
                          producer_snapshot_index=Path(snapshot_path(str(d), nxt.base_offset)),
                          leader_epoch_index=epoch_checkpoint, transaction_index=txn)
    files = {"log": data.log_segment.read_bytes(), IndexType.OFFSET: data.offset_index.read_bytes(),
             IndexType.TIMESTAMP: data.time_index.read_bytes(),
             IndexType.PRODUCER_SNAPSHOT: data.producer_snapshot_index.read_bytes(),
             IndexType.TRANSACTION: txn.read_bytes(), IndexType.LEADER_EPOCH: epoch_checkpoint}
    assert len(files["log"]) > 15_000 and files[IndexType.OFFSET] and files[IndexType.PRODUCER_SNAPSHOT]
    return LocalSegment(data, first.base_offset, end_offset, max_ts, files)


@pytest.fixture
def make_rsm(request, tmp_path):
    """make_rsm(backend, {extra settings}) -> a configured manager, closed after the test."""
    made = []

    def _make(backend: str, extra: dict[str, str] | None = None):
        kind, _, variant = backend.partition("-")
        configs = {"broker.id": "1", **(ZSTD if variant == "zstd" else {})}
        if kind == "filesystem":
            configs.update({"dir": str(tmp_path / "remote"), "fsync.enable": "false"})
        else:
            try:
                import obstore  # noqa: F401
            except ImportError as e:
                unavailable("obstore", f"{e} (pip install 'tierlog[objectstore]')")
        if kind == "memory":
            configs["url"] = "memory://"
        elif kind == "file":
            configs["url"] = (tmp_path / "bucket").as_uri()
        elif kind in S3_KINDS:  # one folder per test in the module's bucket
            server = request.getfixturevalue(f"{kind}_s3")
            configs.update(server.objectstore_configs(f"s3://tiered/{uuid.uuid4().hex}"))
        configs.update(extra or {})
        rsm = create_remote_storage_manager("filesystem" if kind == "filesystem" else "objectstore", configs)
        made.append(rsm)
        return rsm

    yield _make
    for rsm in made:
        rsm.close()
