"""DescribeLogDirs against a live ``tierlog broker`` with two log dirs: one result per dir of ``log.dirs``, the
partitions each holds sized as their segment files on disk, the request's filter (partitions the broker does
not host left out), every version from 1 to 4, and a dir gone offline answered KAFKA_STORAGE_ERROR with nothing
else while the other keeps listing its partitions (as Kafka's ReplicaManager.describeLogDirs answers)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from tests.harness.rawclient import RawClient, create_topic, produce
from tests.harness.tiered import wait_for
from tierlog import errors
from tierlog.client.admin import Admin, ReplicaInfo
from tierlog.client.types import TopicPartition
from tierlog.protocol import ApiKey
from tierlog.storage.checkpoints import RECOVERY_POINT_CHECKPOINT

STORAGE_ERROR = errors.KafkaStorageError.code


def describe(bootstrap: str, version: int = 4, topics: list[dict] | None = None):
    client = RawClient(bootstrap)
    try:
        return client.request(ApiKey.DESCRIBE_LOG_DIRS, version, {"topics": topics})
    finally:
        client.close()


def listed(result) -> dict[tuple[str, int], tuple[int, int, bool]]:
    """{(topic, partition): (size, offset lag, is future)} of one log dir's result."""
    return {(t.name, int(p.partition_index)): (int(p.partition_size), int(p.offset_lag), p.is_future_key)
            for t in result.topics for p in t.partitions}


def size_on_disk(log_dir: Path, topic: str, partition: int) -> int:
    return sum(f.stat().st_size for f in (log_dir / f"{topic}-{partition}").glob("*.log"))


def two_dirs(start_broker, tmp_path: Path):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    return dirs, start_broker(log_dirs=",".join(map(str, dirs)))


def test_every_dir_lists_its_partitions_with_their_sizes(start_broker, tmp_path):
    dirs, b = two_dirs(start_broker, tmp_path)
    create_topic(b.bootstrap, "orders", partitions=4)
    for p in range(3):  # partition 3 stays empty
        assert produce(b.bootstrap, "orders", p, [b"v" * 100] * (p + 1)).error_code == 0

    for version in (1, 2, 3, 4):
        r = describe(b.bootstrap, version)
        assert [x.log_dir for x in r.results] == [str(d) for d in dirs]
        assert all(x.error_code == 0 for x in r.results)
        if version >= 3:
            assert r.error_code == 0
        hosted = {}
        for x, d in zip(r.results, dirs):
            for (topic, p), (size, lag, future) in listed(x).items():
                assert (size, lag, future) == (size_on_disk(d, topic, p), 0, False)
                hosted[topic, p] = d
            if version >= 4:
                st = os.statvfs(d)
                assert x.total_bytes == st.f_blocks * st.f_frsize and 0 < x.usable_bytes <= x.total_bytes
            else:
                assert not hasattr(x, "total_bytes")
        # each partition in exactly one dir, the dirs used evenly (new logs go to the least loaded one)
        assert sorted(hosted) == [("orders", p) for p in range(4)]
        assert sorted(sum(1 for d in hosted.values() if d == dirs[i]) for i in range(2)) == [2, 2]
    assert size_on_disk(hosted["orders", 2], "orders", 2) > size_on_disk(hosted["orders", 0], "orders", 0) > 0


def test_only_the_partitions_asked_for_that_the_broker_hosts(start_broker, tmp_path):
    dirs, b = two_dirs(start_broker, tmp_path)
    create_topic(b.bootstrap, "a", partitions=2)
    create_topic(b.bootstrap, "b", partitions=1)
    r = describe(b.bootstrap, topics=[{"topic": "a", "partitions": [1, 7]}, {"topic": "gone", "partitions": [0]},
                                      {"topic": "b", "partitions": []}])
    assert [x.log_dir for x in r.results] == [str(d) for d in dirs]
    found = [tp for x in r.results for tp in listed(x)]
    assert found == [("a", 1)]
    assert [t.name for x in r.results for t in x.topics] == ["a"]  # no topic left without partitions

    r = describe(b.bootstrap, topics=[])
    assert [(x.error_code, x.topics) for x in r.results] == [(0, ()), (0, ())]


