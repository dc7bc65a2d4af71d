"""Kafka's DumpLogSegments reads tierlog's files as its own and finds what tierlog says it wrote.

Once through the storage API directly (every codec, plain and idempotent batches, multi-batch
appends, two leader epochs, several segments with dense indexes), once through a live tierlog
broker fed by kafka-python (every codec) and by Kafka's own Java producer.
"""

from __future__ import annotations

import re
from pathlib import Path

from kafka import KafkaProducer

from tests.harness.rawclient import RawClient
from tests.peer.dumplog import dump_partition, read_offset_index, read_time_index
from tierlog.protocol import ApiKey
from tierlog.records import build_batch
from tierlog.storage import Log, LogConfig

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
T0 = 1_700_000_000_000


def _batch_fields(h, pos: int) -> dict:
    """The batch line DumpLogSegments should print for a header tierlog read back."""
    return {
        "baseOffset": str(h.base_offset), "lastOffset": str(h.last_offset), "count": str(h.records_count),
        "baseSequence": str(h.base_sequence), "lastSequence": str(h.last_sequence),
        "producerId": str(h.producer_id), "producerEpoch": str(h.producer_epoch),
        "partitionLeaderEpoch": str(h.partition_leader_epoch), "position": str(pos), "size": str(h.size),
        "compresscodec": h.compression.name_lower, "crc": str(h.crc), "isvalid": "true",
        "CreateTime": str(h.max_timestamp),
    }


def _write_log(directory: Path) -> tuple[Log, list[dict], dict]:
    """A three-plus-segment log through tierlog's storage API: the log, what each append returned,
    and what each record should read as (offset -> DumpLogSegments' record fields)."""
    log = Log.open(str(directory), "peer", 0, LogConfig(segment_bytes=3000, index_interval_bytes=200))
    appended = []
    records_by_offset = {}
    next_offset = 0
    sequences: dict[int, int] = {}
    for i in range(60):
        codec = CODECS[i % len(CODECS)]
        producer_id = 4000 + i % 2 if i % 3 else -1  # two idempotent producers and plain batches
        epoch = 0 if i < 30 else 3
        batches = []
        for part in range(2 if i % 7 == 0 else 1):  # now and then one append carries two batches
            n = 1 + (i + part) % 4
            records = [(b"k%d" % j, b"value-%d-%d-" % (i, j) * (1 + j), [("h", b"%d" % j)] if j % 2 else [],
                        T0 + i * 10 + j) for j in range(n)]
            seq = -1
            if producer_id >= 0:
                seq = sequences.get(producer_id, 0)
                sequences[producer_id] = seq + n
            batches.append(build_batch(records, compression=codec, producer_id=producer_id,
                                       producer_epoch=0 if producer_id >= 0 else -1, base_sequence=seq))
            for j, (key, value, headers, ts) in enumerate(records):
                records_by_offset[next_offset] = {
                    "offset": str(next_offset), "CreateTime": str(ts), "keySize": str(len(key)),
                    "valueSize": str(len(value)), "sequence": str(seq + j if seq >= 0 else -1),
                    "headerKeys": "[h]" if headers else "[]"}
                next_offset += 1
        info = log.append_as_leader(b"".join(batches), leader_epoch=epoch, now_ms=T0 + 1000,
                                    allow_multiple_batches=True)
        appended.append({"first": info.first_offset, "last": info.last_offset, "codec": codec,
                         "producer_id": producer_id, "batches": len(batches)})
    return log, appended, records_by_offset


