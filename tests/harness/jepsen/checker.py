"""The checker: read every partition back from the beginning once the cluster has settled, and hold it against
the history.

What counts as a violation (each one is listed with its partition, offset and value, and the cycle that was
under way when the client was told):

- lost: a value acknowledged (partition, offset) that no partition holds;
- duplicated: a value the log holds more than once, under one producer epoch (or where the batches could not be
  read); a value held twice under two epochs of one producer id is listed apart as re-sent and not counted: the
  client bumped its epoch (KIP-360; librdkafka does after an OUT_OF_ORDER_SEQUENCE_NUMBER on any partition) and
  sent again a batch the broker had written, which idempotence, kept per producer id and epoch, cannot recognise
  (Kafka shows the same, docs/operations.md); the re-sent copy is then left out of the order checks;
- offset mismatch: an acknowledged value read at another partition or offset than the acknowledgement said
  (an acknowledgement without an offset is listed apart and checked for loss and duplication only: librdkafka
  acknowledges "implicitly", with no offset, messages whose request failed once a later batch of the same
  producer succeeded, and so it delivers a DUPLICATE_SEQUENCE_NUMBER answer);
- reordered: two values of one producer in one partition whose acknowledged offsets are not in the order of
  their numbers, or that the log holds out of that order;
- committed offset regression: the group's committed offset of a partition, read back by a fresh consumer,
  below the highest the broker confirmed during the run; or one confirmed commit below an earlier one;
- divergent: an offset at which two consumers (``History.reads``, the plain readers of the run, and the final
  read) saw different values, or a value a consumer read at an offset the final log does not reach (a read of
  records that were later truncated: they had been exposed above the high watermark);
- consumer reorder: a consumer that read one producer's values of one partition out of their numbers' order;
- transaction anomalies (every read here is read_committed): a value of an aborted transaction read, by a
  reader or the final read; a committed transaction not wholly in the final read (partly visible, or lost);
  a transaction whose outcome the client could not learn partly visible (it must be all or nothing); a value
  read before its transaction began to commit.

Values whose delivery failed are indeterminate: the log may hold them or not, never twice and never out of
order. The read goes up to each partition's high watermark, through a confluent-kafka consumer.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import NamedTuple

from tests.harness.jepsen.workload import TXN_PREFIX, Ack, History, parse_value
from tests.harness.waiting import TimedOut, wait_until

EXAMPLES = 10


class ReadIncomplete(Exception):
    """Some partitions could not be read up to their high watermark within the deadline."""


def read_back(bootstrap: str, topic: str, partitions: int, timeout: float = 120):
    """Every record of every partition up to its high watermark, read_committed (librdkafka's default):
    ([(partition, offset, value)], {p: hw})."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
    # not wait_until: one time budget for every step of the read (ReadIncomplete, not a failure, when it runs out)
    deadline = time.monotonic() + timeout
    settings = {"bootstrap.servers": bootstrap, "group.id": f"jepsen-reader-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False, "enable.partition.eof": True,
                "auto.offset.reset": "earliest", "socket.connection.setup.timeout.ms": 5000}
    consumer = Consumer(settings)
    # The end of each partition is its high watermark, asked read_uncommitted: a read_committed consumer's
    # watermark query answers the last stable offset, which stops short of a transaction whose markers are
    # still being written (its records would be missed, not waited for).
    ends = Consumer({**settings, "isolation.level": "read_uncommitted"})
    try:
        highs: dict[int, int] = {}
        for p in range(partitions):
            while p not in highs:
                try:
                    highs[p] = ends.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise ReadIncomplete(f"no high watermark for partition {p} within {timeout} s") from None
        records: list[tuple[int, int, bytes]] = []
        done = {p for p, h in highs.items() if h <= 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions) if p not in done])
        while len(done) < partitions:
            if time.monotonic() > deadline:
                missing = {p: highs[p] for p in range(partitions) if p not in done}
                raise ReadIncomplete(f"partitions not read up to their high watermark within {timeout} s: {missing}")
            for m in consumer.consume(1000, 1.0):
                err = m.error()
                if err is not None:
                    # read_committed skips transaction markers, which may be a partition's last offsets: the end
                    # of the partition (at the high watermark once no transaction is open) is the sign
                    if err.code() == KafkaError._PARTITION_EOF and m.offset() >= highs.get(m.partition(), 0):
                        done.add(m.partition())
                    continue  # otherwise retriable; the consumer goes on by itself
                records.append((m.partition(), m.offset(), m.value()))
                if m.offset() + 1 >= highs[m.partition()]:
                    done.add(m.partition())
        return records, highs
    finally:
        consumer.close()
        ends.close()


