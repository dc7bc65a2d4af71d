"""tierlog's consumer group coordinator against Kafka 4.4's own classes, run in one JVM
(tests/harness/java/GroupCoordinatorPeer.java): the server-side assignors (UniformAssignor, RangeAssignor)
on the same members, racks and partitions, and the ConsumerGroupRegularExpression records' bytes.

Kafka's assignors ignore racks (KIP-1101 only puts them in the metadata hash); its uniform assignor walks
members in its member map's order and, with one subscription, topics in hash order, so the peer is given
members in member id order and topic ids whose hash order is their name order, tierlog's order. Rounds of
joins and leaves feed each side its own previous target, so a divergence in stickiness shows up in a later
round."""

from __future__ import annotations

import base64
import json
import random
import subprocess
import uuid

import pytest

from tests.harness import ROOT
from tests.harness.java_programs import java_program_command
from tierlog.coordinator.assignors import AssignmentMember, AssignmentTopic, range_assign, uniform_assign
from tierlog.coordinator.consumer_group_records import (
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
)
from tierlog.coordinator.records import decode_key, decode_value, encode_key, encode_value

SOURCE = ROOT / "tests" / "harness" / "java" / "GroupCoordinatorPeer.java"
RACKS = ("rack-a", "rack-b", "rack-c")


def _kafka_id(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


# Uuid(0, k): Kafka's hashCode is k, so its HashSet walks them in k order, which is also their name order.
TOPICS = {uuid.UUID(int=k): AssignmentTopic(uuid.UUID(int=k), f"topic-{k:02d}", n,
                                            {p: frozenset({RACKS[(p + k) % 3], RACKS[(p + k + 1) % 3]})
                                             for p in range(n)})
          for k, n in ((2, 7), (3, 4), (5, 9))}


class KafkaAssignors:
    def __init__(self):
        self.proc = subprocess.Popen(java_program_command(SOURCE, "GroupCoordinatorPeer"), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def ask(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"the Kafka assignor peer ended: {self.proc.stderr.read()}"
        return json.loads(line)

    def assign(self, assignor: str, members: list[AssignmentMember], topics: dict, racks: bool = True) -> dict:
        answer = self.ask({
            "kind": "assign", "assignor": assignor,
            "members": [{"id": m.member_id, "instance": m.instance_id, "rack": m.rack if racks else None,
                         "topics": [_kafka_id(t) for t in sorted(m.topics, key=lambda t: t.int)],
                         "assignment": {_kafka_id(t): list(ps) for t, ps in m.previous.items()}}
                        for m in members],
            "topics": {_kafka_id(t): {"partitions": info.partitions,
                                      "racks": {str(p): sorted(r) for p, r in info.racks.items()} if racks else {}}
                       for t, info in topics.items()}})
        by_id = {_kafka_id(t): t for t in topics}
        return {m: {by_id[t]: tuple(ps) for t, ps in a.items()} for m, a in answer.items()}

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(30)


@pytest.fixture(scope="module")
def kafka():
    peer = KafkaAssignors()
    yield peer
    peer.close()


def _members(rng: random.Random, ids: list[str], previous: dict, subscriptions=None) -> list[AssignmentMember]:
    return [AssignmentMember(m, (subscriptions or {}).get(m, frozenset(TOPICS)), rng.choice((*RACKS, None)),
                             previous.get(m, {}), None) for m in sorted(ids)]


def _non_empty(assignment: dict) -> dict:
    return {m: {t: ps for t, ps in a.items() if ps} for m, a in assignment.items()}


@pytest.mark.parametrize("same_topics", [True, False], ids=["homogeneous", "heterogeneous"])
def test_uniform_assignor_as_kafka_round_by_round(kafka, same_topics):
    """Joins, leaves and a crowd of members, with racks on members and replicas, every member subscribed to
    the same topics or each to its own: the same target as Kafka's at every round, and Kafka's with racks
    the same as without."""
    rng = random.Random(848 if same_topics else 7)
    choices = [frozenset(TOPICS), *(frozenset(rng.sample(list(TOPICS), k)) for k in (1, 1, 2, 2))]
    subscriptions: dict = {}
    previous: dict = {}
    ids = ["m-c", "m-a"]
    mixed = False
    for round_ in range(8):
        for m in ids:
            subscriptions.setdefault(m, frozenset(TOPICS) if same_topics else rng.choice(choices))
        members = _members(rng, ids, previous, subscriptions)
        mixed = mixed or len({m.topics for m in members}) > 1
        ours = _non_empty(uniform_assign(members, TOPICS))
        theirs = kafka.assign("uniform", members, TOPICS)
        assert ours == theirs, f"round {round_}: {ids}"
        if round_ in (0, 5):
            assert kafka.assign("uniform", members, TOPICS, racks=False) == theirs  # racks change nothing
        previous = ours
        if round_ % 3 == 2:
            ids.remove(rng.choice(ids))
        else:
            ids += [f"m-{chr(ord('d') + round_)}{i}" for i in range(rng.randint(1, 3))]
    assert mixed != same_topics


def test_range_assignor_as_kafka(kafka):
    """Static members first by instance id, then the rest by member id; contiguous ranges; racks ignored."""
    rng = random.Random(1101)
    subs = {"s-2": frozenset(TOPICS), "x": frozenset(list(TOPICS)[:2]), "b": frozenset(list(TOPICS)[1:])}
    members = [AssignmentMember(m, subs.get(m, frozenset(TOPICS)), rng.choice(RACKS), {}, inst)
               for m, inst in (("s-2", "i-1"), ("x", None), ("b", None), ("s-1", "i-2"))]
    assert _non_empty(range_assign(members, TOPICS)) == kafka.assign("range", members, TOPICS)
    same = [AssignmentMember(m.member_id, frozenset(TOPICS), m.rack, {}, m.instance_id) for m in members]
    theirs = kafka.assign("range", same, TOPICS)
    assert _non_empty(range_assign(same, TOPICS)) == theirs == kafka.assign("range", same, TOPICS, racks=False)


@pytest.mark.parametrize("group, regex, topics, version, timestamp", [
    ("orders-app", "orders\\..*", ("orders.eu", "orders.us"), 4242, 1_765_000_000_123),
    ("g", "nothing-yet.*", (), 0, 7),
    ("gr\u00fcppe", "t[0-9]+|caf\u00e9", ("caf\u00e9", "t1", "t10"), -1, -1),
])
def test_regular_expression_records_as_kafka_writes_them(kafka, group, regex, topics, version, timestamp):
    """Kafka 4.4's record (type 16, key v0, flexible value v0) and its tombstone: tierlog writes the same
    bytes and reads Kafka's back field by field."""
    theirs = kafka.ask({"kind": "regex_record", "group": group, "regex": regex, "topics": list(topics),
                        "version": version, "timestamp": timestamp})
    key = ConsumerGroupRegularExpressionKey(group, regex)
    value = ConsumerGroupRegularExpressionValue(topics, version, timestamp)
    assert encode_key(key).hex() == theirs["key"] == theirs["tombstone_key"]
    assert encode_value(value).hex() == theirs["value"]
    assert theirs["tombstone_value"] is None
    read = decode_key(bytes.fromhex(theirs["key"]))
    assert read == key and (read.group, read.regex) == (group, regex)
    got = decode_value(read, bytes.fromhex(theirs["value"]))
    assert (got.topics, got.version, got.timestamp) == (topics, version, timestamp)
