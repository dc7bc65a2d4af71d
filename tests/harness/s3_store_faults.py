"""Faults of a real S3 store under a tiering broker: the scenario tests/tiered/test_store_faults.py runs
in short and scripts/s3_store_faults.py runs as a matrix.

One broker tiers to a real server (SeaweedFS or S3Proxy) through :class:`S3FaultProxy`. Each case gets a
topic of its own with small segments and local retention of one byte, so everything but the active
segment is read from the store: half its records are produced (acks=all) and copied, the fault is set,
the other half is produced while it lasts and a consumer reads the topic from offset 0, a raw fetch of
offset 0 records the error codes remote readers get; the fault ends (once it has happened: its event, or
for an outage the broker's own report of it, never a sleep), and the case checks:

- every acknowledged record is read back from the earliest offset, once, in order;
- the remote segments (their manifests, read from the server directly) cover the offsets from 0 without a
  gap or an overlap, nothing is left to clean up, and ``tier reconcile`` finds no orphan, nothing missing
  and no key outside the layout (a store's folder placeholders are no objects);
- remote readers saw only the retriable KAFKA_STORAGE_ERROR (or nothing) before they got the data;
- the broker's resident memory stayed within a bound while it caught up.

``CASES`` names the faults; ``run_cases(server, work, names)`` returns one row per case.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.harness.broker import BrokerProcess
from tests.harness.memory import rss_mib
from tests.harness.rawclient import RawClient
from tests.harness.s3_fault_proxy import Fault, S3FaultProxy, delete_faults, log_object
from tests.harness.tiered import call, tier_status, tiered_settings, wait_for
from tests.harness.waiting import TimedOut, wait_until
from tests.tiered.fetchlib import fetch
from tierlog.errors import KafkaStorageError
from tierlog.tiered.rsm.layout import MANIFEST_SUFFIX, SegmentManifest

TOPIC_CONFIGS = {"remote.storage.enable": "true", "segment.bytes": "16384", "local.retention.bytes": "1",
                 "retention.ms": "-1", "file.delete.delay.ms": "0"}
#: Short store timeouts and few retries, so a fault reaches the broker's tasks instead of hiding in retries.
STORE_TIMEOUTS = {"request.timeout.ms": "2000", "connect.timeout.ms": "1000", "retry.max.retries": "2",
                  "retry.timeout.ms": "4000", "retry.backoff.ms": "50", "retry.backoff.max.ms": "200"}
RECORD = 120  # bytes of a record's value


def _upload(target: str) -> bool:
    return log_object(target) or ".indexes" in target or MANIFEST_SUFFIX in target


#: name -> the rules of the fault ("down" is the store's outage, not a rule).
CASES = {
    "503 SlowDown on uploads": lambda: [Fault("status", "PUT", _upload, status=503, times=12)],
    "500 on every request": lambda: [Fault("status", None, status=500, times=12)],
    "cut mid-upload": lambda: [Fault("cut_request", "PUT", log_object, times=4)],
    "cut mid-read": lambda: [Fault("cut_response", "GET", log_object, times=4)],
    "upload timeout": lambda: [Fault("stall", "PUT", log_object, times=2)],
    "slow read bodies": lambda: [Fault("slow_body", "GET", log_object, times=6, chunk=2048, delay=0.05)],
    # Every delete fails, and one upload's manifest too (three times: the first try and its two retries), so
    # a failed upload waits for a clean-up that cannot run while the copies behind it go on.
    "deletes fail": lambda: [*delete_faults(status=500),
                             Fault("status", "PUT", lambda t: MANIFEST_SUFFIX in t, status=500, times=3)],
    "store down": lambda: "down",
}
#: The cases the suite runs (tests/tiered/test_store_faults.py).
SHORT = ("503 SlowDown on uploads", "cut mid-upload", "cut mid-read", "deletes fail", "store down")


@dataclass
class CaseResult:
    fault: str
    acknowledged: int = 0
    read_back: int = 0
    remote_segments: int = 0
    remote_gaps: int = 0
    overlaps: int = 0
    fault_hits: int = 0
    storage_errors_seen: int = 0  # KAFKA_STORAGE_ERROR answers to a remote read during the fault
    other_errors_seen: list = field(default_factory=list)
    peak_rss_mib: float = 0.0
    seconds: float = 0.0
    problems: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


class _RssWatch:
    """The broker's peak resident memory, sampled every 0.2 s while a case runs."""

    def __init__(self, pid: int):
        self.pid, self.peak, self._stop = pid, 0.0, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_mib(self.pid))
            except (OSError, AssertionError):
                return
            self._stop.wait(0.2)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


