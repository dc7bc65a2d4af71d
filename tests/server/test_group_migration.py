"""KIP-848's online migration of a group with members, on tierlog and on Apache Kafka 4.4.0 alike.

Two classic confluent-kafka members (eager ``range`` assignor) consume a topic; a ``group.protocol=consumer``
member joins: the group becomes a consumer group (ListGroups' type, ConsumerGroupDescribe with the classic
members as member type 0), the classic members keep consuming through JoinGroup/SyncGroup/Heartbeat inside it,
and the three members' assignments cover every partition once. The consumer member leaves: the group is a
classic group again (``group.consumer.migration.policy`` bidirectional, the default on both). Every member
commits each record after reading it, so no record is read twice or lost across the two conversions.
"""

from __future__ import annotations

import threading

import pytest

from tests.harness.broker import BrokerProcess
from tests.harness.rawclient import RawClient
from tests.harness.waiting import not_yet, wait_until
from tests.peer.diff import plain
from tests.server.groupslib import ASSIGN_AT_ONCE, FAST_HEARTBEATS, committed_offsets, produce, start_kafka44, warm_up
from tierlog.protocol import ApiKey

pytestmark = [pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
              pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning")]

PARTITIONS = 4


@pytest.fixture(scope="module")
def kafka44(kafka_jars, tmp_path_factory):
    server = start_kafka44(tmp_path_factory.mktemp("kafka44"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tierlog(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("migration") / "logs",
                      {**FAST_HEARTBEATS, **ASSIGN_AT_ONCE, "group.initial.rebalance.delay.ms": "0"}).start()
    warm_up(b.bootstrap)
    yield b
    b.stop()


class _Member(threading.Thread):
    """A confluent-kafka consumer polled from its own thread; it commits each record synchronously after
    reading it, so a record it read is never handed to another member."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, protocol: str, seen: list):
        super().__init__(daemon=True)
        self.conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": protocol,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False, "client.id": name}
        if protocol == "classic":
            self.conf.update({"session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
        self.topic, self.name, self.seen = topic, name, seen
        self.stopping = False
        self.error: BaseException | None = None

    def run(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer(self.conf)
        try:
            c.subscribe([self.topic])
            while not self.stopping:
                m = c.poll(0.1)
                if m is None or m.error() is not None:
                    continue
                self.seen.append((self.name, m.partition(), m.offset()))
                c.commit(message=m, asynchronous=False)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e
        finally:
            c.close()

    def stop(self) -> None:
        self.stopping = True
        self.join(30)
        assert not self.is_alive() and self.error is None, self.error


def _group_type(bootstrap: str, group: str) -> str | None:
    c = RawClient(bootstrap)
    try:
        r = plain(c.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []}))
    finally:
        c.close()
    return next((g["group_type"] for g in r["groups"] if g["group_id"] == group), None)


def _describe(bootstrap: str, group: str) -> dict:
    c = RawClient(bootstrap)
    try:
        [g] = plain(c.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"group_ids": [group],
                                                                 "include_authorized_operations": False}))["groups"]
    finally:
        c.close()
    return g


def _classic_members(bootstrap: str, group: str) -> tuple[str, int]:
    c = RawClient(bootstrap)
    try:
        [g] = plain(c.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group],
                                                         "include_authorized_operations": False}))["groups"]
    finally:
        c.close()
    return g["group_state"], len(g["members"])


def _read(seen: list, count: int, what: str) -> None:
    wait_until(lambda: len({(p, o) for _, p, o in seen}) >= count or not_yet(len(seen)), 60, what=what)


def _migration(bootstrap: str) -> dict:
    """Classic members, a consumer member joins and leaves; what a user observes."""
    topic, group = "migration-topic", "migration-group"
    produce(bootstrap, topic, PARTITIONS, 5, create=True)
    seen: list = []
    classic = [_Member(bootstrap, group, topic, f"classic-{i}", "classic", seen) for i in (1, 2)]
    for m in classic:
        m.start()
    _read(seen, 4 * 5, "the classic members read the first records")
    wait_until(lambda: _classic_members(bootstrap, group) == ("Stable", 2)
               or not_yet(_classic_members(bootstrap, group)), 60, what="a stable classic group of two")
    before = _group_type(bootstrap, group)

    new = _Member(bootstrap, group, topic, "consumer-1", "consumer", seen)
    new.start()

    def upgraded():
        g = _describe(bootstrap, group)
        if g["error_code"] != 0 or g["group_state"] != "Stable" or len(g["members"]) != 3:
            return not_yet(g)
        owned = sorted(p for m in g["members"] for tp in m["assignment"]["topic_partitions"]
                       for p in tp["partitions"])
        return owned == list(range(PARTITIONS)) or not_yet(owned)
    wait_until(upgraded, 60, what="the group upgraded, stable, every partition held once")
    g = _describe(bootstrap, group)
    member_types = sorted(m["member_type"] for m in g["members"])
    after_upgrade = _group_type(bootstrap, group)

    mark = len(seen)
    produce(bootstrap, topic, PARTITIONS, 5, start=5)
    _read(seen, 4 * 10, "every record of the second batch")
    readers = {name for name, _, _ in seen[mark:]}

    new.stop()
    wait_until(lambda: _group_type(bootstrap, group) == "classic" or not_yet(_group_type(bootstrap, group)), 60,
               what="the group back to classic")
    wait_until(lambda: _classic_members(bootstrap, group) == ("Stable", 2)
               or not_yet(_classic_members(bootstrap, group)), 60, what="the classic members rebalanced")
    produce(bootstrap, topic, PARTITIONS, 5, start=10)
    _read(seen, 4 * 15, "every record of the third batch")
    for m in classic:
        m.stop()
    read = [(p, o) for _, p, o in seen]
    return {"types": [before, after_upgrade, _group_type(bootstrap, group)], "member_types": member_types,
            "classic members read after the upgrade": sorted(r for r in readers if r.startswith("classic")),
            "read twice": sorted({x for x in read if read.count(x) > 1}),
            "read": sorted(set(read)) == [(p, o) for p in range(PARTITIONS) for o in range(15)],
            "committed": committed_offsets(bootstrap, group) == {(topic, p): 15 for p in range(PARTITIONS)}}


def test_online_upgrade_and_downgrade_as_kafka(tierlog, kafka44):
    expected = {"types": ["classic", "consumer", "classic"], "member_types": [0, 0, 1],
                "classic members read after the upgrade": ["classic-1", "classic-2"], "read twice": [],
                "read": True, "committed": True}
    assert _migration(kafka44.bootstrap) == expected
    assert _migration(tierlog.bootstrap) == expected
