"""Share group helpers shared by the share-group tests (tests/server/test_share_dlq.py and the cluster's):
group configs set on the GROUP resource, a share consumer acknowledging by plan, and a DLQ topic read back."""

from __future__ import annotations

from tests.harness.waiting import wait_until_async
from tierlog.client.consumer import Consumer
from tierlog.client.share_consumer import RELEASE, ShareConsumer
from tierlog.client.types import TopicPartition
from tierlog.protocol import ApiKey

DELIVERY_LIMIT = 5  # group.share.delivery.count.limit, the default of both brokers


def set_group(raw, group: str, *configs) -> tuple[int, str | None]:
    answer = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": False, "resources": [
        {"resource_type": 32, "resource_name": group,
         "configs": [{"name": n, "config_operation": 0, "value": v} for n, v in configs]}]})
    return answer.responses[0].error_code, answer.responses[0].error_message


async def share_consume(bootstrap: str, group: str, topic: str, plan,
                        records: int = 4) -> list[tuple[int, int, int, str]]:
    """A share consumer acknowledging each delivery as ``plan(offset, delivery_count)`` says, until the
    ``records`` are finished; its deliveries (partition, offset, delivery count, type)."""
    done: list[tuple[int, int, int, str]] = []
    async with ShareConsumer(group, bootstrap_servers=bootstrap, acknowledgement_mode="explicit") as consumer:
        consumer.subscribe([topic])
        finished: set[tuple[int, int]] = set()

        async def round_() -> bool:
            for rec in await consumer.poll(timeout_ms=500):
                kind = plan(rec.offset, rec.delivery_count)
                consumer.acknowledge(rec, kind)
                done.append((rec.partition, rec.offset, rec.delivery_count, kind))
                if kind != RELEASE or rec.delivery_count >= DELIVERY_LIMIT:
                    finished.add((rec.partition, rec.offset))
            await consumer.commit_sync()
            return len(finished) == records

        await wait_until_async(round_, timeout=60, interval=0.05, what="every record finished")
    return done


async def read_dlq(bootstrap: str, topic: str, partitions: int, count: int) -> list:
    got: list = []
    async with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])

        async def enough() -> bool:
            for records in (await consumer.poll(timeout_ms=300)).values():
                got.extend(records)
            return len(got) >= count

        await wait_until_async(enough, timeout=30, interval=0.05, what="the DLQ records")
    return [(r.partition, r.key, r.value, list(r.headers)) for r in got]
