"""An asyncio share consumer (KIP-932, Kafka's ``KafkaShareConsumer``): members of a share group read the
records of the topics they subscribe to together, each record delivered to one member at a time, and
acknowledge each one (ACCEPT, RELEASE, REJECT).

::

    async with ShareConsumer("orders", bootstrap_servers="localhost:9092") as consumer:
        consumer.subscribe(["orders"])
        while True:
            for record in await consumer.poll(timeout_ms=1000):
                handle(record)          # implicit mode: accepted at the next poll or commit

How it works, as Kafka's client does:

- Membership: FindCoordinator (key type 0) finds the group coordinator; ShareGroupHeartbeat (epoch 0 to join
  with the subscription, then every ``heartbeat_interval_ms`` the broker gave, -1 to leave) hands out the
  assigned partitions by topic id.
- Fetching: one share session per partition leader. ShareFetch (session epoch 0 first, then 1, 2, ...)
  names the assigned partitions (new ones added, dropped ones forgotten) and carries the acknowledgements
  made since the last request; the answer holds whole batches and the ranges of offsets acquired for this
  member with their delivery counts. Only acquired records are returned by :meth:`poll`; offsets of an
  acquired range with no record (a transaction marker, a compacted gap) are acknowledged as GAP.
- Acknowledging: ``acknowledgement_mode="implicit"`` (Kafka's default) accepts every record of a poll at the
  next poll or commit; ``"explicit"`` needs :meth:`acknowledge` for every record before the next poll.
  :meth:`commit_sync` sends the acknowledgements at once with ShareAcknowledge and waits for the answers;
  :meth:`commit_async` does so in the background. :meth:`close` sends what is left, closes the share sessions
  (their acquired records go back to the group) and leaves the group.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from tierlog import errors
from tierlog.client.cluster import Node
from tierlog.client.errors import IllegalStateError
from tierlog.client.network import KafkaClient
from tierlog.config.client import validate_client_config
from tierlog.protocol import ApiKey
from tierlog.records.batch import iter_batches
from tierlog.records.record import decode_batch

log = logging.getLogger("tierlog.client.share_consumer")

__all__ = ["AcknowledgeType", "ShareConsumer", "ShareConsumerRecord"]

ACCEPT, RELEASE, REJECT, GAP = "ACCEPT", "RELEASE", "REJECT", "GAP"
_TYPE_IDS = {GAP: 0, ACCEPT: 1, RELEASE: 2, REJECT: 3}
_CONTROL = 0x20
_SESSION_ERRORS = (errors.ShareSessionNotFoundError.code, errors.InvalidShareSessionEpochError.code)


class AcknowledgeType:
    """Kafka's AcknowledgeType names."""

    ACCEPT = ACCEPT
    RELEASE = RELEASE
    REJECT = REJECT


class ShareConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple
    delivery_count: int


class _Session:
    """A share session with one partition leader."""

    def __init__(self) -> None:
        self.epoch = 0
        self.partitions: set[tuple[uuid.UUID, int]] = set()