class BatchProducer(NamedTuple):
    """The producer id, epoch and sequence a record was written under (its batch's header)."""

    pid: int
    epoch: int
    seq: int

    def __str__(self) -> str:
        return f"pid {self.pid} epoch {self.epoch} seq {self.seq}"


def batch_producers(bootstrap: str, topic: str, wanted: dict[int, set[int]], timeout: float = 60
                    ) -> dict[tuple[int, int], BatchProducer]:
    """(partition, offset) -> :class:`BatchProducer` of the batches holding the ``wanted`` offsets, read with
    raw Fetches from each partition's leader: a duplicate written twice under one producer epoch and sequence
    is the broker's failure to deduplicate, one under two epochs a re-send by the client after an epoch bump."""
    from tests.harness.rawclient import RawClient, metadata
    from tierlog.protocol import ApiKey
    from tierlog.records.batch import iter_batches
    # not wait_until: one time budget for the reads of every partition (what is found by then is the answer)
    deadline = time.monotonic() + timeout
    md = metadata(bootstrap, [topic])
    hosts = {b.node_id: f"{b.host}:{b.port}" for b in md.brokers}
    leaders = {p.partition_index: p.leader_id for p in md.topics[0].partitions}
    found: dict[tuple[int, int], BatchProducer] = {}
    for partition, offsets in wanted.items():
        if partition not in leaders or leaders[partition] not in hosts or not offsets:
            continue
        raw = RawClient(hosts[leaders[partition]], timeout=10)
        try:
            position, last = min(offsets), max(offsets)
            while position <= last and time.monotonic() < deadline:
                resp = raw.request(ApiKey.FETCH, 12, {
                    "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 4 << 20, "isolation_level": 0,
                    "session_id": 0, "session_epoch": -1, "topics": [{"topic": topic, "partitions": [{
                        "partition": partition, "current_leader_epoch": -1, "fetch_offset": position,
                        "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 4 << 20}]}],
                    "forgotten_topics_data": [], "rack_id": ""})
                records = resp.responses[0].partitions[0].records or b""
                moved = False
                for _, h in iter_batches(records):
                    for o in range(max(h.base_offset, position), h.last_offset + 1):
                        if o in offsets:
                            found[(partition, o)] = BatchProducer(h.producer_id, h.producer_epoch,
                                                                  h.base_sequence + o - h.base_offset)
                    if h.last_offset + 1 > position:
                        position, moved = h.last_offset + 1, True
                if not moved:
                    break
        except Exception:  # noqa: BLE001 - forensics only: what could not be read is left out
            pass
        finally:
            raw.close()
    return found


def committed_offsets(bootstrap: str, topic: str, group: str, partitions: int, timeout: float = 60) -> dict[int, int]:
    """The group's committed offset of each partition (negative when none), as a fresh consumer reads it."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})

    def committed():
        answer = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        # (in a list: the answer for no partitions is an answer too)
        return [{tp.partition: tp.offset for tp in answer}] if all(tp.error is None for tp in answer) else None

    try:
        return wait_until(committed, timeout, interval=0, ignore=(KafkaException,), what="committed offsets")[0]
    except TimedOut:
        raise ReadIncomplete(f"committed offsets of group {group} not readable within {timeout} s") from None
    finally:
        consumer.close()


@dataclass
class Cycle:
    """One nemesis cycle: its faults, and when they began, were healed and the cluster settled again."""

    index: int
    faults: list[str]  # "kind target"
    kinds: list[str]
    started: float
    healed: float | None = None
    settled: float | None = None
    acks_after_heal: dict[int, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"cycle {self.index} ({' + '.join(self.faults)})"


def where(cycles: list[Cycle], at: float) -> str:
    """Which cycle, and which part of it, a moment of the run falls in."""
    for c in reversed(cycles):
        if at >= c.started:
            if c.healed is None or at < c.healed:
                return f"{c.label}, fault active"
            if c.settled is None or at < c.settled:
                return f"{c.label}, healing"
            return f"after {c.label}"
    return "before the first fault"


@dataclass
class Report:
    seed: int
    cycles: list[Cycle]
    history: History
    read: int = 0
    high_watermarks: dict[int, int] = field(default_factory=dict)
    indeterminate_read: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    resent: list[str] = field(default_factory=list)
    mismatched: list[str] = field(default_factory=list)
    reordered: list[str] = field(default_factory=list)
    offset_regressions: list[str] = field(default_factory=list)
    divergent: list[str] = field(default_factory=list)
    txn_anomalies: list[str] = field(default_factory=list)
    offsetless: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    liveness: list[str] = field(default_factory=list)
    leaderless: dict[int, tuple[float, float]] = field(default_factory=dict)
    committed: dict[int, int] = field(default_factory=dict)
    skipped_kinds: dict[str, str] = field(default_factory=dict)
    lost_by_partition: Counter = field(default_factory=Counter)
    elapsed: float = 0.0

    @property
    def violations(self) -> int:
        return (len(self.lost) + len(self.duplicated) + len(self.mismatched) + len(self.reordered)
                + len(self.offset_regressions) + len(self.divergent) + len(self.txn_anomalies)
                + len(self.incomplete))

    @property
    def ok(self) -> bool:
        return self.violations == 0 and not self.liveness

    def faults_by_kind(self) -> Counter:
        return Counter(k for c in self.cycles for k in c.kinds)

    def format(self) -> str:
        h = self.history
        lines = [f"seed {self.seed}: {len(self.cycles)} cycles in {self.elapsed:.0f} s "
                 f"({sum(len(c.faults) > 1 for c in self.cycles)} mixed)"]
        kinds = self.faults_by_kind()
        lines.append("faults by kind: " + (", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "none"))
        for kind, why in self.skipped_kinds.items():
            lines.append(f"  skipped {kind}: {why}")
        lines.append(f"writes: {h.attempted} sent, {len(h.acks)} acknowledged, "
                     f"{sum(h.delivery_errors.values())} failed (indeterminate), {self.read} read back "
                     f"({self.indeterminate_read} of them not acknowledged)")
        if h.delivery_errors:
            lines.append("  delivery errors: " + ", ".join(f"{k} {n}" for k, n in h.delivery_errors.most_common()))
        if self.offsetless:
            lines.append(f"  acknowledged without an offset: {len(self.offsetless)}, first: "
                         + "; ".join(self.offsetless[:3]))
        if h.fatal_errors:
            first = [f"{n} at {t:.1f}s ({where(self.cycles, t)}): {e}" for t, n, e in h.fatal_errors[:3]]
            lines.append(f"  fatal producer errors: {len(h.fatal_errors)}, first: " + "; ".join(first))
        if h.txns:
            outcomes = Counter(t.outcome for t in h.txns)
            lines.append("transactions: " + ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items())))
        lines.append(f"group commits: {len(h.commits)} confirmed, {sum(h.commit_errors.values())} failed"
                     + (" (" + ", ".join(f"{k} {n}" for k, n in h.commit_errors.most_common()) + ")"
                        if h.commit_errors else ""))
        if self.leaderless:
            worst = max(self.leaderless.items(), key=lambda kv: kv[1][0])
            lines.append(f"longest window without a leader: {worst[1][0]:.1f} s (partition {worst[0]}, from "
                         f"{worst[1][1]:.1f}s, {where(self.cycles, worst[1][1])}); per partition: "
                         + ", ".join(f"{p}: {w:.1f}s" for p, (w, _) in sorted(self.leaderless.items())))
        if self.resent:
            lines.append(f"re-sent by the client under a new producer epoch (not counted): {len(self.resent)}, "
                         "first: " + "; ".join(self.resent[:3]))
        for title, items in (("lost", self.lost), ("duplicated", self.duplicated), ("reordered", self.reordered),
                             ("offset mismatches", self.mismatched),
                             ("committed offset regressions", self.offset_regressions),
                             ("divergent reads", self.divergent),
                             ("transaction anomalies", self.txn_anomalies),
                             ("read incomplete", self.incomplete), ("liveness", self.liveness)):
            extra = ""
            if title == "lost" and self.lost_by_partition:
                extra = " (per partition: " + ", ".join(
                    f"{p}: {n}" for p, n in sorted(self.lost_by_partition.items())) + ")"
            lines.append(f"{title}: {len(items)}{extra}")
            for item in items[:EXAMPLES]:
                lines.append(f"  {item}")
            if len(items) > EXAMPLES:
                lines.append(f"  ... and {len(items) - EXAMPLES} more")
        lines.append("RESULT: " + ("OK" if self.ok else f"FAILED ({self.violations} violation(s), "
                                                          f"{len(self.liveness)} liveness problem(s))"))
        return "\n".join(lines)


def check(report: Report, records: list[tuple[int, int, bytes]], highs: dict[int, int],
          committed: dict[int, int], producers_of=None) -> Report:
    """Fill ``report`` with what ``records`` (read back) and ``committed`` say against its history;
    ``producers_of(wanted)``, when given, names the producer id, epoch and sequence of the batches holding
    duplicated values (:func:`batch_producers`)."""
    h, cycles = report.history, report.cycles
    report.read, report.high_watermarks, report.committed = len(records), highs, committed
    at_offset = {(p, o): v for p, o, v in records}
    read_at: dict[bytes, list[tuple[int, int]]] = defaultdict(list)
    for p, o, v in records:
        read_at[v].append((p, o))
    acked: dict[bytes, Ack] = {a.value: a for a in h.acks}
    report.indeterminate_read = sum(1 for v in read_at if v not in acked and not v.startswith(TXN_PREFIX))

    for a in sorted(h.acks, key=lambda a: a.at):
        places = read_at.get(a.value)
        if not places:
            now_there = at_offset.get((a.partition, a.offset))
            holds = "nothing" if now_there is None else (f"{now_there.decode(errors='replace')} "
                                                         f"({'' if now_there in acked else 'not '}acknowledged)")
            report.lost_by_partition[a.partition] += 1
            report.lost.append(f"{a.value.decode()} acknowledged at partition {a.partition} offset {a.offset} at "
                               f"{a.at:.1f}s ({where(cycles, a.at)}); that offset now holds {holds} "
                               f"(high watermark {highs.get(a.partition)})")
        elif a.offset < 0:
            report.offsetless.append(f"{a.value.decode()} at partition {a.partition} at {a.at:.1f}s "
                                     f"({where(cycles, a.at)}), read at {places}")
        elif (a.partition, a.offset) not in places:
            report.mismatched.append(f"{a.value.decode()} acknowledged at partition {a.partition} offset {a.offset} "
                                     f"at {a.at:.1f}s ({where(cycles, a.at)}), read at {places}")
    doubled = {v: sorted(places) for v, places in read_at.items() if len(places) > 1}
    wanted: dict[int, set[int]] = defaultdict(set)
    for places in list(doubled.values())[:200]:
        for p, o in places:
            wanted[p].add(o)
    batches = producers_of(wanted) if producers_of and wanted else {}
    resent_copies: set[tuple[int, int]] = set()  # the later copies of re-sent values
    for v, places in doubled.items():
        a = acked.get(v)
        where_read = ", ".join(f"{p}/{o}" + (f" ({batches[(p, o)]})" if (p, o) in batches else "")
                               for p, o in places)
        line = (f"{v.decode(errors='replace')} read {len(places)} times at {where_read}"
                + (f"; acknowledged at {a.partition}/{a.offset} at {a.at:.1f}s ({where(cycles, a.at)})" if a
                   else "; never acknowledged"))
        if _across_epochs([batches.get(place) for place in places]):
            report.resent.append(line)
            resent_copies.update(places[1:])
        else:
            report.duplicated.append(line)

    # Order: acknowledged offsets follow the numbers, per producer and partition...
    by_stream: dict[tuple[str, int], list[Ack]] = defaultdict(list)
    for a in h.acks:
        if a.offset >= 0:
            by_stream[(a.producer, a.partition)].append(a)
    for (producer, p), acks in sorted(by_stream.items()):
        acks.sort(key=lambda a: a.seq)
        for x, y in zip(acks, acks[1:]):
            if y.offset <= x.offset:
                report.reordered.append(f"{producer} partition {p}: acknowledged seq {x.seq} at offset {x.offset} "
                                        f"but seq {y.seq} at offset {y.offset} ({where(cycles, y.at)})")
    # ...and so does the log itself.
    last: dict[tuple[str, int], tuple[int, int]] = {}
    for p, o, v in sorted(records):
        parsed = parse_value(v)
        if parsed is None:
            continue
        producer, seq = parsed
        if (p, o) in resent_copies:
            continue
        prev = last.get((producer, p))
        if prev is not None and seq <= prev[0]:
            report.reordered.append(f"{producer} partition {p}: the log holds seq {prev[0]} at offset {prev[1]} "
                                    f"before seq {seq} at offset {o}")
        last[(producer, p)] = (seq, o)

    # Committed offsets never go back.
    highest: dict[int, tuple[int, float, str]] = {}
    for c in sorted(h.commits, key=lambda c: c.at):
        for p, off in c.offsets.items():
            prev = highest.get(p)
            if prev is not None and off < prev[0]:
                report.offset_regressions.append(
                    f"partition {p}: {c.member} had commit {off} confirmed at {c.at:.1f}s ({where(cycles, c.at)}) "
                    f"after {prev[2]} had {prev[0]} confirmed at {prev[1]:.1f}s ({where(cycles, prev[1])})")
            if prev is None or off > prev[0]:
                highest[p] = (off, c.at, c.member)
    for p, (off, at, _) in sorted(highest.items()):
        final = committed.get(p, -1)
        if final < off:
            report.offset_regressions.append(
                f"partition {p}: committed offset read back is {final}, but {off} was confirmed at {at:.1f}s "
                f"({where(cycles, at)})")
    check_reads(report, h.reads, at_offset, highs, resent_copies)
    check_transactions(report, set(read_at))
    return report


def _across_epochs(batches: list[BatchProducer | None]) -> bool:
    """Whether copies in batches (:func:`batch_producers`) are one producer id's under different epochs: a
    client's re-send after its epoch bump, not a broker's failure to deduplicate."""
    if any(b is None for b in batches):
        return False
    return len({b.pid for b in batches}) == 1 and len({b.epoch for b in batches}) == len(batches)


def check_reads(report: Report, reads: dict[str, list[tuple[int, int, bytes]]],
                final: dict[tuple[int, int], bytes], highs: dict[int, int],
                resent_copies: set[tuple[int, int]] = frozenset()) -> None:
    """The consumers' views: every (partition, offset) read by two of them (the final read ``final`` among them)
    holds one value, every offset a consumer read is still in the final log, and each consumer read each
    producer's values of a partition in the order of their numbers."""
    seen: dict[tuple[int, int], tuple[bytes, str]] = {k: (v, "the final read") for k, v in final.items()}
    for reader, records in sorted(reads.items()):
        order: dict[tuple[str, int], tuple[int, int]] = {}
        for p, o, v in records:
            first = seen.get((p, o))
            if first is None:
                if o >= highs.get(p, 0):
                    report.divergent.append(f"{reader} read {v.decode(errors='replace')} at partition {p} offset {o}, "
                                            f"which the final log does not reach (high watermark {highs.get(p)})")
                    continue
                seen[(p, o)] = (v, reader)
            elif first[0] != v:
                report.divergent.append(f"partition {p} offset {o}: {reader} read {v.decode(errors='replace')}, "
                                        f"{first[1]} {first[0].decode(errors='replace')}")
            parsed = parse_value(v)
            if parsed is None or (p, o) in resent_copies:
                continue
            prev = order.get((parsed[0], p))
            if prev is not None and parsed[1] <= prev[0] and o > prev[1]:
                report.reordered.append(f"{reader} read {parsed[0]} partition {p} seq {parsed[1]} at offset {o} "
                                        f"after seq {prev[0]} at offset {prev[1]}")
            order[(parsed[0], p)] = (parsed[1], o)


def check_transactions(report: Report, final: set[bytes]) -> None:
    """Each transaction against what read_committed consumers saw: ``final`` holds the values of the final read,
    ``History.txn_first_read`` when a reader first saw each transactional value."""
    h, cycles = report.history, report.cycles
    for t in h.txns:
        values = [v for _, v in t.values]
        visible = [v for v in values if v in final]
        seen = {v: h.txn_first_read[v] for v in values if v in h.txn_first_read}
        label = f"transaction {t.id} ({t.outcome}, began {t.began:.1f}s, {where(cycles, t.began)})"
        if t.outcome == "aborted" and (visible or seen):
            who = ", ".join(sorted({r for _, r in seen.values()} | ({"the final read"} if visible else set())))
            report.txn_anomalies.append(f"{label}: aborted, yet read by {who}")
        elif t.outcome == "committed" and len(visible) < len(values):
            report.txn_anomalies.append(f"{label}: committed, {len(visible)} of {len(values)} values in the "
                                        f"final read")
        elif t.outcome in ("unknown", "pending") and 0 < len(visible) < len(values):
            report.txn_anomalies.append(f"{label}: outcome unknown to the client, {len(visible)} of {len(values)} "
                                        f"values in the final read")
        for v, (at, reader) in sorted(seen.items()):
            # (an aborted one read is reported above)
            if (t.committing is None or at < t.committing) and t.outcome != "aborted":
                report.txn_anomalies.append(
                    f"{label}: {reader} read {v.decode(errors='replace')} at {at:.1f}s, before its commit "
                    f"began" + (f" at {t.committing:.1f}s" if t.committing is not None else ""))