def test_dump_log_segments_reads_storage_api_log(tmp_path, kafka_tool):
    directory = tmp_path / "peer-0"
    log, appended, records_by_offset = _write_log(directory)
    # What tierlog reports about its own log, before it closes (close writes the final snapshot).
    expected = {}
    for seg, pos, h in log.batches():
        expected.setdefault(seg.base_offset, []).append(_batch_fields(h, pos))
    producers_at_end = {pid: (e.producer_epoch, e.batches[-1].last_seq, e.batches[-1].last_offset)
                        for pid, e in log.producer_state.producers.items()}
    log_end = log.log_end_offset
    log.close()
    assert len(expected) >= 3, "the scenario must roll several segments"
    assert [a["first"] for a in appended[1:]] == [a["last"] + 1 for a in appended[:-1]]
    assert log_end == appended[-1]["last"] + 1

    dumped, indexes, problems = dump_partition(kafka_tool, directory)
    assert problems == []

    for base, batches in expected.items():
        name = f"{base:020d}"
        log_dump = dumped[f"{name}.log"]
        assert f"Log starting offset: {base}" in log_dump.notes
        assert [{k: b[k] for k in want} for b, want in zip(log_dump.batches, batches)] == batches
        assert len(log_dump.batches) == len(batches)
        # Deep iteration: every record as written (timestamps, sizes, sequences, header keys).
        offsets = range(int(batches[0]["baseOffset"]), int(batches[-1]["lastOffset"]) + 1)
        assert log_dump.records == [records_by_offset[o] for o in offsets]
        for suffix in (".index", ".timeindex"):
            path = directory / f"{name}{suffix}"
            if path.exists() and path.stat().st_size:
                assert f"{path} passed sanity check." in dumped[path.name].notes
        # Pass two: every index entry as tierlog wrote it, checked against the log by Kafka.
        index_file = directory / f"{name}.index"
        if index_file.exists() and index_file.stat().st_size:
            assert indexes[index_file.name].index == read_offset_index(index_file)
            if base != max(expected):  # closed segments hold many entries (index.interval.bytes=200)
                assert len(indexes[index_file.name].index) > 1
        time_file = directory / f"{name}.timeindex"
        if time_file.exists() and time_file.stat().st_size:
            assert indexes[time_file.name].time_index == read_time_index(time_file)

    seen_codecs = {b["compresscodec"] for batches in expected.values() for b in batches}
    assert seen_codecs == set(CODECS)
    # Producer snapshots: one per roll and the one close wrote at the log end.
    snapshots = sorted(p.name for p in directory.glob("*.snapshot"))
    assert f"{log_end:020d}.snapshot" in snapshots
    final = {int(p["producerId"]): (int(p["producerEpoch"]), int(p["lastSequence"]), int(p["lastOffset"]))
             for p in dumped[f"{log_end:020d}.snapshot"].producers}
    assert final == producers_at_end
    assert set(final) == {4000, 4001}


def test_every_segment_has_its_index_files(tmp_path):
    log = Log.open(str(tmp_path / "files-0"), "files", 0, LogConfig(segment_bytes=500, index_interval_bytes=4096))
    for i in range(6):
        log.append_as_leader(build_batch([(None, b"x" * 300, [], T0 + i)]), now_ms=T0 + 1000)
    log.close()
    logs = sorted(p.stem for p in (tmp_path / "files-0").glob("*.log"))
    assert len(logs) == 6
    present = {p.name for p in (tmp_path / "files-0").iterdir()}
    missing = [f"{stem}{suffix}" for stem in logs for suffix in (".index", ".timeindex")
               if f"{stem}{suffix}" not in present]
    assert missing == []


