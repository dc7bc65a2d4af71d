"""The log cleaner and transactions against Apache Kafka 4.4: the same hand-driven transactions (committed and
aborted, interleaved with non-transactional keyed records and tombstones, three producers) and the same
padding, byte for byte, to a compacted topic on each peer with the same cleaner settings; what survives is
compared batch by batch (offsets, producer, sequence, record count, whether a delete horizon is stamped,
each record's offset, key and value, each marker's type) after the first clean and after two more, each once
``delete.retention.ms`` has passed since the horizons the last one stamped (aborted data goes at once;
tombstones are stamped with a horizon in the first clean and go in the next; a marker is stamped in the
first clean that finds no batch of its transaction left, and goes in the clean after that).

Each clean is one round, forced as in test_cleaner_differential.py (``min.cleanable.dirty.ratio`` 0.01, a
200 ms backoff): the topic is written with ``cleanup.policy=delete`` (the cleaner leaves it alone), switched
to ``compact``, and the round is over when the peer's ``cleaner-offset-checkpoint`` reaches the active
segment's base offset."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from tests.harness import apache_kafka
from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import RawClient, create_topic, raw_client
from tests.harness.transactions import UNVERIFIED, marker, produce, write_markers
from tests.harness.waiting import not_yet, wait_until
from tests.peer.diff import differences, plain
from tierlog.protocol import ApiKey
from tierlog.records import decode_batch, iter_batches

TOPIC = "txn-cleaned"
CLEANER = {"log.cleaner.backoff.ms": "200", "log.cleaner.min.cleanable.ratio": "0.01", **UNVERIFIED}
DELETE_RETENTION_MS = 5000
PAD = (b"pad", b"." * 100_000)  # ten fill a 1 MiB segment (Kafka 4's smallest)
WAIT_S = 120


@pytest.fixture(scope="module")
def kafka(kafka_jars, tmp_path_factory):
    k = apache_kafka.start_kafka(tmp_path_factory.mktemp("kafka-txn-cleaner"), "kafka-txn-cleaner",
                                 settings=CLEANER)
    yield k
    k.stop()


@pytest.fixture(scope="module")
def tierlog(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("tierlog-txn-cleaner") / "logs",
                      {**apache_kafka.SHARED_SETTINGS, **CLEANER}).start()
    yield b
    b.stop()


class Writer:
    """Keyed batches to partition 0, plain or transactional (each producer's sequence kept), and markers."""

    def __init__(self, raw: RawClient):
        self.raw = raw
        self.seq: dict[int, int] = {}

    def plain(self, *records: tuple[bytes, bytes | None]) -> None:
        r = produce(self.raw, TOPIC, [v for _, v in records], keys=[k for k, _ in records])
        assert plain(r.error_code) == 0, r

    def txn(self, pid: int, *records: tuple[bytes, bytes | None]) -> None:
        seq = self.seq.get(pid, 0)
        r = produce(self.raw, TOPIC, [v for _, v in records], keys=[k for k, _ in records], producer_id=pid,
                    epoch=0, sequence=seq, transactional=True)
        assert plain(r.error_code) == 0, r
        self.seq[pid] = seq + len(records)

    def end(self, pid: int, commit: bool) -> None:
        assert set(write_markers(self.raw, marker(pid, 0, commit, TOPIC)).values()) == {0}

    def pad(self, n: int) -> None:
        for _ in range(n):
            self.plain(PAD)


def producer_id(raw: RawClient) -> int:
    """A producer id (InitProducerId again while Kafka loads its transaction state log, code 14 or 15)."""

    def initialized():
        r = raw.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60000,
                                                      "producer_id": -1, "producer_epoch": -1})
        if plain(r.error_code) == 0:
            return r
        assert plain(r.error_code) in (14, 15), r
        return not_yet(r)

    return wait_until(initialized, WAIT_S, interval=0.1, what="a producer id").producer_id