class StoreFaultRun:
    """A broker tiering to ``server`` through a fault proxy; ``case(name)`` runs one case."""

    def __init__(self, server, work: Path):
        self.server = server
        work.mkdir(parents=True, exist_ok=True)
        self.proxy = S3FaultProxy(server.port)
        self.prefix = f"faults-{uuid.uuid4().hex[:8]}"
        store = {**server.objectstore_configs(f"s3://tiered/{self.prefix}"), "aws_endpoint": self.proxy.endpoint,
                 **STORE_TIMEOUTS}
        settings = tiered_settings(work, **{"remote.log.storage.manager.class.name": "objectstore",
                                            **{f"rsm.config.{k}": v for k, v in store.items()}})
        del settings["rsm.config.dir"]
        self.broker = BrokerProcess(work / "logs", settings)

    def __enter__(self) -> StoreFaultRun:
        self.broker.start()
        return self

    def __exit__(self, *exc) -> None:
        self.broker.kill()
        self.proxy.close()

    # -- steps --

    def _create(self, topic: str) -> None:
        admin = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap)
        try:
            admin.create_topics([NewTopic(topic, 1, 1, topic_configs=TOPIC_CONFIGS)])
        finally:
            admin.close()

    def _produce(self, topic: str, start: int, count: int) -> int:
        """Records ``start``.. with acks=all; the number acknowledged."""
        acked = []
        p = CKProducer({"bootstrap.servers": self.broker.bootstrap, "linger.ms": 2, "acks": "all", "batch.size": 2000,
                        "enable.idempotence": True})
        for i in range(start, start + count):
            p.produce(topic, b"%08d" % i + b"v" * (RECORD - 8),
                      on_delivery=lambda err, msg: acked.append(msg) if err is None else None)
        p.flush(60)
        return len(acked)

    def _status(self, topic: str) -> dict:
        return tier_status(self.broker, topic)["partitions"][0]

    def _settled(self, topic: str) -> dict | None:
        p = self._status(topic)
        return p if p["ready"] and p["copy_lag_segments"] == 0 and not p["remote_segments_to_clean"] \
            and not p["remote_segments_in_progress"] and p["local_segments"] <= 2 else None

    def _consume(self, topic: str, expected: int, out: list, timeout: float = 120) -> None:
        c = CKConsumer({"bootstrap.servers": self.broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                        "enable.auto.commit": False, "auto.offset.reset": "earliest"})
        c.assign([CKTopicPartition(topic, 0, 0)])

        def consumed():
            if len(out) < expected:
                for m in c.consume(500, timeout=0.5):
                    if m.error() is None:
                        out.append((m.offset(), int(m.value()[:8])))
            return len(out) >= expected

        try:
            wait_until(consumed, timeout, interval=0, what=f"{expected} records of {topic}")
        except TimedOut:
            pass  # the caller judges what arrived in ``out``
        finally:
            c.close()

    def _remote_manifests(self, topic: str) -> list[SegmentManifest]:
        """The topic's manifests, read from the server itself (not through the proxy)."""
        client = self.server.boto3_client()
        found = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket="tiered", Prefix=self.prefix + "/"):
            for o in page.get("Contents", []):
                if o["Key"].endswith(MANIFEST_SUFFIX) and f"/{topic}-" in "/" + o["Key"][len(self.prefix) + 1:]:
                    body = client.get_object(Bucket="tiered", Key=o["Key"])["Body"].read()
                    found.append(SegmentManifest.from_json(body))
        return sorted(found, key=lambda m: m.start_offset)

    def _probe_remote_read(self, topic: str, r: CaseResult, done: threading.Event) -> None:
        """Fetch offset 0 (remote) until it answers data; the error codes met on the way go to ``r``."""
        client = RawClient(self.broker.bootstrap)
        try:
            while not done.is_set():
                part = fetch(client, topic, {0: 0})[0]
                if part.error_code == 0 and part.records:
                    return
                if part.error_code == KafkaStorageError.code:
                    r.storage_errors_seen += 1
                elif part.error_code != 0:
                    r.other_errors_seen.append(part.error_code)
                done.wait(0.05)
        finally:
            client.close()

    def case(self, name: str, records: int = 1200) -> CaseResult:
        r = CaseResult(name)
        began = time.monotonic()
        topic = "f-" + "".join(ch if ch.isalnum() else "-" for ch in name.lower())
        self._create(topic)
        watch = _RssWatch(self.broker.proc.pid)
        half = records // 2
        r.acknowledged += self._produce(topic, 0, half)
        wait_for(lambda: self._settled(topic), f"{name}: the first half copied", timeout=120)
        rules = CASES[name]()
        faults: list[Fault] = []
        if rules == "down":
            self.proxy.down()
        else:
            faults = [self.proxy.add(f) for f in rules]
        probe_done = threading.Event()
        probe = threading.Thread(target=self._probe_remote_read, args=(topic, r, probe_done), daemon=True)
        probe.start()
        got: list = []
        reader = threading.Thread(target=self._consume, args=(topic, records, got), daemon=True)
        reader.start()
        try:
            r.acknowledged += self._produce(topic, half, records - half)
            if rules == "down":
                # Held down until the broker reports the failure: a failed copy, and a failed remote read.
                wait_for(lambda: self._status(topic)["last_error"], f"{name}: a copy failing", timeout=60)
                wait_for(lambda: r.storage_errors_seen, f"{name}: a remote read failing", timeout=60)
            elif name == "deletes fail":
                # Copies go on while deletes fail: the second half is copied before deletes heal.
                wait_for(lambda: (p := self._status(topic))["copy_lag_segments"] == 0 and p["local_segments"] <= 2
                         and p["remote_segments_to_clean"], f"{name}: copies going on past a failed clean-up",
                         timeout=120)
            else:
                wait_for(lambda: any(f.hit.is_set() for f in faults), f"{name}: the fault to happen", timeout=60)
        finally:
            r.fault_hits = sum(f.hits for f in faults)
            self.proxy.clear()
            self.proxy.up()
        reader.join(180)
        probe_done.set()
        probe.join(30)
        wait_for(lambda: self._settled(topic), f"{name}: copies to catch up after the fault", timeout=180)
        r.peak_rss_mib = watch.stop()
        if len(got) < r.acknowledged:  # the reader started during the fault may have given up
            got = []
            self._consume(topic, records, got)
        values = [v for _, v in got]
        r.read_back = len(set(values) & set(range(records)))
        if [o for o, _ in got] != sorted(o for o, _ in got) or len(values) != len(set(values)):
            r.problems.append("records read out of order or twice")
        if r.read_back < r.acknowledged:
            r.problems.append(f"{r.acknowledged - r.read_back} acknowledged records not read back")
        manifests = self._remote_manifests(topic)
        r.remote_segments = len(manifests)
        end = -1
        for m in manifests:
            if m.start_offset > end + 1:
                r.remote_gaps += 1
            elif m.start_offset <= end:
                r.overlaps += 1
            end = max(end, m.end_offset)
        status = self._status(topic)
        if end + 1 < status["local_log_start_offset"]:
            r.remote_gaps += 1  # offsets neither remote nor local
        if r.remote_gaps or r.overlaps:
            r.problems.append(f"remote segments with {r.remote_gaps} gaps and {r.overlaps} overlaps")
        # What the store holds beyond the metadata (an upload cut short), and what a listing shows that is no
        # object of the layout (a store's folder placeholders), once everything settled: nothing.
        report = call(self.broker, "/v1/tier/reconcile")
        mine = [o for o in report["orphans"] if o["topic"] == topic]
        if mine or report["unrecognized_keys"] or [m for m in report["missing"] if m["topic"] == topic]:
            r.problems.append(f"reconcile: {len(mine)} orphans, {len(report['missing'])} missing, unrecognized "
                              f"keys {report['unrecognized_keys'][:3]}")
        if r.other_errors_seen:
            r.problems.append(f"remote reads answered {sorted(set(r.other_errors_seen))}, not only "
                              f"KAFKA_STORAGE_ERROR")
        r.seconds = time.monotonic() - began
        return r


def format_table(rows: list[CaseResult]) -> str:
    head = ("fault", "acknowledged", "read back", "remote gaps", "overlaps", "fault hits", "storage errors",
            "peak RSS MiB", "seconds", "verdict")
    lines = [head] + [(r.fault, r.acknowledged, r.read_back, r.remote_gaps, r.overlaps, r.fault_hits,
                       r.storage_errors_seen, f"{r.peak_rss_mib:.0f}", f"{r.seconds:.0f}",
                       "ok" if r.ok else "; ".join(r.problems)) for r in rows]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    return "\n".join(" | ".join(str(v).ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines)