class ShareConsumer:
    def __init__(self, group_id: str, *, bootstrap_servers: str | list[str],
                 key_deserializer: Callable[[bytes], Any] | None = None,
                 value_deserializer: Callable[[bytes], Any] | None = None,
                 acknowledgement_mode: str = "implicit", max_poll_records: int = 500, **props: Any):
        if acknowledgement_mode not in ("implicit", "explicit"):
            raise ValueError(
                f"Invalid value {acknowledgement_mode} for configuration share.acknowledgement.mode: "
                "String must be one of (case insensitive): IMPLICIT, EXPLICIT")
        self.group_id = group_id
        self.member_id = str(uuid.uuid4())
        self.member_epoch = 0
        self.explicit = acknowledgement_mode == "explicit"
        self.max_poll_records = max_poll_records
        self.key_deserializer, self.value_deserializer = key_deserializer, value_deserializer
        self.config = validate_client_config("consumer", {"bootstrap.servers": bootstrap_servers, **props})
        self.client = KafkaClient(self.config, "share-consumer")
        self.subscription: list[str] = []
        self.assignment: set[tuple[uuid.UUID, int]] = set()
        self._assigned = asyncio.Event()
        self._coordinator: Node | None = None
        self._heartbeat_task: asyncio.Task | None = None
        self._interval = 5.0
        self._subscription_sent = False
        self._sessions: dict[int, _Session] = {}
        self._pending: dict[tuple[uuid.UUID, int], dict[int, str]] = {}  # acknowledgements to send
        self._delivered: dict[tuple[uuid.UUID, int, int], ShareConsumerRecord] = {}  # not yet acknowledged
        self._background: set[asyncio.Task] = set()
        self._closed = False

    async def __aenter__(self) -> ShareConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def start(self) -> None:
        self.client.start()

    def subscribe(self, topics: Iterable[str]) -> None:
        self.subscription = sorted(set(topics))
        self.client.add_topics(self.subscription)
        self._subscription_sent = False
        if self._heartbeat_task is None:
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    # ------------------------------------------------------------------ membership

    async def _find_coordinator(self) -> Node:
        while self._coordinator is None:
            r = await self.client.send_any(ApiKey.FIND_COORDINATOR, {"key": self.group_id, "key_type": 0,
                                                                     "coordinator_keys": [self.group_id]})
            c = r.coordinators[0] if getattr(r, "coordinators", None) else r
            if int(c.error_code) == 0:
                self._coordinator = Node(2**31 - 1 - int(c.node_id), c.host, int(c.port))
            else:
                await asyncio.sleep(0.1)
        return self._coordinator

    async def _heartbeat(self, leaving: bool = False) -> None:
        node = await self._find_coordinator()
        r = await self.client.send(node, ApiKey.SHARE_GROUP_HEARTBEAT, {
            "group_id": self.group_id, "member_id": self.member_id,
            "member_epoch": -1 if leaving else self.member_epoch, "rack_id": None,
            "subscribed_topic_names": None if self._subscription_sent and self.member_epoch > 0
            else list(self.subscription)})
        code = int(r.error_code)
        if leaving:
            return
        if code in (errors.UnknownMemberIdError.code, errors.FencedMemberEpochError.code):
            self.member_epoch = 0  # rejoin with the subscription
            self._subscription_sent = False
            return
        if code in (errors.NotCoordinatorError.code, errors.CoordinatorNotAvailableError.code):
            self._coordinator = None
            return
        if code:
            raise errors.error_for_code(code)(r.error_message or "")
        self.member_epoch = r.member_epoch
        self._subscription_sent = True
        self._interval = max(r.heartbeat_interval.total_seconds(), 0.1)
        if r.assignment is not None:
            self.assignment = {(tp.topic_id, int(p)) for tp in r.assignment.topic_partitions for p in tp.partitions}
            self._assigned.set()

    async def _heartbeat_loop(self) -> None:
        while not self._closed:
            try:
                await self._heartbeat()
            except (errors.KafkaError, OSError) as e:
                log.debug("Share group heartbeat of %s failed: %s", self.group_id, e)
                self._coordinator = None
            await asyncio.sleep(self._interval if self.member_epoch > 0 else 0.1)

    # ------------------------------------------------------------------ poll

    async def poll(self, timeout_ms: int = 1000) -> list[ShareConsumerRecord]:
        """The records acquired for this member, at most ``max_poll_records`` (whole batches may exceed it).
        In implicit mode the records of the previous poll are accepted first."""
        if self._closed:
            raise IllegalStateError("This share consumer has been closed.")
        if not self.subscription:
            raise IllegalStateError("Consumer is not subscribed to any topics.")
        self._implicit_accept()
        if self.explicit and self._delivered:
            raise IllegalStateError("All records must be acknowledged in explicit acknowledgement mode.")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._assigned.wait(), timeout_ms / 1000)
        if not self.assignment:
            return []
        names = {t.topic_id: name for name, t in self.client.cluster.topics.items()}
        if any(tid not in names for tid, _ in self.assignment):
            await self.client.update_metadata()
            names = {t.topic_id: name for name, t in self.client.cluster.topics.items()}
        by_leader: dict[int, list[tuple[uuid.UUID, int]]] = {}
        for tid, p in sorted(self.assignment):
            leader = self.client.cluster.leader_for(names.get(tid, ""), p)
            if leader is not None:
                by_leader.setdefault(leader.node_id, []).append((tid, p))
        for node_id in set(self._sessions) | set(by_leader):  # partitions acknowledged at a leader not fetched
            by_leader.setdefault(node_id, [])
        results = await asyncio.gather(*(self._share_fetch(node_id, parts, names, timeout_ms)
                                         for node_id, parts in by_leader.items()), return_exceptions=True)
        out: list[ShareConsumerRecord] = []
        for r in results:
            if isinstance(r, BaseException):
                log.debug("ShareFetch failed: %s", r)
                continue
            out.extend(r)
        return out

    def _implicit_accept(self) -> None:
        if not self.explicit:
            for record in list(self._delivered.values()):
                self.acknowledge(record, ACCEPT)

    def _take_acks(self, parts: Iterable[tuple[uuid.UUID, int]]) -> dict[tuple[uuid.UUID, int], list[dict]]:
        out = {}
        for key in parts:
            acks = self._pending.pop(key, None)
            if acks:
                out[key] = _batches(acks)
        return out

    async def _share_fetch(self, node_id: int, parts: list[tuple[uuid.UUID, int]], names: dict,
                           timeout_ms: int) -> list[ShareConsumerRecord]:
        node = self.client.node(node_id)
        session = self._sessions.setdefault(node_id, _Session())
        wanted = set(parts)
        acked_here = [k for k in self._pending if k in session.partitions or k in wanted]
        acks = self._take_acks(acked_here) if session.epoch else {}
        topics: dict[uuid.UUID, list[dict]] = {}
        send = wanted if session.epoch == 0 else (wanted - session.partitions) | set(acks)
        for tid, p in sorted(send):
            topics.setdefault(tid, []).append({"partition_index": p,
                                               "acknowledgement_batches": acks.get((tid, p), [])})
        forgotten: dict[uuid.UUID, list[int]] = {}
        if session.epoch:
            for tid, p in session.partitions - wanted:
                forgotten.setdefault(tid, []).append(p)
        if not wanted and not acks:
            return []
        r = await self.client.send(node, ApiKey.SHARE_FETCH, {
            "group_id": self.group_id, "member_id": self.member_id, "share_session_epoch": session.epoch,
            "max_wait_ms": timeout_ms, "min_bytes": 1, "max_bytes": self.config["fetch.max.bytes"],
            "max_records": self.max_poll_records, "batch_size": self.max_poll_records,
            "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [{"topic_id": t, "partitions": ps} for t, ps in forgotten.items()]},
            timeout_ms=self.config["request.timeout.ms"] + timeout_ms)
        code = int(r.error_code)
        if code:
            if code in _SESSION_ERRORS:
                session.epoch, session.partitions = 0, set()
            raise errors.error_for_code(code)(r.error_message or "")
        session.epoch = 1 if session.epoch >= 0x7FFFFFFF else session.epoch + 1
        session.partitions = wanted
        out: list[ShareConsumerRecord] = []
        for t in r.responses:
            name = names.get(t.topic_id)
            for p in t.partitions:
                if int(p.acknowledge_error_code):
                    log.warning("Acknowledgement of %s-%d failed: %s", name, p.partition_index,
                                errors.error_for_code(int(p.acknowledge_error_code)).name)
                if int(p.error_code) or not p.acquired_records or name is None:
                    continue
                out.extend(self._records(name, t.topic_id, p.partition_index, p.records or b"", p.acquired_records))
        return out

    def _records(self, topic: str, topic_id: uuid.UUID, partition: int, data: bytes, acquired) -> list:
        counts: dict[int, int] = {}
        for a in acquired:
            for off in range(a.first_offset, a.last_offset + 1):
                counts[off] = a.delivery_count
        out = []
        view = memoryview(data)
        for pos, header in iter_batches(view):
            if header.attributes & _CONTROL:
                continue
            _, records = decode_batch(view, pos)
            for rec in records:
                count = counts.pop(rec.offset, None)
                if count is None:
                    continue
                record = ShareConsumerRecord(
                    topic, partition, rec.offset, rec.timestamp,
                    self.key_deserializer(rec.key) if self.key_deserializer and rec.key is not None else rec.key,
                    self.value_deserializer(rec.value) if self.value_deserializer and rec.value is not None
                    else rec.value, tuple(rec.headers), count)  # headers: (key, value) tuples
                self._delivered[(topic_id, partition, rec.offset)] = record
                out.append(record)
        gaps = self._pending.setdefault((topic_id, partition), {})
        for off in counts:  # acquired offsets with no record: a marker or a gap
            gaps[off] = GAP
        return out

    # ------------------------------------------------------------------ acknowledge and commit

    def acknowledge(self, record: ShareConsumerRecord, type: str = ACCEPT) -> None:  # noqa: A002 - Kafka's name
        if type not in _TYPE_IDS or type == GAP:
            raise ValueError(f"unknown acknowledge type {type!r}")
        tid = self.client.cluster.topics[record.topic].topic_id
        if self._delivered.pop((tid, record.partition, record.offset), None) is None:
            raise IllegalStateError(f"The record {record.topic}-{record.partition}@{record.offset} cannot be "
                                    "acknowledged: it was not delivered by the last poll or was acknowledged already.")
        self._pending.setdefault((tid, record.partition), {})[record.offset] = type

    async def commit_sync(self) -> dict[tuple[str, int], Exception | None]:
        """Send every acknowledgement now (ShareAcknowledge to each leader) and wait; per partition, None or the
        error its acknowledgement got."""
        self._implicit_accept()
        names = {t.topic_id: name for name, t in self.client.cluster.topics.items()}
        out: dict[tuple[str, int], Exception | None] = {}
        for node_id, session in list(self._sessions.items()):
            if not session.epoch:
                continue
            acks = self._take_acks([k for k in list(self._pending) if k in session.partitions])
            if acks:
                out.update(await self._share_acknowledge(node_id, session, acks, names))
        return out

    def commit_async(self) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(self.commit_sync())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    async def _share_acknowledge(self, node_id: int, session: _Session, acks: dict, names: dict,
                                 final: bool = False) -> dict:
        topics: dict[uuid.UUID, list[dict]] = {}
        for (tid, p), batches in acks.items():
            topics.setdefault(tid, []).append({"partition_index": p, "acknowledgement_batches": batches})
        r = await self.client.send(self.client.node(node_id), ApiKey.SHARE_ACKNOWLEDGE, {
            "group_id": self.group_id, "member_id": self.member_id,
            "share_session_epoch": -1 if final else session.epoch,
            "topics": [{"topic_id": t, "partitions": ps} for t, ps in topics.items()]})
        code = int(r.error_code)
        if code:
            if code in _SESSION_ERRORS:
                session.epoch, session.partitions = 0, set()
            raise errors.error_for_code(code)(r.error_message or "")
        if not final:
            session.epoch = 1 if session.epoch >= 0x7FFFFFFF else session.epoch + 1
        out = {}
        for t in r.responses:
            for p in t.partitions:
                err = int(p.error_code)
                out[(names.get(t.topic_id, ""), p.partition_index)] = \
                    errors.error_for_code(err)(p.error_message or "") if err else None
        return out

    async def close(self) -> None:
        """Acknowledge what is pending (implicit mode: accept), close the share sessions (records still
        acquired go back to the group) and leave the group."""
        if self._closed:
            return
        self._implicit_accept()
        names = {t.topic_id: name for name, t in self.client.cluster.topics.items()}
        for node_id, session in list(self._sessions.items()):
            if not session.epoch:
                continue
            acks = self._take_acks([k for k in list(self._pending) if k in session.partitions])
            with contextlib.suppress(errors.KafkaError, OSError):
                await self._share_acknowledge(node_id, session, acks, names, final=True)
        self._closed = True
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, errors.KafkaError, OSError):
                await self._heartbeat_task
            with contextlib.suppress(errors.KafkaError, OSError):
                await self._heartbeat(leaving=True)
        for task in list(self._background):
            with contextlib.suppress(Exception):
                await task
        await self.client.close()


def _batches(acks: dict[int, str]) -> list[dict]:
    """Consecutive offsets with the same type as one acknowledgement batch."""
    out: list[dict] = []
    for off in sorted(acks):
        type_id = _TYPE_IDS[acks[off]]
        if out and out[-1]["last_offset"] == off - 1 and out[-1]["acknowledge_types"] == [type_id]:
            out[-1]["last_offset"] = off
        else:
            out.append({"first_offset": off, "last_offset": off, "acknowledge_types": [type_id]})
    return out
