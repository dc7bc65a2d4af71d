"""tierlog's asyncio consumer, with the Java KafkaConsumer's semantics.

::

    async with Consumer(bootstrap_servers="127.0.0.1:9092", group_id="g",
                        value_deserializer=bytes.decode) as consumer:
        consumer.subscribe(["events"])
        while True:
            for tp, records in (await consumer.poll(timeout_ms=1000)).items():
                ...
            await consumer.commit()            # or enable.auto.commit (the default with a group.id)

Partitions come either from the group (``subscribe`` to topics or a regex pattern) or from the
application (``assign``). A partition without a position starts at its committed offset, else
where ``auto.offset.reset`` says; ``seek``, ``seek_to_beginning`` and ``seek_to_end`` move it.
``poll`` returns at most ``max.poll.records`` records and advances the positions past them; the
next buffers are fetched while the application works on these (see :mod:`tierlog.client.fetcher`).
Group membership, heartbeats, rebalances and commits follow :mod:`tierlog.client.group` (the
classic protocol, the default) or :mod:`tierlog.client.membership` (``group.protocol=consumer``,
KIP-848: the broker assigns, ``group.remote.assignor`` names its assignor).

Methods that need the network are coroutines (``poll``, ``commit``, ``committed``, ``position``,
``beginning_offsets``, ``end_offsets``, ``offsets_for_times``, ``partitions_for_topic``); the others
only change local state and take effect at the next ``poll``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import struct
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from tierlog import errors
from tierlog.client.assignors import PartitionAssignor, assignor_for
from tierlog.client.errors import IllegalStateError, NoOffsetForPartitionError
from tierlog.client.fetcher import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    CompletedFetch,
    Fetcher,
    RecordDeserializationError,
    SubscriptionState,
    parse_reset_strategy,
)
from tierlog.client.group import ConsumerCoordinator, _call_listener
from tierlog.client.membership import ConsumerMembershipManager
from tierlog.client.network import KafkaClient, deadline_after
from tierlog.client.types import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from tierlog.config.client import check_group_protocol_settings, validate_client_config
from tierlog.config.definitions import CLIENT_CONFIGS

log = logging.getLogger("tierlog.client.consumer")

__all__ = ["Consumer", "ConsumerRebalanceListener", "RecordDeserializationError"]

_DEFAULT_ASSIGNORS = ["range", "roundrobin"]
_DEFAULT_CLOSE_TIMEOUT_MS = 30000  # Java's KafkaConsumer.DEFAULT_CLOSE_TIMEOUT_MS

# Kafka's deserializer class names, for configurations written for Java.
_KAFKA_DESERIALIZERS: dict[str, Callable[[bytes | None], Any] | None] = {
    "org.apache.kafka.common.serialization.ByteArrayDeserializer": None,
    "org.apache.kafka.common.serialization.BytesDeserializer": None,
    "org.apache.kafka.common.serialization.StringDeserializer": lambda b: None if b is None else b.decode(),
    "org.apache.kafka.common.serialization.IntegerDeserializer":
        lambda b: None if b is None else struct.unpack(">i", b)[0],
    "org.apache.kafka.common.serialization.LongDeserializer":
        lambda b: None if b is None else struct.unpack(">q", b)[0],
    "org.apache.kafka.common.serialization.DoubleDeserializer":
        lambda b: None if b is None else struct.unpack(">d", b)[0],
    "string": lambda b: None if b is None else b.decode(),
    "str": lambda b: None if b is None else b.decode(),
    "bytes": None,
}


class ConsumerRebalanceListener:
    """Base for rebalance callbacks; methods may be plain or ``async``. ``on_partitions_lost`` (the
    generation was lost, e.g. after a session timeout) defaults to ``on_partitions_revoked``."""

    def on_partitions_revoked(self, revoked: list[TopicPartition]) -> Any:
        pass

    def on_partitions_assigned(self, assigned: list[TopicPartition]) -> Any:
        pass

    def on_partitions_lost(self, lost: list[TopicPartition]) -> Any:
        return self.on_partitions_revoked(lost)


def settings(config: Mapping[str, Any] | None, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Merge a dict of dotted Kafka names with keyword arguments using underscores."""
    merged = dict(config or {})
    for k, v in kwargs.items():
        merged[k.replace("_", ".")] = v
    return merged


