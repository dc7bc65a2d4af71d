"""KIP-1191's share group dead-letter queue, tierlog against Kafka 4.4.0 (the session's ``kafka_peer``): the same
share group configs set with IncrementalAlterConfigs on the GROUP resource, the same refusals, and the same
records written to the DLQ topic for records the consumer rejected and records released past the delivery
limit, compared field by field (headers included; timestamps and offsets are the broker's); a DLQ topic without
``errors.deadletterqueue.group.enable`` gets nothing, and its group's rejected records are archived all the same.
A batch released again and again: the records each fetch acquires as the delivery count grows (Kafka 4.4's
throttling) and the DLQ records once the delivery limit is reached."""

from __future__ import annotations

import asyncio

from tests.harness.rawclient import create_topic, raw_client, unique
from tests.harness.waiting import wait_until_async
from tests.server.sharelib import DELIVERY_LIMIT, read_dlq, set_group, share_consume
from tierlog.client.producer import Producer
from tierlog.client.share_consumer import ACCEPT, REJECT, RELEASE, ShareConsumer
from tierlog.protocol import ApiKey


def _describe(raw, group: str) -> list:
    keys = ["errors.deadletterqueue.topic.name", "errors.deadletterqueue.copy.record.enable"]
    answer = raw.request(ApiKey.DESCRIBE_CONFIGS, 4, {"include_synonyms": True, "include_documentation": False,
                                                      "resources": [{"resource_type": 32, "resource_name": group,
                                                                     "configuration_keys": keys}]})
    return sorted((c.name, c.value, c.config_source, c.config_type) for c in answer.results[0].configs)


def _scenario(bootstrap: str) -> dict:
    topic, dlq = unique("dlq-src"), "dlq." + unique("dead")
    create_topic(bootstrap, topic, partitions=2)
    # a DLQ record goes to partition (source partition % DLQ partitions)
    create_topic(bootstrap, dlq, partitions=2, configs={"errors.deadletterqueue.group.enable": "true"})
    # a topic that does not allow it (no errors.deadletterqueue.group.enable): the records are archived without
    off = "dlq." + unique("off")
    create_topic(bootstrap, off)
    copy_group, bare_group, off_group = unique("dlq-copy"), unique("dlq-bare"), unique("dlq-off")
    out: dict = {}
    with raw_client(bootstrap) as raw:
        out["internal name"] = set_group(raw, copy_group, ("errors.deadletterqueue.topic.name", "__dlq"))
        out["bad flag"] = set_group(raw, copy_group, ("errors.deadletterqueue.copy.record.enable", "maybe"))[0]
        out["defaults"] = _describe(raw, copy_group)
        for group, copy in ((copy_group, "true"), (bare_group, "false")):
            out[f"set {copy}"] = set_group(raw, group, ("errors.deadletterqueue.topic.name", dlq),
                                        ("errors.deadletterqueue.copy.record.enable", copy),
                                        ("share.auto.offset.reset", "earliest"))
        out["set off"] = set_group(raw, off_group, ("errors.deadletterqueue.topic.name", off),
                                ("share.auto.offset.reset", "earliest"))
        out["described"] = [(n, "DLQ" if v == dlq else v, *rest) for n, v, *rest in _describe(raw, copy_group)]


    async def run():
        async with Producer(bootstrap_servers=bootstrap) as producer:
            for i in range(4):  # two records a partition
                await producer.send(topic, f"value-{i}".encode(), key=f"key-{i}".encode(), partition=i % 2,
                                    headers=[("origin", f"h{i}".encode())])
            await producer.flush()

        def copy_plan(offset: int, count: int) -> str:
            # offset 0 rejected, offset 1 released until the delivery limit archives it
            return REJECT if offset == 0 else RELEASE

        out["off deliveries"] = sorted(set(await share_consume(bootstrap, off_group, topic,
                                                               lambda offset, count: REJECT)))
        out["copy deliveries"] = sorted(set(await share_consume(bootstrap, copy_group, topic, copy_plan)))
        out["bare deliveries"] = sorted(set(await share_consume(
            bootstrap, bare_group, topic, lambda offset, count: REJECT if offset == 1 else ACCEPT)))
        # 2 partitions x (1 rejected + 1 past the limit) for the copying group, 2 rejected for the other
        out["dlq"] = await read_dlq(bootstrap, dlq, 2, 6)

    asyncio.run(run())
    with raw_client(bootstrap) as raw:  # checked last, after the other groups' DLQ records were read
        end = raw.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": off, "partitions": [{"partition_index": 0, "timestamp": -1}]}]})
        out["off topic end"] = end.topics[0].partitions[0].offset
    return out