def test_an_offline_log_dir_answers_kafka_storage_error(start_broker, tmp_path):
    """The second dir goes offline at the broker's first checkpoint: its recovery-point checkpoint is replaced
    by a folder, so writing it fails with EISDIR (a real I/O error, also as root)."""
    dirs, b = two_dirs(start_broker, tmp_path)
    create_topic(b.bootstrap, "t", partitions=2)
    for p in range(2):
        assert produce(b.bootstrap, "t", p, [b"x" * 50] * 4).error_code == 0
    before = {x.log_dir: listed(x) for x in describe(b.bootstrap).results}
    assert all(before.values()), "both dirs hold a partition"
    b.stop()

    checkpoint = dirs[1] / RECOVERY_POINT_CHECKPOINT
    checkpoint.unlink()
    (checkpoint / "in-the-way").mkdir(parents=True)
    b.overrides["listeners"] = "PLAINTEXT://127.0.0.1:0"
    b.start()

    def second_dir_offline():
        r = describe(b.bootstrap)
        return r if r.results[1].error_code == STORAGE_ERROR else None

    r = wait_for(second_dir_offline, "the second log dir to go offline", timeout=30)
    online, offline = r.results
    assert (online.log_dir, online.error_code, listed(online)) == (str(dirs[0]), 0, before[str(dirs[0])])
    assert (offline.log_dir, offline.topics, offline.total_bytes, offline.usable_bytes) == (str(dirs[1]), (), -1, -1)
    assert r.error_code == 0
    # the offline dir's partition is in neither dir when asked for by name
    (p_offline,) = before[str(dirs[1])]
    r = describe(b.bootstrap, topics=[{"topic": "t", "partitions": [0, 1]}])
    assert [tp for x in r.results for tp in listed(x)] == list(before[str(dirs[0])])
    assert p_offline not in listed(r.results[0])

    async def admin():
        async with Admin(bootstrap_servers=b.bootstrap) as a:
            return await a.describe_log_dirs()

    dirs_of = asyncio.run(asyncio.wait_for(admin(), 60))[1]
    assert isinstance(dirs_of[str(dirs[1])].error, errors.KafkaStorageError)
    assert dirs_of[str(dirs[1])].replica_infos == {} and dirs_of[str(dirs[1])].total_bytes is None
    good = dirs_of[str(dirs[0])]
    assert good.error is None and good.replica_infos == {
        TopicPartition(t, p): ReplicaInfo(*info) for (t, p), info in before[str(dirs[0])].items()}


def test_new_logs_avoid_cordoned_dirs(tmp_path):
    """KIP-1066 on one broker's log manager: a cordoned dir takes no new log while another is open, keeps
    the logs it holds, and with every dir cordoned (``*``) the least loaded one still takes a log the
    controller placed here."""
    from tierlog.storage import LogManager
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    cordoned: list[str] = []
    m = LogManager(dirs, cordoned_source=lambda: cordoned)
    m.startup()
    try:
        first = m.get_or_create_log("t", 0)
        assert os.path.dirname(first.dir) == dirs[0]  # both empty: the first
        cordoned[:] = [dirs[1]]
        placed = [os.path.dirname(m.get_or_create_log("t", p).dir) for p in range(1, 4)]
        assert placed == [dirs[0]] * 3 and m.cordoned_log_dirs == {dirs[1]}
        cordoned[:] = ["*"]
        assert os.path.dirname(m.get_or_create_log("u", 0).dir) == dirs[1]  # the least loaded of all
        assert m.get_or_create_log("t", 0) is first  # what a cordoned dir holds stays
    finally:
        m.shutdown()