def test_dump_log_segments_reads_live_broker_log(start_broker, kafka_tool):
    broker = start_broker({"log.segment.bytes": "16384", "log.index.interval.bytes": "512",
                           "num.partitions": "1"})
    topic = "dumped"
    sent: dict[int, tuple[str, int]] = {}  # offset -> (codec, value size)
    for codec in CODECS:
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, compression_type=None if codec == "none"
                                 else codec, linger_ms=20)
        futures = [(producer.send(topic, key=b"k", value=b"%s-%d " % (codec.encode(), i) * (1 + i % 5)), i)
                   for i in range(40)]
        producer.flush()
        for fut, i in futures:
            md = fut.get(timeout=10)
            sent[md.offset] = (codec, len(b"%s-%d " % (codec.encode(), i)) * (1 + i % 5))
        producer.close()
    java_first = max(sent) + 1
    perf = kafka_tool("ProducerPerformance", "--topic", topic, "--num-records", "400", "--record-size", "120",
                      "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.bootstrap}",
                      "compression.type=snappy", "linger.ms=5", "batch.size=4000")
    assert "400 records sent" in perf.stdout
    raw = RawClient(broker.bootstrap)
    resp = raw.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
    raw.close()
    log_end = resp.topics[0].partitions[0].offset
    assert log_end == java_first + 400
    assert broker.stop() == 0
    directory = broker.log_dir / f"{topic}-0"

    dumped, indexes, problems = dump_partition(kafka_tool, directory)
    assert problems == []
    logs = sorted(n for n in dumped if n.endswith(".log"))
    assert len(logs) > 3
    batches = [b for n in logs for b in dumped[n].batches]
    records = {int(r["offset"]): r for n in logs for r in dumped[n].records}
    assert sorted(records) == list(range(log_end))
    codec_of = {}
    for b in batches:
        assert int(b["producerId"]) >= 0, b  # every producer here is idempotent
        for off in range(int(b["baseOffset"]), int(b["lastOffset"]) + 1):
            codec_of[off] = (b["compresscodec"], int(b["producerId"]))
    for offset, (codec, size) in sent.items():
        assert codec_of[offset][0] == codec and int(records[offset]["valueSize"]) == size, offset
    assert {codec_of[o][0] for o in range(java_first, log_end)} == {"snappy"}
    assert all(int(records[o]["valueSize"]) == 120 for o in range(java_first, log_end))
    for name in logs:
        base = name.split(".")[0]
        index_file = directory / f"{base}.index"
        if index_file.exists() and index_file.stat().st_size:
            assert indexes[index_file.name].index == read_offset_index(index_file)
    # The snapshot of the clean shutdown: six producers, each at its last offset.
    last_by_pid: dict[int, int] = {}
    for off, (_, pid) in codec_of.items():
        last_by_pid[pid] = max(last_by_pid.get(pid, -1), off)
    snap = dumped[f"{log_end:020d}.snapshot"].producers
    assert {int(p["producerId"]): int(p["lastOffset"]) for p in snap} == last_by_pid
    assert len(last_by_pid) == len(CODECS) + 1


def test_dump_log_segments_reads_markers_and_the_transaction_index(tmp_path, kafka_tool):
    """Markers are control records Kafka decodes (type and coordinator epoch), and each ``.txnindex`` entry
    reads back as tierlog wrote it (Kafka's AbortedTxn, version 0)."""
    directory = tmp_path / "txn-0"
    log = Log.open(str(directory), "txn", 0, LogConfig(segment_bytes=600))

    def txn(pid, seq):
        log.append_as_leader(build_batch([(b"k", b"v" * 40)] * 2, producer_id=pid, producer_epoch=1,
                                         base_sequence=seq, is_transactional=True), leader_epoch=2)
    expected = []
    for i in range(6):
        txn(100 + i, 0)
        txn(200 + i, 0)  # two transactions open at once
        first = log.log_end_offset - 4
        log.append_txn_marker(100 + i, 1, coordinator_epoch=7, commit=i % 2 == 0, leader_epoch=2)
        log.append_txn_marker(200 + i, 1, coordinator_epoch=7, commit=False, leader_epoch=2)
        if i % 2:
            expected.append((100 + i, first, log.log_end_offset - 2, first + 2))
        expected.append((200 + i, first + 2, log.log_end_offset - 1, log.log_end_offset))
    log.close()
    files = sorted(p for p in directory.iterdir() if p.suffix in (".log", ".txnindex"))
    assert len([p for p in files if p.suffix == ".txnindex"]) > 1
    out = kafka_tool("DumpLogSegments", "--deep-iteration", "--files", ",".join(map(str, files)))
    assert "Exception" not in out.stdout + out.stderr
    entries = [tuple(int(f[k]) for k in ("producerId", "firstOffset", "lastOffset", "lastStableOffset"))
               for f in (dict(re.findall(r"(\w+): (\S+)", line)) for line in out.stdout.splitlines()
                         if line.startswith("version: "))]
    assert entries == expected
    assert all(line.split("version: ")[1].startswith("0 ") for line in out.stdout.splitlines()
               if line.startswith("version: "))
    markers = [dict(re.findall(r"(\w+): (\S+)", line)) for line in out.stdout.splitlines() if "endTxnMarker" in line]
    assert [m["endTxnMarker"] for m in markers] == [t for i in range(6)
                                                  for t in ("COMMIT" if i % 2 == 0 else "ABORT", "ABORT")]
    assert {m["coordinatorEpoch"] for m in markers} == {"7"}