def test_share_group_dlq_as_kafka_44(tierlog_peer, kafka_peer):
    kafka, tierlog = _scenario(kafka_peer.bootstrap), _scenario(tierlog_peer.bootstrap)
    for key in kafka:
        if key != "dlq":
            assert (key, tierlog[key]) == (key, kafka[key])
    assert kafka["off topic end"] == 0
    assert kafka["off deliveries"] == [(p, o, 1, REJECT) for p in (0, 1) for o in (0, 1)]
    assert _dlq_shape(tierlog["dlq"]) == _dlq_shape(kafka["dlq"])
    # what Kafka 4.4 wrote: the original key and value only when copying, its headers never, then the context
    copied = [r for r in _dlq_shape(kafka["dlq"]) if r[1] is not None]
    assert sorted((p, k, [h for h, _ in headers][:1]) for p, k, _v, headers in copied) == [
        (0, b"key-0", ["__dlq.errors.topic"]), (0, b"key-2", ["__dlq.errors.topic"]),
        (1, b"key-1", ["__dlq.errors.topic"]), (1, b"key-3", ["__dlq.errors.topic"])]


def _dlq_shape(records: list) -> list:
    """The DLQ records with the names that differ per run (topic, groups) replaced by their role."""
    out = []
    for partition, key, value, headers in records:
        named = []
        for name, raw in headers:
            text = raw.decode() if raw is not None else None
            if name == "__dlq.errors.topic":
                text = "SOURCE"
            elif name == "__dlq.errors.group":
                text = "COPY" if "dlq-copy" in text else "BARE"
            named.append((name, text))
        out.append((partition, key, value, named))
    return sorted(out, key=repr)


def _topic_state(raw, topic: str) -> tuple:
    """Whether ``topic`` exists, its partition count and its DLQ-related configs with their sources."""
    meta = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                             "allow_auto_topic_creation": False,
                                             "include_topic_authorized_operations": False})
    if meta.topics[0].error_code:
        return (int(meta.topics[0].error_code),)
    keys = ["errors.deadletterqueue.group.enable", "message.timestamp.type"]
    answer = raw.request(ApiKey.DESCRIBE_CONFIGS, 4, {"include_synonyms": False, "include_documentation": False,
                                                      "resources": [{"resource_type": 2, "resource_name": topic,
                                                                     "configuration_keys": keys}]})
    return (0, len(meta.topics[0].partitions),
            sorted((c.name, c.value, c.config_source) for c in answer.results[0].configs))


def _broker_default(raw, name: str, value: str | None) -> int:
    """Set (or, with None, delete) a cluster-wide dynamic broker config."""
    answer = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": 4, "resource_name": "",
         "configs": [{"name": name, "config_operation": 0 if value is not None else 1, "value": value}]}]})
    return answer.responses[0].error_code


AUTO_CREATE = "errors.deadletterqueue.auto.create.topics.enable"


def _auto_create_scenario(bootstrap: str) -> dict:
    """A group whose DLQ topic does not exist rejects every record: with auto-creation off (the default) they are
    archived and no topic appears; with it on (a dynamic cluster default) the topic is created with Kafka's
    configs and gets the records."""
    topic = unique("dlq-auto-src")
    create_topic(bootstrap, topic)
    out: dict = {}
    runs = {"off": (unique("dlq-auto-off"), "dlq." + unique("never")),
            "on": (unique("dlq-auto-on"), "dlq." + unique("created"))}
    with raw_client(bootstrap) as raw:
        for group, dlq in runs.values():
            set_group(raw, group, ("errors.deadletterqueue.topic.name", dlq), ("share.auto.offset.reset", "earliest"))

    async def produce():
        async with Producer(bootstrap_servers=bootstrap) as producer:
            for i in range(2):
                await producer.send(topic, f"value-{i}".encode(), key=f"key-{i}".encode())
            await producer.flush()

    asyncio.run(produce())
    group, dlq = runs["off"]
    out["off deliveries"] = sorted(set(asyncio.run(
        share_consume(bootstrap, group, topic, lambda offset, count: REJECT, records=2))))
    with raw_client(bootstrap) as raw:
        out["off topic"] = _topic_state(raw, dlq)
        out["enable"] = _broker_default(raw, AUTO_CREATE, "true")
    try:
        group, dlq = runs["on"]
        out["on deliveries"] = sorted(set(asyncio.run(
            share_consume(bootstrap, group, topic, lambda offset, count: REJECT, records=2))))
        records = asyncio.run(read_dlq(bootstrap, dlq, 1, 2))
        out["on records"] = sorted((k, [n for n, _ in h]) for _p, k, _v, h in records)
        with raw_client(bootstrap) as raw:
            out["on topic"] = _topic_state(raw, dlq)
    finally:
        with raw_client(bootstrap) as raw:
            _broker_default(raw, AUTO_CREATE, None)
    return out