def set_policy(raw: RawClient, policy: str) -> None:
    resp = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 2, "resource_name": TOPIC, "configs": [
            {"name": "cleanup.policy", "config_operation": 0, "value": policy}]}], "validate_only": False})
    assert [plain(r.error_code) for r in resp.responses] == [0], resp


def fetch_all(raw: RawClient) -> list[tuple]:
    """Every batch of the partition (read_uncommitted Fetches from offset 0 to the high watermark)."""
    out = []
    offset = 0
    while True:
        r = raw.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 8 << 20, "isolation_level": 0,
            "topics": [{"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": offset,
                                                        "partition_max_bytes": 4 << 20, "current_leader_epoch": -1,
                                                        "log_start_offset": -1}]}]})
        p = r.responses[0].partitions[0]
        assert plain(p.error_code) == 0, p
        data = bytes(p.records or b"")
        for pos, h in iter_batches(data):
            _, records = decode_batch(data, pos)
            out.append((h, records))
            offset = h.last_offset + 1
        if offset >= p.high_watermark or not data:
            return out


def normalized(batches: list[tuple], pids: dict[int, str]) -> list[dict]:
    """Batches as a client sees them, producer ids named by the scenario, timestamps left out (the delete
    horizon only as present or not), padding values by their digest."""
    out = []
    for h, records in batches:
        entry = {"offsets": (h.base_offset, h.last_offset), "producer": pids.get(h.producer_id, h.producer_id),
                 "epoch": h.producer_epoch, "base_sequence": h.base_sequence, "transactional": h.is_transactional,
                 "control": h.is_control, "delete_horizon": h.has_delete_horizon, "count": len(records)}
        if h.is_control:
            # an emptied control batch: Kafka keeps one of a producer that wrote only markers here
            entry["marker"] = ["ABORT", "COMMIT"][int.from_bytes(bytes(records[0].key)[2:4], "big")] \
                if records else "EMPTY"
        else:
            entry["records"] = [
                (r.offset, bytes(r.key) if r.key is not None else None,
                 None if r.value is None else bytes(r.value) if len(r.value) < 100
                 else hashlib.sha256(bytes(r.value)).hexdigest()[:12]) for r in records]
        out.append(entry)
    return out


def horizons(batches: list[tuple]) -> list[int]:
    return [h.base_timestamp for h, _ in batches if h.has_delete_horizon]


def checkpoint(log_dir: Path) -> int | None:
    path = log_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return None
    for line in path.read_text().splitlines()[2:]:
        topic, partition, offset = line.split()
        if (topic, partition) == (TOPIC, "0"):
            return int(offset)
    return None


def active_base(log_dir: Path) -> int:
    return max(int(p.stem) for p in (log_dir / f"{TOPIC}-0").glob("*.log"))


def clean_once(raw: RawClient, log_dir: Path) -> None:
    """Switch the topic to compact and wait until a round cleaned up to the active segment."""
    set_policy(raw, "compact")
    target = active_base(log_dir)
    wait_until(lambda: (checkpoint(log_dir) or -1) >= target, WAIT_S, interval=0.1,
               what=f"a cleaning round to reach offset {target}")
    set_policy(raw, "delete")


