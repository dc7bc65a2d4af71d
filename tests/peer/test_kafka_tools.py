"""Apache Kafka's own command-line tools against tierlog, each also run against Kafka itself.

The same assertions hold for both peers (``peer`` is parametrized), so a failure on tierlog alone
is a tierlog bug, never a wrong expectation.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

from kafka import KafkaProducer

from tests.harness.rawclient import RawClient, create_topic, produce, unique
from tests.harness.waiting import TimedOut, wait_until
from tierlog.protocol import ApiKey
from tierlog.records import read_header


def _describe(kafka_tool, bootstrap, topic) -> tuple[dict, list[dict]]:
    out = kafka_tool("TopicCommand", "--bootstrap-server", bootstrap, "--describe", "--topic", topic).stdout
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    head = dict(re.findall(r"(\w+): ([^\t]*)", lines[0]))
    parts = [dict(re.findall(r"(\w+): ([^\t]*)", line)) for line in lines[1:]]
    return head, parts


def _configs(head: dict) -> dict:
    return dict(kv.split("=", 1) for kv in head["Configs"].split(",") if kv)


def _topics(kafka_tool, bootstrap) -> list[str]:
    return kafka_tool("TopicCommand", "--bootstrap-server", bootstrap, "--list").stdout.split()


def test_topic_command_create_describe_alter_delete(peer, kafka_tool):
    b, topic = peer.bootstrap, unique("tools-topics")
    out = kafka_tool("TopicCommand", "--bootstrap-server", b, "--create", "--topic", topic, "--partitions", "2",
                     "--replication-factor", "1", "--config", "retention.ms=3600000",
                     "--config", "max.message.bytes=64000").stdout
    assert out.strip() == f"Created topic {topic}."
    assert topic in _topics(kafka_tool, b)

    head, parts = _describe(kafka_tool, b, topic)
    assert head["Topic"] == topic and len(head["TopicId"]) == 22
    assert (head["PartitionCount"], head["ReplicationFactor"]) == ("2", "1")
    configs = _configs(head)
    assert configs["retention.ms"] == "3600000" and configs["max.message.bytes"] == "64000"
    assert [(p["Partition"], p["Leader"], p["Replicas"], p["Isr"]) for p in parts] == [
        ("0", "1", "1", "1"), ("1", "1", "1", "1")]

    kafka_tool("TopicCommand", "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", "4")
    parts = _eventually(lambda: [p["Partition"] for p in _describe(kafka_tool, b, topic)[1]], ["0", "1", "2", "3"])
    assert parts == ["0", "1", "2", "3"]

    shrink = kafka_tool("TopicCommand", "--bootstrap-server", b, "--alter", "--topic", topic, "--partitions", "3",
                        check=False)
    assert shrink.returncode == 1
    assert f"The topic {topic} currently has 4 partition(s); 3 would not be an increase." in shrink.stdout
    again = kafka_tool("TopicCommand", "--bootstrap-server", b, "--create", "--topic", topic, check=False)
    assert again.returncode == 1 and f"Topic '{topic}' already exists." in again.stdout

    kafka_tool("TopicCommand", "--bootstrap-server", b, "--delete", "--topic", topic)
    wait_until(lambda: topic not in _topics(kafka_tool, b), 15, interval=0.5, what="the deleted topic unlisted")
    gone = kafka_tool("TopicCommand", "--bootstrap-server", b, "--describe", "--topic", topic, check=False)
    assert gone.returncode == 1 and f"Topic '{topic}' does not exist as expected" in gone.stdout


def _eventually(describe, expected, timeout: float = 15):
    """Kafka applies config changes through its metadata log, so a describe right after an alter
    may still show the old value; clients poll, and so do these tests (on both peers)."""
    seen = []

    def described():
        seen.append(describe())
        return seen[-1] == expected

    with contextlib.suppress(TimedOut):  # the caller compares the last description
        wait_until(described, timeout, interval=0.2, what=f"{expected!r} described")
    return seen[-1]


def _config_lines(stdout: str) -> dict[str, str]:
    """``  key=value sensitive=false synonyms={...}`` lines of ConfigCommand --describe."""
    out = {}
    for line in stdout.splitlines():
        m = re.match(r"\s+([\w.]+)=(.*?) sensitive=(true|false) synonyms=\{(.*)\}$", line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def test_config_command_topics(peer, kafka_tool):
    b, topic = peer.bootstrap, unique("tools-configs")
    create_topic(b, topic)
    base = ["--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic]
    out = kafka_tool("ConfigCommand", *base, "--alter", "--add-config", "retention.ms=1000,max.message.bytes=2000")
    assert out.stdout.strip() == f"Completed updating config for topic {topic}."
    described = kafka_tool("ConfigCommand", *base, "--describe").stdout
    assert described.splitlines()[0] == f"Dynamic configs for topic {topic} are:"
    expected = {"retention.ms": "1000", "max.message.bytes": "2000"}
    assert _eventually(lambda: _config_lines(kafka_tool("ConfigCommand", *base, "--describe").stdout),
                       expected) == expected

    kafka_tool("ConfigCommand", *base, "--alter", "--delete-config", "retention.ms")
    assert _eventually(lambda: _config_lines(kafka_tool("ConfigCommand", *base, "--describe").stdout),
                       {"max.message.bytes": "2000"}) == {"max.message.bytes": "2000"}

    every = _config_lines(kafka_tool("ConfigCommand", *base, "--describe", "--all").stdout)
    assert every["max.message.bytes"] == "2000"
    assert every["retention.ms"] == "604800000" and every["segment.bytes"] == "1073741824"
    assert every["cleanup.policy"] == "delete" and every["compression.type"] == "producer"

    bad = kafka_tool("ConfigCommand", *base, "--alter", "--add-config", "segment.bytes=abc", check=False)
    assert bad.returncode == 1
    assert "InvalidConfigurationException: Invalid value abc for configuration segment.bytes" in bad.stderr


def test_config_command_brokers(peer, kafka_tool):
    b = peer.bootstrap
    node = ["--bootstrap-server", b, "--entity-type", "brokers", "--entity-name", "1"]
    default = ["--bootstrap-server", b, "--entity-type", "brokers", "--entity-default"]
    every = _config_lines(kafka_tool("ConfigCommand", *node, "--describe", "--all").stdout)
    assert every["log.retention.hours"] == "168" and every["num.partitions"] == "1"
    assert every["message.max.bytes"] == "1048588" and every["offsets.topic.replication.factor"] == "1"
    try:
        out = kafka_tool("ConfigCommand", *node, "--alter", "--add-config", "log.cleaner.min.compaction.lag.ms=5000")
        assert out.stdout.strip() == "Completed updating config for broker 1."
        expected = {"log.cleaner.min.compaction.lag.ms": "5000"}
        assert _eventually(lambda: _config_lines(kafka_tool("ConfigCommand", *node, "--describe").stdout),
                           expected) == expected
        out = kafka_tool("ConfigCommand", *default, "--alter", "--add-config", "log.cleaner.delete.retention.ms=90000")
        assert out.stdout.strip() == "Completed updating default config for brokers in the cluster."
        cluster = _eventually(lambda: _config_lines(kafka_tool("ConfigCommand", *default, "--describe").stdout)
                              .get("log.cleaner.delete.retention.ms"), "90000")
        assert cluster == "90000"
    finally:
        kafka_tool("ConfigCommand", *node, "--alter", "--delete-config", "log.cleaner.min.compaction.lag.ms",
                   check=False)
        kafka_tool("ConfigCommand", *default, "--alter", "--delete-config", "log.cleaner.delete.retention.ms",
                   check=False)
    assert _eventually(lambda: _config_lines(kafka_tool("ConfigCommand", *node, "--describe").stdout), {}) == {}
    static = kafka_tool("ConfigCommand", *node, "--alter", "--add-config", "log.dirs=/elsewhere", check=False)
    assert static.returncode == 1
    assert "InvalidRequestException: Cannot update these configs dynamically" in static.stderr


def test_console_producer_and_consumer_round_trip(peer, kafka_tool):
    b, topic = peer.bootstrap, unique("tools-console")
    create_topic(b, topic)
    lines = [f"key{i}:value {i} ü" for i in range(20)]
    kafka_tool("ConsoleProducer", "--bootstrap-server", b, "--topic", topic, "--property", "parse.key=true",
               "--property", "key.separator=:", input="\n".join(lines) + "\n")
    out = kafka_tool("ConsoleConsumer", "--bootstrap-server", b, "--topic", topic, "--from-beginning",
                     "--max-messages", "20", "--timeout-ms", "20000", "--property", "print.key=true",
                     "--property", "print.offset=true", "--property", "key.separator=|")
    got = [line for line in out.stdout.splitlines() if line.startswith("Offset:")]
    assert got == [f"Offset:{i}|key{i}|value {i} ü" for i in range(20)]
    assert "Processed a total of 20 messages" in out.stderr


def test_get_offset_shell(peer, kafka_tool):
    b, topic = peer.bootstrap, unique("tools-offsets")
    create_topic(b, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=b, linger_ms=0)
    t0 = 1_700_000_000_000
    # Partition 0: timestamps 0, 10, ..., 90 after t0 with a peak at offset 6; partition 1: 3 records.
    stamps = [t0 + 10 * i for i in range(10)]
    stamps[6] = t0 + 500
    for ts in stamps:
        producer.send(topic, b"x", partition=0, timestamp_ms=ts).get(timeout=10)
    for i in range(3):
        producer.send(topic, b"y", partition=1, timestamp_ms=t0 + i).get(timeout=10)
    producer.close()

    def offsets(*args):
        out = kafka_tool("GetOffsetShell", "--bootstrap-server", b, "--topic", topic, *args).stdout
        return [line for line in out.splitlines() if line]

    assert offsets() == [f"{topic}:0:10", f"{topic}:1:3"]
    assert offsets("--time", "-2") == [f"{topic}:0:0", f"{topic}:1:0"]
    assert offsets("--time", "max-timestamp") == [f"{topic}:0:6", f"{topic}:1:2"]
    assert offsets("--time", str(t0 + 25)) == [f"{topic}:0:3"]  # partition 1 has no record that late
    assert offsets("--time", "-4", "--partitions", "0") == [f"{topic}:0:0"]


def test_log_dirs_command(peer, kafka_tool):
    """kafka-log-dirs --describe: the peer's one log dir with the topic's partitions, sized as their segment
    files on disk; --broker-list names the brokers to ask and refuses one that does not exist."""
    b, topic = peer.bootstrap, unique("tools-logdirs")
    create_topic(b, topic, partitions=2)
    assert produce(b, topic, 1, [b"z" * 100] * 5).error_code == 0

    def describe(*args):
        out = kafka_tool("LogDirsCommand", "--bootstrap-server", b, "--describe", *args).stdout.splitlines()
        assert out[:2] == ["Querying brokers for log directories information",
                           "Received log directory information from brokers 1"], out
        return json.loads(out[2])

    answer = describe("--topic-list", topic)
    assert answer["version"] == 1 and [x["broker"] for x in answer["brokers"]] == [1]
    (log_dir,) = answer["brokers"][0]["logDirs"]
    assert Path(log_dir["logDir"]) == peer.log_dir and log_dir["error"] is None
    on_disk = [sum(f.stat().st_size for f in (peer.log_dir / f"{topic}-{p}").glob("*.log")) for p in (0, 1)]
    assert on_disk[0] == 0 and on_disk[1] > 500
    assert sorted(log_dir["partitions"], key=lambda p: p["partition"]) == [
        {"partition": f"{topic}-{p}", "size": on_disk[p], "offsetLag": 0, "isFuture": False} for p in (0, 1)]

    every = describe("--broker-list", "1")["brokers"][0]["logDirs"][0]["partitions"]
    assert {f"{topic}-0", f"{topic}-1"} <= {p["partition"] for p in every}
    missing = kafka_tool("LogDirsCommand", "--bootstrap-server", b, "--describe", "--broker-list", "1,7", check=False)
    assert missing.returncode == 1
    assert "The given brokers do not exist from --broker-list: 7. Current existent brokers: 1" in missing.stdout + \
        missing.stderr


def test_java_idempotent_producer_and_consumer_group(peer, kafka_tool):
    b, topic, group = peer.bootstrap, unique("tools-java"), unique("tools-group")
    create_topic(b, topic, partitions=2)
    perf = kafka_tool("ProducerPerformance", "--topic", topic, "--num-records", "2000", "--record-size", "200",
                      "--throughput", "-1", "--producer-props", f"bootstrap.servers={b}", "acks=all",
                      "compression.type=lz4", "linger.ms=5")
    assert re.search(r"^2000 records sent", perf.stdout, re.M), perf.stdout
    raw = RawClient(b)
    try:
        ends = raw.request(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
            {"name": topic, "partitions": [{"partition_index": i, "timestamp": -1} for i in range(2)]}]})
        assert sum(p.offset for p in ends.topics[0].partitions) == 2000
        # Every batch came from one idempotent producer (the Java producer's default).
        fetched = raw.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                        "partition_max_bytes": 1 << 20}]}]})
        assert read_header(fetched.responses[0].partitions[0].records).producer_id >= 0
    finally:
        raw.close()

    out = kafka_tool("ConsoleConsumer", "--bootstrap-server", b, "--topic", topic, "--group", group,
                     "--from-beginning", "--max-messages", "2000", "--timeout-ms", "30000")
    assert len(out.stdout.splitlines()) == 2000
    described = kafka_tool("ConsumerGroupCommand", "--bootstrap-server", b, "--describe", "--group", group).stdout
    rows = [line.split() for line in described.splitlines() if line.startswith(group)]
    assert sorted((r[1], r[2], r[5]) for r in rows) == [(topic, "0", "0"), (topic, "1", "0")]  # lag 0
    assert sum(int(r[3]) for r in rows) == 2000

    consumed = kafka_tool("ConsumerPerformance", "--bootstrap-server", b, "--topic", topic, "--messages", "2000",
                          "--timeout", "30000").stdout
    row = consumed.strip().splitlines()[-1].split(", ")
    assert row[4] == "2000", consumed  # data.consumed.in.nMsg