def _deserializer(name: str, value: Any) -> Callable[[bytes | None], Any] | None:
    if value is None or callable(value) and not isinstance(value, type):
        return value
    if isinstance(value, str) and value.strip() in _KAFKA_DESERIALIZERS:
        return _KAFKA_DESERIALIZERS[value.strip()]
    raise errors.InvalidConfigError(
        f"{name} must be a callable taking bytes (or None), or one of {sorted(_KAFKA_DESERIALIZERS)}; "
        f"got {value!r}")


def _assignors(value: Any) -> list[PartitionAssignor]:
    names = [s.strip() for s in value.split(",")] if isinstance(value, str) else list(value or [])
    names = [n for n in names if n]
    if not names:
        raise errors.InvalidConfigError("partition.assignment.strategy must name at least one assignor")
    try:
        return [assignor_for(n) for n in names]
    except ValueError as exc:
        raise errors.InvalidConfigError(f"partition.assignment.strategy: {exc}") from None


def _partitions(args: tuple) -> list[TopicPartition]:
    """``f(tp1, tp2)`` or ``f([tp1, tp2])``."""
    if len(args) == 1 and not isinstance(args[0], TopicPartition) and not isinstance(args[0], str):
        args = tuple(args[0])
    out = []
    for tp in args:
        if not isinstance(tp, tuple) or len(tp) != 2:
            raise TypeError(f"expected a TopicPartition, got {tp!r}")
        out.append(TopicPartition(*tp))
    return out


def _now() -> float:
    return time.monotonic()