def scenario(bootstrap: str, log_dir: Path) -> dict:
    create_topic(bootstrap, TOPIC, configs={"cleanup.policy": "delete", "segment.bytes": "1048576",
                                            "min.cleanable.dirty.ratio": "0.01",
                                            "delete.retention.ms": str(DELETE_RETENTION_MS)})
    seen = {}
    with raw_client(bootstrap) as raw:
        a, b, c, d = (producer_id(raw) for _ in range(4))
        pids = {a: "A", b: "B", c: "C", d: "D"}
        w = Writer(raw)
        w.plain((b"k0", b"v0a"), (b"k1", b"v1a"), (b"k2", b"v2a"), (b"k3", b"v3a"), (b"k4", b"v4a"))
        w.txn(a, (b"k0", b"A1-0"), (b"k1", b"A1-1"))  # committed, k1 overwritten after
        w.end(a, True)
        w.txn(b, (b"k2", b"B1-2"), (b"k5", b"B1-5"))  # aborted, a plain record in between
        w.plain((b"k1", b"v1b"))
        w.end(b, False)
        w.plain((b"k3", None))  # a plain tombstone
        w.txn(a, (b"k6", b"A2-6"))  # two producers open at once: A commits, C aborts
        w.txn(c, (b"k9", b"C1-9"))
        w.txn(a, (b"k4", None))  # a tombstone in a transaction
        w.end(a, True)
        w.end(c, False)  # C's last data batch is aborted data
        w.txn(b, (b"k8", b"B2-8"))  # committed, then superseded whole: its marker is left alone
        w.end(b, True)
        w.plain((b"k8", b"v8"))
        w.txn(b, (b"k10", b"B3-10"))
        w.end(b, True)
        w.txn(a, (b"k7", b"A3-7"))  # A's last data batch is aborted data
        w.end(a, False)
        w.txn(c, (b"k11", b"C2-11"), (b"k9", b"C2-9"))  # committed over an aborted key
        w.end(c, True)
        w.end(d, False)  # a marker without data here (a transaction that added the partition, wrote nothing)
        w.pad(25)  # two segments roll: everything above is cleanable
        seen["before"] = normalized(fetch_all(raw), pids)
        clean_once(raw, log_dir)
        first = fetch_all(raw)
        seen["first clean"] = normalized(first, pids)
        # Past every horizon stamped so far (the cleaner reads the same clock), then dirty data for the next
        # round: Kafka stamps a marker only in a pass that finds no batch of its transaction left, and removes
        # it in a pass after that horizon, so markers go one round after their data.
        for name, key in (("second clean", b"k12"), ("third clean", b"k13")):
            due = max(horizons(fetch_all(raw)), default=0)
            assert due, f"no delete horizon is stamped before the {name}"
            wait_until(lambda: time.time() * 1000 > due + 100, WAIT_S, interval=0.1,  # noqa: B023 - called here
                       what="the delete horizon to pass")
            w.plain((key, b"v-" + key))
            w.pad(12)
            clean_once(raw, log_dir)
            seen[name] = normalized(fetch_all(raw), pids)
    return seen


def brief(batches: list[dict]) -> str:
    """One short word per batch, for the failure message: offsets, producer, T(ransactional) or the marker,
    H when a delete horizon is stamped, and the keys kept."""
    words = []
    for b in batches:
        kind = b.get("marker") or ("T" if b["transactional"] else "")
        keys = ",".join((k or b"-").decode() for _, k, _ in b.get("records", []))
        words.append(f"{b['offsets'][0]}-{b['offsets'][1]}:{b['producer']}:{kind}{':H' if b['delete_horizon'] else ''}"
                     f"[{keys}]")
    return " ".join(words)


def test_transaction_markers_and_aborted_data_are_cleaned_as_kafka_cleans_them(kafka, tierlog):
    theirs = scenario(kafka.bootstrap, kafka.log_dir)
    ours = scenario(tierlog.bootstrap, tierlog.log_dir)
    shown = "\n".join(f"{name}\n  kafka:   {brief(theirs[name])}\n  tierlog: {brief(ours[name])}" for name in theirs)
    found = differences(theirs, ours)
    assert not found, "the cleaner differs from Apache Kafka:\n  " + "\n  ".join(found) + "\n" + shown
    # the scenario does what it means to on Kafka: aborted data goes, then markers without data go
    assert len(theirs["first clean"]) < len(theirs["before"]), shown
    assert sum(b["control"] for b in theirs["third clean"]) < sum(b["control"] for b in theirs["first clean"]), shown