def test_share_group_dlq_auto_created_as_kafka_44(tierlog_peer, kafka_peer):
    kafka, tierlog = _auto_create_scenario(kafka_peer.bootstrap), _auto_create_scenario(tierlog_peer.bootstrap)
    assert kafka["off topic"] == (3,)  # UNKNOWN_TOPIC_OR_PARTITION: nothing created by default
    assert kafka["on topic"][0] == 0 and len(kafka["on records"]) == 2
    for key in kafka:
        assert (key, tierlog[key]) == (key, kafka[key])


def _throttle_scenario(bootstrap: str) -> dict:
    """Eight records in one batch, every delivery released until the delivery limit (5) archives them into the
    DLQ: the records each poll returned, with their delivery counts (Kafka 4.4 throttles the acquisition of a batch
    whose records were delivered often: half the batch, then a quarter, ...), and the DLQ records written."""
    topic, dlq, group = unique("dlq-throttle"), "dlq." + unique("throttled"), unique("dlq-throttle")
    create_topic(bootstrap, topic)
    create_topic(bootstrap, dlq, configs={"errors.deadletterqueue.group.enable": "true"})
    with raw_client(bootstrap) as raw:
        assert set_group(raw, group, ("errors.deadletterqueue.topic.name", dlq),
                         ("share.auto.offset.reset", "earliest"))[0] == 0
    out: dict = {}

    async def run():
        async with Producer(bootstrap_servers=bootstrap) as producer:
            for i in range(8):  # sent before the flush: one batch
                await producer.send(topic, f"value-{i}".encode(), key=f"key-{i}".encode())
            await producer.flush()
        polls: list[list[tuple[int, int]]] = []
        finished: set[int] = set()
        async with ShareConsumer(group, bootstrap_servers=bootstrap, acknowledgement_mode="explicit") as consumer:
            consumer.subscribe([topic])

            async def round_() -> bool:
                got = await consumer.poll(timeout_ms=500)
                if got:
                    polls.append([(r.offset, r.delivery_count) for r in got])
                for r in got:
                    consumer.acknowledge(r, RELEASE)
                    if r.delivery_count >= DELIVERY_LIMIT:
                        finished.add(r.offset)
                await consumer.commit_sync()
                return len(finished) == 8

            await wait_until_async(round_, timeout=60, interval=0.05, what="every record past the delivery limit")
        out["polls"] = polls
        out["dlq"] = [(k, [(n, v.decode()) for n, v in h if n in ("__dlq.errors.offset", "__dlq.errors.delivery.count",
                                                                  "__dlq.errors.message")])
                      for _p, k, _v, h in sorted(await read_dlq(bootstrap, dlq, 1, 8),
                                                 key=lambda r: dict(r[3])["__dlq.errors.offset"])]

    asyncio.run(run())
    return out


def test_throttled_redelivery_until_the_dlq_as_kafka_44(tierlog_peer, kafka_peer):
    kafka, tierlog = _throttle_scenario(kafka_peer.bootstrap), _throttle_scenario(tierlog_peer.bootstrap)
    assert tierlog["polls"] == kafka["polls"]
    assert tierlog["dlq"] == kafka["dlq"]
    # the whole batch while delivered less often, then fewer records a fetch (Kafka 4.4's throttling)
    assert kafka["polls"][0] == [(o, 1) for o in range(8)]
    assert min(len(p) for p in kafka["polls"]) < 8
    assert [k for k, _h in kafka["dlq"]] == [None] * 8
    assert {dict(h)["__dlq.errors.delivery.count"] for _k, h in kafka["dlq"]} == {str(DELIVERY_LIMIT)}
