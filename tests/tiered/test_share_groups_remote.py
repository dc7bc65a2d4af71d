"""A share group reads records that are only in the remote tier: ShareFetch reads through the replica manager's
normal fetch path, so a share-partition whose next records were uploaded and deleted locally gets them from
the remote store."""

from __future__ import annotations

import asyncio

from tests.harness.broker import running_broker
from tests.harness.rawclient import create_topic, unique
from tests.harness.tiered import tier_status, tiered_settings, wait_for
from tests.harness.waiting import wait_until_async
from tierlog.client.producer import Producer
from tierlog.client.share_consumer import ShareConsumer

TOPIC = {"remote.storage.enable": "true", "segment.bytes": "4000", "local.retention.bytes": "1",
         "file.delete.delay.ms": "0"}


def test_share_consumer_reads_records_only_in_the_remote_tier(tmp_path):
    with running_broker(tmp_path, tiered_settings(tmp_path)) as b:
        topic, group = unique("share-remote"), unique("g")
        create_topic(b.bootstrap, topic, configs=TOPIC)
        wanted = [f"rec-{i:03d}".encode() * 10 for i in range(60)]  # 300 bytes each: several segments

        async def main() -> list:
            async with Producer(bootstrap_servers=b.bootstrap, linger_ms=0) as producer, \
                    ShareConsumer(group, bootstrap_servers=b.bootstrap) as consumer:
                consumer.subscribe([topic])

                async def initialized() -> bool:  # the group starts at the log end: a record it gets
                    await producer.send_and_wait(topic, b"warmup")
                    return any(r.value == b"warmup" for r in await consumer.poll(500))

                await wait_until_async(initialized, timeout=60, what="a warm-up record delivered")
                await consumer.commit_sync()
                last = None
                for value in wanted:
                    last = await producer.send_and_wait(topic, value)
                for _ in range(20):  # filler: the wanted records leave the active segment
                    await producer.send_and_wait(topic, b"filler" * 50)

                def only_remote():
                    p = tier_status(b, topic)["partitions"][0]
                    return p["local_log_start_offset"] > last.offset and p
                wait_for(only_remote, "the wanted records uploaded and deleted locally")
                got: list = []

                async def read_all() -> bool:
                    got.extend(await consumer.poll(500))
                    return {r.value for r in got} >= set(wanted)

                await wait_until_async(read_all, timeout=60, what="every remote record delivered")
                await consumer.commit_sync()
                return got

        got = asyncio.run(main())
        remote = [r for r in got if r.value in set(wanted)]
        assert [r.value for r in remote] == wanted
        assert {r.delivery_count for r in remote} == {1}
