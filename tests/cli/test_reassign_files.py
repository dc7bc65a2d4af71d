"""Kafka's files of kafka-reassign-partitions and kafka-leader-election as tierlog reads and writes them, the
throttled replicas it derives from a move, and the commands refusing a bad file, without a broker (the
commands against a cluster are tests/cluster/test_reassign_commands.py's)."""

from __future__ import annotations

import pytest

from tests.cli.clilib import one_error_line, tierlog
from tierlog.client.admin import PartitionReassignment
from tierlog.client.types import TopicPartition as TP
from tierlog.tools import elections, reassign


def test_a_plan_in_kafkas_format_round_trips():
    text = ('{"version":1,"partitions":[{"topic":"b","partition":10,"replicas":[3,1],"log_dirs":["any","any"]},'
            '{"topic":"a","partition":2,"replicas":[1,2]}]}')
    plan = reassign.parse_plan(text)
    assert plan.partitions == [(TP("b", 10), [3, 1]), (TP("a", 2), [1, 2])] and plan.log_dirs == {}
    reassign.check_executable(plan)
    # Kafka's layout: sorted by topic then partition, compact, log dirs "any"
    assert reassign.to_json(reassign.format_plan(plan.targets)) == (
        '{"version":1,"partitions":[{"topic":"a","partition":2,"replicas":[1,2],"log_dirs":["any","any"]},'
        '{"topic":"b","partition":10,"replicas":[3,1],"log_dirs":["any","any"]}]}')
    assert reassign.parse_plan('{"partitions":[]}').partitions == []  # version 1 when left out


@pytest.mark.parametrize("text, fragment", [
    ("{", "the reassignment file is not valid JSON"),
    ("[]", "must be a JSON object"),
    ('{"version":2,"partitions":[]}', "version 2"),
    ('{"partitions":[{"topic":"a","partition":"0","replicas":[1]}]}', '"partition" of'),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1,"2"]}]}', "must be a list of broker ids"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}',
     "Size of replicas list [1, 2] is different from size of log dirs list ['any'] for partition a-0"),
])
def test_a_bad_plan_says_what_is_wrong(text, fragment):
    with pytest.raises(ValueError, match="; ") as e:
        reassign.parse_plan(text)
    assert fragment in str(e.value)


@pytest.mark.parametrize("text, fragment", [
    ('{"partitions":[]}', "Partition reassignment list cannot be empty"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[]}]}', "Partition replica list cannot be empty"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1]},{"topic":"a","partition":0,"replicas":[2]}]}',
     "duplicate topic partitions: a-0"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[2,1,2]}]}', "a-0 contains multiple entries for 2"),
    ('{"partitions":[{"topic":"a","partition":0,"replicas":[1],"log_dirs":["/data"]}]}', "no AlterReplicaLogDirs"),
])
def test_a_plan_that_cannot_execute_is_refused(text, fragment):
    with pytest.raises(ValueError, match=fragment):
        reassign.check_executable(reassign.parse_plan(text))


def test_topics_to_move_and_broker_lists():
    assert reassign.parse_topics('{"version":1,"topics":[{"topic":"a"},{"topic":"b"}]}') == ["a", "b"]
    with pytest.raises(ValueError, match="duplicate entries: a"):
        reassign.parse_topics('{"topics":[{"topic":"a"},{"topic":"a"}]}')
    with pytest.raises(ValueError, match="names no topic"):
        reassign.parse_topics('{"version":1}')
    assert reassign.parse_broker_list("3,1,2") == [3, 1, 2]
    with pytest.raises(ValueError, match="duplicate entries: 1"):
        reassign.parse_broker_list("1,2,1")
    with pytest.raises(ValueError, match="not a comma-separated list"):
        reassign.parse_broker_list("1;2")


def test_throttled_replicas_are_kafkas():
    moving = reassign.moves(
        {TP("t", 2): PartitionReassignment((4, 1, 2), (4,), (2,))},  # in progress: 1,2 -> 4,1
        {TP("t", 10): [3, 1], TP("t", 2): [5, 1]},  # the plan replaces 2's target
        {TP("t", 10): [1, 2], TP("t", 2): [4, 1, 2]})
    # sources of one in progress are its original replicas; destinations what the new target adds
    assert moving == {TP("t", 2): ({1, 2}, {5}), TP("t", 10): ({1, 2}, {3})}
    # sorted as text, as Kafka's TreeSet of strings sorts them ("10:1" before "2:1")
    assert reassign.throttled_replicas(moving) == {"t": ("10:1,10:2,2:1,2:2", "10:3,2:5")}


def test_the_election_file():
    assert elections.parse_partitions('{"partitions":[{"topic":"a","partition":1},{"topic":"b","partition":0}]}') \
        == [TP("a", 1), TP("b", 0)]
    for text, fragment in [("", "not valid JSON"), ("{}", 'missing "partitions" field'),
                           ('{"partitions":[{"topic":"a"}]}', "is no partition"),
                           ('{"partitions":[]}', "names no partition"),
                           ('{"partitions":[{"topic":"a","partition":1},{"topic":"a","partition":1}]}',
                            "duplicate partitions: a-1")]:
        with pytest.raises(ValueError, match="; ") as e:
            elections.parse_partitions(text)
        assert fragment in str(e.value)


def test_the_commands_refuse_a_bad_file_before_connecting(tmp_path):
    """One line on standard error and exit 2, without a broker: the address given listens nowhere."""
    nowhere = ["-b", "127.0.0.1:1", "--timeout", "1"]

    def plan(doc: str) -> str:
        path = tmp_path / f"plan-{len(list(tmp_path.iterdir()))}.json"
        path.write_text(doc)
        return str(path)

    for doc, extra, fragment in [
        ('{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1,2]', (),
         "the reassignment file is not valid JSON"),
        ('{"partitions":[{"topic":"a","partition":0,"replicas":[1,1]}]}', (), "a-0 contains multiple entries for 1"),
        ('{"partitions":[{"topic":"a","partition":0,"replicas":[1],"log_dirs":["/d"]}]}', (), "no AlterReplicaLogDirs"),
        ('{"partitions":[{"topic":"a","partition":0,"replicas":[1]}]}', ("--replica-alter-log-dirs-throttle", "1000"),
         "no AlterReplicaLogDirs"),
    ]:
        r = tierlog("reassign", "execute", "--reassignment-json-file", plan(doc), *extra, *nowhere)
        one_error_line(r, fragment)
        assert r.returncode == 2
    r = tierlog("leader-election", "--election-type", "preferred", "--path-to-json-file",
                plan('{"partitions":[{"topic":"a","partition":0},{"topic":"a","partition":0}]}'), *nowhere)
    one_error_line(r, "Replica election data contains duplicate partitions: a-0")
    r = tierlog("leader-election", "--election-type", "sideways", "--all-topic-partitions", *nowhere)
    assert r.returncode == 2 and "invalid choice: 'sideways'" in r.stderr, r
