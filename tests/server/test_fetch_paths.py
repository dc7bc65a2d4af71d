"""The Fetch handler's two paths answer alike. A request naming ``BIG_FETCH`` partitions or more is walked,
read and answered a slice at a time, its answer built and encoded in a worker thread with the records
still file regions (tests/server/test_big_requests.py sends a 16 MB one to a live broker); here the
threshold is lowered so that a small request takes that path, and its answer is compared byte for byte
with the ordinary path's, by topic name and by topic id, in-process (tests/harness/inprocess.py).
"""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest
from kio.index import load_request_schema

from tests.harness.inprocess import assemble, produce
from tierlog.protocol import ApiKey, build, encode_request, offload, parse_request
from tierlog.server import replica_manager
from tierlog.server.apis import fetch as fetch_api
from tierlog.storage import FileRegion


def joined(parts: list) -> bytes:
    """A response frame sent as parts (bytes, file regions, memory files), as the client gets it."""
    out = []
    for part in parts:
        if isinstance(part, (bytes, memoryview)):
            out.append(bytes(part))
            continue
        fd = part.open()
        try:
            out.append(os.pread(fd, part.length, part.position))
        finally:
            os.close(fd)
    return b"".join(out)


@pytest.mark.parametrize("version", [4, 11, 12, 13, 17])
def test_a_big_fetch_answers_as_an_ordinary_one(tmp_path, monkeypatch, version):
    async def scenario():
        node = await assemble(tmp_path)
        try:
            node.controller.create_topic("a", 3, 1)
            produce(node, "a", 5, partition=0)
            produce(node, "a", 2, partition=2)
            by_id = version >= 13
            key = "topic_id" if by_id else "topic"
            a = node.controller.image.topics["a"].topic_id if by_id else "a"

            def part(p: int, offset: int) -> dict:
                return {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20}

            # Data, an empty partition, data, a partition the topic does not have, an offset out of range; a
            # topic the broker does not know; the first topic named again (one entry of the answer).
            frame = encode_request(build(load_request_schema(ApiKey.FETCH, version), {
                "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 1,
                "topics": [{key: a, "partitions": [part(0, 1), part(1, 0), part(2, 0), part(7, 0), part(0, 99)]},
                           {key: uuid.uuid4() if by_id else "nope", "partitions": [part(0, 0)]},
                           {key: a, "partitions": [part(2, 1)]}]}), 7, "t")
            apis = fetch_api.FetchApis(node.rm, node.controller)
            ctx = parse_request(frame[4:])
            answer = await apis.fetch(ctx)  # written by hand (protocol/hot_responses.py)
            assert sum(isinstance(p, FileRegion) for p in answer.frame) == 3
            ordinary = joined(answer.frame)

            monkeypatch.setattr(fetch_api, "BIG_FETCH", 1)
            monkeypatch.setattr(fetch_api, "MIN_PARTITION_BYTES", 0)
            monkeypatch.setattr(replica_manager, "BIG_FETCH", 1)
            monkeypatch.setattr(replica_manager, "FETCH_SLICE", 2)
            ctx = parse_request(frame[4:])
            answer = await apis.fetch(ctx)
            assert isinstance(answer, offload.EncodedResponse)
            assert sum(isinstance(p, FileRegion) for p in answer.frame) == 3  # records stay file regions
            assert joined(answer.frame) == ordinary  # through kio, as the big path encodes it
        finally:
            await node.close()
    asyncio.run(scenario())