class Consumer:
    """``Consumer(bootstrap_servers="host:9092", group_id="g", ...)`` or ``Consumer({"group.id": ...})``;
    settings are checked here, before any I/O. ``key_deserializer`` / ``value_deserializer`` take a
    callable (bytes -> object), a Kafka deserializer class name, or None for raw bytes."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        props = settings(config, kwargs)
        # callables are not config values: take them out before the settings are checked
        self.key_deserializer = _deserializer("key.deserializer", props.pop("key.deserializer", None))
        self.value_deserializer = _deserializer("value.deserializer", props.pop("value.deserializer", None))
        strategy = None
        if "partition.assignment.strategy" not in CLIENT_CONFIGS:
            strategy = props.pop("partition.assignment.strategy", None)
        self.config = validate_client_config("consumer", props)
        check_group_protocol_settings(self.config, {**props, "partition.assignment.strategy": strategy})
        self.group_protocol = str(self.config["group.protocol"]).lower()
        strategy = self.config.get("partition.assignment.strategy", strategy) or _DEFAULT_ASSIGNORS
        # with group.protocol=consumer the broker assigns (group.remote.assignor)
        self._assignors = _assignors(strategy) if self.group_protocol == "classic" else []
        self._reset = parse_reset_strategy(self.config["auto.offset.reset"])
        self.group_id: str | None = self.config["group.id"]
        self.max_poll_records = self.config["max.poll.records"]
        self.default_api_timeout_ms = self.config["default.api.timeout.ms"]
        self._subs = SubscriptionState(self._reset)
        self._wakeup = asyncio.Event()
        self._client: KafkaClient | None = None
        self._fetcher: Fetcher | None = None
        self._coordinator: ConsumerCoordinator | ConsumerMembershipManager | None = None
        self._tasks: set[asyncio.Task] = set()
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        if self._client is not None:
            return
        if self._closed:
            raise IllegalStateError("This consumer has already been closed.")
        client = KafkaClient(self.config, "consumer")
        client.allow_auto_topic_creation = bool(self.config["allow.auto.create.topics"])
        client.start()
        self._client = client
        self._fetcher = Fetcher(client, self._subs, self.config, self._wakeup,
                                self.key_deserializer, self.value_deserializer)
        if self.group_id is not None and self.group_protocol == "consumer":
            self._coordinator = ConsumerMembershipManager(client, self._subs, self.config, self._wakeup)
        elif self.group_id is not None:
            self._coordinator = ConsumerCoordinator(client, self._subs, self.config, self._wakeup, self._assignors)
        self._track_topics()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self, timeout_ms: float | None = None) -> None:
        """Commit (with enable.auto.commit), leave the group and close connections, within
        ``timeout_ms`` (30 s by default)."""
        if self._closed:
            return
        self._closed = True
        if self._client is None:
            return
        deadline = deadline_after(_DEFAULT_CLOSE_TIMEOUT_MS if timeout_ms is None else timeout_ms)
        try:
            if self._coordinator is not None:
                try:
                    await asyncio.wait_for(self._coordinator.close(deadline), max(0.0, deadline - _now()))
                except (TimeoutError, errors.KafkaError) as exc:
                    log.warning("Consumer close: group %s not left cleanly: %r", self.group_id, exc)
        finally:
            for t in list(self._tasks):
                t.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._fetcher.close()
            await self._client.close()

    def _ensure_open(self) -> None:
        if self._closed:
            raise IllegalStateError("This consumer has already been closed.")

    @property
    def client(self) -> KafkaClient:
        if self._client is None:
            raise IllegalStateError("the consumer is not started: call await consumer.start()")
        return self._client

    def _spawn(self, coro: Any, name: str) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # whoever needed the result has seen the error; this only marks it retrieved
            log.debug("background task %s failed: %r", task.get_name(), task.exception())

    def _track_topics(self) -> None:
        if self._client is None:
            return
        if self._subs.mode == SubscriptionState.AUTO_PATTERN:
            self._client.want_all_topics(True)
        else:
            self._client.add_topics(self._subs.subscription)

    def _require_group(self) -> None:
        if self.group_id is None:
            raise errors.InvalidGroupIdError(
                "To use the group management or offset commit APIs, you must provide a valid group.id in the "
                "consumer configuration.")

    # -- subscription ------------------------------------------------------------------------------

    def subscribe(self, topics: Iterable[str] | str | re.Pattern = (), pattern: str | re.Pattern | None = None,
                  listener: Any = None) -> None:
        """Join the group for ``topics`` (a list, one name, or a compiled regex) or ``pattern`` (a
        regex matched against whole topic names); ``listener`` gets rebalance callbacks
        (:class:`ConsumerRebalanceListener`). An empty list unsubscribes."""
        self._ensure_open()
        self._require_group()
        if isinstance(topics, re.Pattern):
            pattern, topics = topics, ()
        if pattern is not None:
            compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
            self._subs.subscribe_pattern(compiled, listener)
            if self._coordinator is not None:
                self._coordinator.pattern_metadata_pending = True
            self._track_topics()
            return
        names = [topics] if isinstance(topics, str) else list(topics)
        if not names:
            self.unsubscribe()
            return
        for t in names:
            if not isinstance(t, str) or not t.strip():
                raise ValueError(f"Topic collection to subscribe to cannot contain null or empty topic: {t!r}")
        self._subs.subscribe(names, listener)
        self._track_topics()

    def subscription(self) -> set[str]:
        return set(self._subs.subscription) if self._subs.auto_assigned else set()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Take ``partitions`` by hand (no group rebalancing); an empty list unsubscribes."""
        self._ensure_open()
        partitions = _partitions((partitions,))
        if not partitions:
            self.unsubscribe()
            return
        for tp in partitions:
            if not isinstance(tp.topic, str) or not tp.topic.strip():
                raise ValueError(f"Topic partitions to assign to cannot have null or empty topic: {tp!r}")
        if self._subs.mode not in (None, SubscriptionState.USER_ASSIGNED):
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive")
        if self._coordinator is not None and self._client is not None:
            self._coordinator.maybe_auto_commit()  # positions of partitions about to go
        self._subs.assign_from_user(partitions)
        self._track_topics()

    def assignment(self) -> set[TopicPartition]:
        return set(self._subs.assignment)

    def unsubscribe(self) -> None:
        """Drop every subscription and assignment; a group member leaves its group."""
        self._ensure_open()
        if self._coordinator is not None and self._subs.auto_assigned and self._client is not None:
            revoked = list(self._subs.assignment)
            if revoked and self._subs.listener is not None:
                self._spawn(_call_listener(self._subs.listener, "on_partitions_revoked", revoked), "tierlog-revoke")
            self._coordinator.leave_in_background("the consumer unsubscribed from all topics")
        self._subs.unsubscribe()
        if self._client is not None:
            self._client.want_all_topics(False)

    # -- positions ---------------------------------------------------------------------------------

    def seek(self, partition: TopicPartition, offset: int | OffsetAndMetadata) -> None:
        """Fetch ``partition`` from ``offset`` at the next poll."""
        self._ensure_open()
        epoch = -1
        if isinstance(offset, OffsetAndMetadata):
            offset, epoch = offset.offset, offset.leader_epoch
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"seek offset must not be a negative number: {offset!r}")
        self._subs.state(TopicPartition(*partition)).seek(offset, epoch)
        log.info("Seeking to offset %s for partition %s-%s", offset, partition[0], partition[1])

    def _seek_reset(self, args: tuple, strategy: str) -> None:
        self._ensure_open()
        partitions = _partitions(args) if args and not (len(args) == 1 and args[0] is None) else []
        if not partitions:
            partitions = list(self._subs.assignment)
        for tp in partitions:
            self._subs.state(tp).request_reset(strategy)

    def seek_to_beginning(self, *partitions: Any) -> None:
        """Start ``partitions`` (all assigned when none given) at their first offset, resolved lazily."""
        self._seek_reset(partitions, "earliest")

    def seek_to_end(self, *partitions: Any) -> None:
        """Start ``partitions`` (all assigned when none given) at their end, resolved lazily."""
        self._seek_reset(partitions, "latest")

    async def position(self, partition: TopicPartition, timeout_ms: float | None = None) -> int:
        """The offset of the next record ``poll`` returns for ``partition``; resolves a missing position
        from the committed offset or ``auto.offset.reset`` first."""
        self._ensure_open()
        self.client  # noqa: B018 - raises when not started
        tp = TopicPartition(*partition)
        deadline = deadline_after(self.default_api_timeout_ms if timeout_ms is None else timeout_ms)
        while True:
            st = self._subs.state(tp)
            if st.position is not None:
                return st.position
            self._wakeup.clear()
            self._update_positions()
            if st.position is not None:
                return st.position
            self._raise_position_error(tp)
            remaining = deadline - _now()
            if remaining <= 0:
                raise self.client.timeout_error(
                    f"Timeout of {timeout_ms or self.default_api_timeout_ms}ms expired before the position for "
                    f"partition {tp.topic}-{tp.partition} could be determined")
            try:
                await asyncio.wait_for(self._wakeup.wait(), remaining)
            except TimeoutError:
                pass

    def _raise_position_error(self, tp: TopicPartition) -> None:
        pending = self._fetcher._errors
        for exc in list(pending):
            if isinstance(exc, NoOffsetForPartitionError) or not getattr(exc, "retriable", True):
                pending.remove(exc)
                raise exc

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark from the last fetch answer, None before one."""
        st = self._subs.state(TopicPartition(*partition))
        return st.high_watermark if st.high_watermark >= 0 else None

    def pause(self, *partitions: Any) -> None:
        """Stop fetching ``partitions`` (records already buffered are kept for after ``resume``)."""
        for tp in _partitions(partitions):
            self._subs.state(tp).paused = True

    def resume(self, *partitions: Any) -> None:
        for tp in _partitions(partitions):
            self._subs.state(tp).paused = False
        self._wakeup.set()

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, st in self._subs.assignment.items() if st.paused}

    def _update_positions(self) -> None:
        """Start finding positions: committed offsets for a group, else (or when none) the reset policy."""
        missing = self._subs.initializing()
        if missing:
            if self._coordinator is not None:
                for tp in missing:
                    self._subs.assignment[tp].committed_pending = True
                self._spawn(self._refresh_committed(missing), "tierlog-committed")
            else:
                self._reset_missing(missing)
        self._fetcher.reset_positions()

    def _reset_missing(self, partitions: list[TopicPartition]) -> None:
        if self._subs.default_reset == "none":
            raise NoOffsetForPartitionError(f"Undefined offset with no reset policy for partitions: {partitions}")
        for tp in partitions:
            self._subs.assignment[tp].request_reset(self._subs.default_reset)

    async def _refresh_committed(self, partitions: list[TopicPartition]) -> None:
        states = {tp: self._subs.assignment.get(tp) for tp in partitions}
        try:
            committed = await self._coordinator.fetch_committed(partitions,
                                                                deadline_after(self.default_api_timeout_ms))
        except errors.KafkaError as exc:
            for st in states.values():
                if st is not None:
                    st.committed_pending = False
            log.warning("Fetching committed offsets of %s failed: %s", partitions, exc.message)
            self._fetcher.fail(exc)
            return
        missing = []
        for tp, st in states.items():
            if st is None or self._subs.assignment.get(tp) is not st:
                continue
            st.committed_pending = False
            if st.position is not None or st.reset is not None:
                continue  # sought meanwhile
            om = committed.get(tp)
            if om is not None:
                st.seek(om.offset, om.leader_epoch)
                log.info("Setting offset for partition %s-%s to the committed offset %s",
                         tp.topic, tp.partition, om.offset)
            else:
                missing.append(tp)
        if missing:
            try:
                self._reset_missing(missing)
            except NoOffsetForPartitionError as exc:
                self._fetcher.fail(exc)
        self._fetcher.reset_positions()
        self._fetcher.send_fetches()
        self._wakeup.set()

    # -- polling -----------------------------------------------------------------------------------

    async def poll(self, timeout_ms: float = 0, max_records: int | None = None
                   ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records fetched for the assigned partitions, at most ``max_records`` (``max.poll.records``),
        waiting up to ``timeout_ms`` for some. Also keeps the group membership alive: rebalances and
        automatic commits happen inside poll."""
        max_records = self.max_poll_records if max_records is None else max_records
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        return await self._poll(timeout_ms, lambda fetcher: fetcher.collect(max_records))

    async def poll_batches(self, timeout_ms: float = 0, max_bytes: int = 64 * 1024 * 1024
                           ) -> dict[TopicPartition, list[CompletedFetch]]:
        """Like :meth:`poll`, but the fetched data undecoded (see ``Fetcher.collect_batches``): whole
        record batches as the broker sent them, about ``max_bytes`` in all, for readers that decode
        them in bulk. With ``isolation.level=read_committed`` the batches of aborted transactions and
        control batches are left out, as ``poll`` leaves out their records."""
        return await self._poll(timeout_ms, lambda fetcher: fetcher.collect_batches(max_bytes))

    async def _poll(self, timeout_ms: float, collect: Callable[[Fetcher], dict]) -> dict:
        self._ensure_open()
        fetcher = self._fetcher
        if fetcher is None:
            raise IllegalStateError("the consumer is not started: call await consumer.start()")
        if self._subs.mode is None:
            raise IllegalStateError("Consumer is not subscribed to any topics or assigned any partitions")
        if timeout_ms is None or timeout_ms < 0:
            raise ValueError("Timeout must not be negative")
        deadline = _now() + timeout_ms / 1000
        coordinator = self._coordinator
        if coordinator is not None:
            coordinator.polling += 1
        try:
            while True:
                self._wakeup.clear()
                # as Java: records are returned even when the group could not be joined in time
                joined = coordinator is None or await coordinator.poll(deadline)
                self._update_positions()
                records = collect(fetcher)
                fetcher.send_fetches()
                if records:
                    return records
                remaining = deadline - _now()
                if remaining <= 0:
                    return {}
                if not joined:
                    continue
                try:
                    await asyncio.wait_for(self._wakeup.wait(), remaining)
                except TimeoutError:
                    return {}
        finally:
            if coordinator is not None:
                coordinator.polling -= 1
                coordinator.record_poll()

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        """Records one by one, polling as needed. Positions advance a poll at a time: records of the
        last poll that the loop did not reach count as consumed when it breaks out."""
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while not self._closed:
            batch = await self.poll(timeout_ms=1000)
            for records in batch.values():
                for record in records:
                    yield record

    # -- offsets -----------------------------------------------------------------------------------

    async def commit(self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None,
                     timeout_ms: float | None = None) -> None:
        """Commit ``offsets`` (by default the current position of every assigned partition) and wait
        for the answer, retrying retriable errors within ``default.api.timeout.ms``. Raises
        CommitFailedError when the group rebalanced the partitions away."""
        self._ensure_open()
        self._require_group()
        self.client  # noqa: B018 - raises when not started
        if offsets is None:
            wanted = self._subs.all_consumed()
        else:
            wanted = {}
            for tp, value in offsets.items():
                if isinstance(value, OffsetAndMetadata):
                    om = value
                elif isinstance(value, int):
                    om = OffsetAndMetadata(value, "", -1)
                else:
                    om = OffsetAndMetadata(*value)
                if om.offset < 0:
                    raise ValueError(f"Invalid offset {om.offset} for partition {tp}")
                wanted[TopicPartition(*tp)] = om
        deadline = deadline_after(self.default_api_timeout_ms if timeout_ms is None else timeout_ms)
        await self._coordinator.commit_offsets(wanted, deadline)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The consumer's group, generation, member id and group instance id, for a transactional
        producer's ``send_offsets_to_transaction`` (KIP-447). Without a group: InvalidGroupIdError."""
        self._ensure_open()
        self._require_group()
        c = self._coordinator
        if c is None:  # not started yet
            return ConsumerGroupMetadata(self.group_id, -1, "", self.config.get("group.instance.id"))
        return ConsumerGroupMetadata(self.group_id, c.generation, c.member_id, c.group_instance_id)

    async def committed(self, partitions: TopicPartition | Iterable[TopicPartition], timeout_ms: float | None = None
                        ) -> dict[TopicPartition, OffsetAndMetadata | None] | OffsetAndMetadata | None:
        """The group's committed offsets: a dict for a collection of partitions, the
        OffsetAndMetadata (or None) for a single TopicPartition."""
        self._ensure_open()
        self._require_group()
        self.client  # noqa: B018
        single = isinstance(partitions, TopicPartition)
        wanted = [partitions] if single else _partitions((partitions,))
        deadline = deadline_after(self.default_api_timeout_ms if timeout_ms is None else timeout_ms)
        result = await self._coordinator.fetch_committed(wanted, deadline)
        return result.get(partitions) if single else result

    async def _list(self, timestamps: Mapping[TopicPartition, int], timeout_ms: float | None) -> dict:
        self._ensure_open()
        self.client  # noqa: B018
        deadline = deadline_after(self.default_api_timeout_ms if timeout_ms is None else timeout_ms)
        return await self._fetcher.list_offsets(timestamps, deadline)

    async def beginning_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: float | None = None
                                ) -> dict[TopicPartition, int]:
        """First offset of each partition (its log start offset)."""
        tps = _partitions((partitions,))
        found = await self._list({tp: EARLIEST_TIMESTAMP for tp in tps}, timeout_ms)
        return {tp: found[tp][0] for tp in tps}

    async def end_offsets(self, partitions: Iterable[TopicPartition], timeout_ms: float | None = None
                          ) -> dict[TopicPartition, int]:
        """Offset after the last record of each partition: the high watermark, or the last stable
        offset with read_committed."""
        tps = _partitions((partitions,))
        found = await self._list({tp: LATEST_TIMESTAMP for tp in tps}, timeout_ms)
        return {tp: found[tp][0] for tp in tps}

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int], timeout_ms: float | None = None
                                ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition the earliest offset whose timestamp is at least the given one (ms since the
        epoch), or None when every record is older."""
        wanted = {}
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"The target time for partition {tp} is {ts}. The target time cannot be negative.")
            wanted[TopicPartition(*tp)] = int(ts)
        found = await self._list(wanted, timeout_ms)
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp in wanted:
            offset, ts, epoch = found[tp]
            out[tp] = OffsetAndTimestamp(offset, ts, epoch) if offset >= 0 else None
        return out

    async def partitions_for_topic(self, topic: str, timeout_ms: float | None = None) -> set[int]:
        """Partition ids of ``topic`` from metadata (fetched when unknown)."""
        self._ensure_open()
        deadline = deadline_after(self.default_api_timeout_ms if timeout_ms is None else timeout_ms)
        await self.client.wait_for_topic(topic, deadline)
        return set(self.client.cluster.topics[topic].partitions)

    @property
    def metrics(self) -> dict[str, int]:
        return dict(self._fetcher.metrics) if self._fetcher is not None else {}
