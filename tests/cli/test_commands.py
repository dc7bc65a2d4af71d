"""Topic, record, group and cluster commands against a live broker, their JSON, and the one-line errors of
every failure a user can cause."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.cli.clilib import as_json, env, ok, one_error_line, tierlog, wait_for
from tests.harness.tiered import metrics_url


@pytest.fixture(scope="module")
def b(cli_broker):
    return ["-b", cli_broker.bootstrap]


def test_topic_lifecycle(b):
    created = as_json("topic", "create", "orders", "-p", "2", "--config", "retention.ms=3600000",
                      "--config", "cleanup.policy=delete", *b)
    assert created == [{"topic": "orders", "created": True, "topic_id": created[0]["topic_id"], "partitions": 2,
                        "replication_factor": 1}]
    assert ok("topic", "create", "orders", "--if-not-exists", *b).stdout == "topic orders exists already\n"

    listed = {t["topic"]: t for t in as_json("topic", "list", *b)}
    assert listed["orders"]["partitions"] == 2 and listed["orders"]["replication_factor"] == 1
    assert not any(t["internal"] for t in listed.values())
    assert any(t["internal"] for t in as_json("topic", "list", "--internal", *b))
    table = ok("topic", "list", *b).stdout.splitlines()
    assert table[0].split() == ["NAME", "PARTITIONS", "REPLICAS", "ID"]
    assert "\x1b" not in "".join(table)  # not a terminal: plain text
    assert any(line.split()[:3] == ["orders", "2", "1"] for line in table[1:])

    ok("produce", "orders", "--partition", "1", *b, input="a\nb\nc\n")
    [d] = as_json("topic", "describe", "orders", *b)
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"], p["log_start_offset"], p["log_end_offset"])
            for p in d["partitions"]] == [(0, 1, [1], [1], 0, 0), (1, 1, [1], [1], 0, 3)]
    configs = {c["name"]: (c["value"], c["source"]) for c in d["configs"]}
    assert configs["retention.ms"] == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    assert all(source != "DEFAULT_CONFIG" for _, source in configs.values())
    text = ok("topic", "describe", "orders", *b).stdout
    assert "PARTITION  LEADER  REPLICAS  ISR" in text and "retention.ms" in text

    altered = as_json("topic", "alter-config", "orders", "-s", "retention.ms=7200000", "-d", "cleanup.policy", *b)
    assert altered["configs"] == {"retention.ms": "7200000"}
    assert as_json("topic", "add-partitions", "orders", "-p", "4", *b)["partitions"] == 4
    assert len(as_json("topic", "describe", "orders", *b)[0]["partitions"]) == 4

    assert ok("topic", "delete", "orders", *b).stdout == "deleted topic orders\n"
    assert "orders" not in {t["topic"] for t in as_json("topic", "list", *b)}


def test_produce_keys_headers_and_consume_with_a_format(b):
    ok("topic", "create", "keyed", "-p", "3", *b)
    lines = "".join(f"user-{i % 4}:event {i}\n" for i in range(40))
    report = as_json("produce", "keyed", "--key-separator", ":", "-H", "source=cli", "-H", "v=2", "--acks", "1",
                     "--compression", "zstd", *b, input=lines)
    assert report["records"] == 40 and report["bytes"] == len(lines) - 2 * 40  # keys and values
    out = ok("consume", "keyed", "--from", "earliest", "-n", "40", "-f", r"%k|%v|%p|%o|%h\n", *b).stdout
    rows = [line.split("|") for line in out.splitlines()]
    assert sorted(r[1] for r in rows) == sorted(f"event {i}" for i in range(40))
    assert all(r[4] == "source=cli,v=2" for r in rows)
    by_key: dict = {}
    for key, _, partition, _, _ in rows:  # the same key always lands on the same partition
        by_key.setdefault(key, set()).add(partition)
    assert all(len(parts) == 1 for parts in by_key.values()) and len(by_key) == 4
    for p in range(3):  # offsets within a partition come in order, from 0
        offsets = [int(r[3]) for r in rows if r[2] == str(p)]
        assert offsets == list(range(len(offsets)))


def test_consume_from_an_offset_a_time_and_latest(b):
    ok("topic", "create", "timed", *b)
    ok("produce", "timed", *b, input="".join(f"r{i}\n" for i in range(5)))
    middle = int(time.time() * 1000) + 1
    wait_for(lambda: int(time.time() * 1000) > middle + 5, "the clock to move on", every=0.01)
    ok("produce", "timed", *b, input="".join(f"r{i}\n" for i in range(5, 10)))
    assert ok("consume", "timed", "--from", "7", "--timeout", "2", *b).stdout == "r7\nr8\nr9\n"
    assert ok("consume", "timed", "--from", "400", "--timeout", "1", *b).stdout == ""  # past the end: the end
    assert ok("consume", "timed", "--from", f"@{middle}", "-n", "5", *b).stdout.split() == \
        [f"r{i}" for i in range(5, 10)]
    iso = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(middle / 1000 - 3600))  # an hour before: everything
    assert len(ok("consume", "timed", "--from", f"@{iso}", "-n", "10", *b).stdout.split()) == 10
    assert ok("consume", "timed", "--timeout", "1", *b).stdout == ""  # default: latest


def test_produce_a_whole_file_as_one_record(b, tmp_path):
    ok("topic", "create", "files", *b)
    payload = bytes(range(256)) * 40 + b"\n\nend"
    (tmp_path / "blob").write_bytes(payload)
    assert as_json("produce", "files", "--file", tmp_path / "blob", "--whole", *b)["records"] == 1
    out = tierlog("consume", "files", "--from", "earliest", "-n", "1", "-f", "%v", *b, text=False)
    assert out.returncode == 0 and out.stdout == payload


def test_produce_that_fails_says_how_many_records_were_acknowledged(b):
    ok("topic", "create", "bounded", "--config", "max.message.bytes=1000", *b)

    def end_offset() -> int:
        return as_json("topic", "describe", "bounded", *b)[0]["partitions"][0]["log_end_offset"]

    proc = subprocess.Popen([sys.executable, "-m", "tierlog", "produce", "bounded", *b], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(), text=True)
    try:
        proc.stdin.write("".join(f"small {i}\n" for i in range(10)))
        proc.stdin.flush()
        # lines are sent as they arrive: the first ten are written before the one the topic refuses is read
        wait_for(lambda: end_offset() == 10, "the first ten records written")
        out, err = proc.communicate("x" * 2000 + "\n", timeout=120)
    finally:
        proc.kill()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    one_error_line(result, "10 of 11 record(s) acknowledged, 1 not acknowledged")
    assert result.returncode == 1 and out == ""
    # the acknowledged ones are written, once; the refused one is not
    assert ok("consume", "bounded", "--from", "earliest", "--timeout", "2", *b).stdout.splitlines() == \
        [f"small {i}" for i in range(10)]


def test_cluster_info(b, cli_broker):
    ok("topic", "create", "counted", "-p", "3", *b)
    info = as_json("cluster", "info", *b)
    assert info["controller_id"] == 1 and info["cluster_id"]
    # one node: itself the controller, leading and hosting every partition
    total = info["partitions"]
    assert total >= 3
    assert info["brokers"] == [{"id": 1, "host": "127.0.0.1", "port": cli_broker.port, "rack": None, "alive": True,
                                "controller": True, "leaders": total, "partitions": total}]
    assert info["internal_topics"] >= 1 and info["topics"] >= 1 and info["offline_partitions"] == []
    lines = ok("cluster", "info", *b).stdout.splitlines()
    assert f"cluster id   {info['cluster_id']}" in lines and "controller   1" in lines
    assert f"partitions   {total}, 0 offline (without a leader), 0 under-replicated (ISR smaller than the replicas)" \
        in lines
    header = [line.split() for line in lines].index(
        ["BROKER", "ADDRESS", "RACK", "STATE", "CONTROLLER", "LEADERS", "PARTITIONS"])
    assert lines[header + 1].split() == ["1", f"127.0.0.1:{cli_broker.port}", "-", "alive", "yes", str(total),
                                         str(total)]
    assert "Offline partitions:" not in lines


def test_tier_status_finds_each_brokers_endpoint_through_the_cluster(b, cli_broker):
    """Without --url, tier status learns the brokers from the cluster's metadata and each one's endpoint from
    its metrics.host and metrics.port (DescribeConfigs): here the one broker, at the port the fixture gave it."""
    ok("topic", "create", "shown", "--config", "remote.storage.enable=true", *b)

    def ready():  # the remote log metadata manager starts once the broker is ready (KIP-1197): loading till then
        merged = as_json("tier", "status", "--topic", "shown", *b)
        return merged if all(x["state"] == "ready" for x in merged["brokers"]) else None
    merged = wait_for(ready, "the broker's remote log metadata loaded")
    assert [(x["node_id"], x["url"], x["error"], x["state"]) for x in merged["brokers"]] == [
        (1, metrics_url(cli_broker), None, "ready")]
    assert [(r["topic"], r["partition"], r["broker"], r["role"]) for r in merged["partitions"]] == [
        ("shown", 0, 1, "leader")]
    lines = ok("tier", "status", "--topic", "shown", *b).stdout.splitlines()
    assert lines[0].startswith("broker 1: ready") and lines[1].split()[:3] == ["TOPIC", "PART", "BROKER"]
    assert lines[2].split()[:5] == ["shown", "0", "1", "ready", "leader"]


def test_group_list_describe_lag_and_delete(b):
    ok("topic", "create", "lagged", *b)
    ok("produce", "lagged", *b, input="".join(f"m{i}\n" for i in range(30)))
    assert ok("consume", "lagged", "-g", "readers", "--from", "earliest", "-n", "12", *b).stdout.split() == \
        [f"m{i}" for i in range(12)]
    assert {"group": "readers", "type": "consumer", "state": "Empty", "group_type": "classic"} in \
        as_json("group", "list", *b)
    d = as_json("group", "describe", "readers", *b)
    assert d["state"] == "Empty" and d["members"] == []
    assert [(p["topic"], p["partition"], p["current_offset"], p["log_end_offset"], p["lag"]) for p in d["partitions"]] \
        == [("lagged", 0, 12, 30, 18)]
    text = ok("group", "describe", "readers", *b).stdout
    assert "CURRENT-OFFSET  LOG-END-OFFSET  LAG" in text and "total lag 18" in text
    assert ok("group", "delete", "readers", *b).stdout == "deleted group readers\n"
    one_error_line(tierlog("group", "describe", "readers", *b), "GROUP_ID_NOT_FOUND")


# ------------------------------------------------------------------------------------------ errors


def test_unknown_topic(b, cli_broker):
    """Every command that takes a topic fails on one that does not exist, with Kafka's error and the same advice."""
    for args in (("topic", "describe", "nope"), ("produce", "nope"), ("consume", "nope"), ("topic", "delete", "nope"),
                 ("topic", "alter-config", "nope", "-s", "retention.ms=1"),
                 ("topic", "add-partitions", "nope", "-p", "2"),
                 ("group", "reset-offsets", "g", "--topic", "nope", "--to-earliest"),
                 ("tier", "status", "--topic", "nope"),
                 ("tier", "status", "--topic", "nope", "--url", metrics_url(cli_broker))):
        result = tierlog(*args, *b, input="")
        assert result.returncode == 1, (args, result)
        one_error_line(result, "UNKNOWN_TOPIC_OR_PARTITION", "tierlog topic list")


@pytest.mark.parametrize("args", [("topic", "describe", "piped"), ("topic", "list"), ("cluster", "info", "--json"),
                                  ("consume", "piped", "--from", "earliest", "-n", "3"), ("tier", "status")])
def test_a_reader_that_went_away_ends_the_command_quietly(b, args):
    """``tierlog ... | head``: once the reader is gone the command stops, prints nothing and exits 141 (as a Unix
    tool ended by SIGPIPE); the pipe's reading end is closed before the command writes, so it always meets it."""
    ok("topic", "create", "piped", "--if-not-exists", *b)
    ok("produce", "piped", *b, input="a\nb\nc\n")
    read, write = os.pipe()
    os.close(read)
    try:
        result = subprocess.run([sys.executable, "-m", "tierlog", *args, *b], stdout=write, stderr=subprocess.PIPE,
                                env=env(), text=True, timeout=120)
    finally:
        os.close(write)
    assert (result.returncode, result.stderr) == (141, "")


def test_topic_exists_invalid_config_invalid_partitions(b):
    ok("topic", "create", "taken", *b)
    one_error_line(tierlog("topic", "create", "taken", *b), "TOPIC_ALREADY_EXISTS", "--if-not-exists")
    line = one_error_line(tierlog("topic", "create", "bad", "--config", "retention.ms=soon", *b), "INVALID_CONFIG")
    assert "retention.ms" in line
    one_error_line(tierlog("topic", "create", "bad", "--config", "no.such.setting=1", *b), "INVALID_CONFIG",
                   "no.such.setting")
    one_error_line(tierlog("topic", "create", "bad", "-r", "3", *b), "INVALID_REPLICATION_FACTOR",
                   "--replication-factor 1")
    one_error_line(tierlog("topic", "add-partitions", "taken", "-p", "1", *b), "INVALID_PARTITIONS")
    one_error_line(tierlog("consume", "taken", "--partition", "5", *b), "partition 5 of topic taken does not exist")
    one_error_line(tierlog("produce", "taken", "--file", "/no/such/file", *b), "/no/such/file")
    assert "bad" not in {t["topic"] for t in as_json("topic", "list", *b)}


def test_group_not_empty_and_unknown_group(b, cli_broker):
    ok("topic", "create", "busy", *b)
    ok("produce", "busy", *b, input="x\n")
    member = subprocess.Popen([sys.executable, "-m", "tierlog", "consume", "busy", "-g", "busy-group", *b],
                              env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: as_json("group", "describe", "busy-group", *b)["state"] == "Stable"
                 if tierlog("group", "describe", "busy-group", *b).returncode == 0 else False, "a member")
        for args in (("reset-offsets", "busy-group", "--topic", "busy", "--to-earliest", "--execute"),
                     ("delete", "busy-group")):
            one_error_line(tierlog("group", *args, *b), "NON_EMPTY_GROUP", "stop the group's consumers")
    finally:
        member.terminate()
        member.wait(30)
    one_error_line(tierlog("group", "delete", "never-was", *b), "GROUP_ID_NOT_FOUND")
    one_error_line(tierlog("group", "reset-offsets", "never-was", "--all-topics", "--to-latest", *b),
                   "no committed offsets")


def test_an_unreachable_broker_fails_fast():
    with socket.socket() as s:  # a port nothing listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for args in (("topic", "list"), ("produce", "t"), ("consume", "t"), ("group", "list"), ("cluster", "info")):
        started = time.monotonic()
        line = one_error_line(tierlog(*args, "-b", f"127.0.0.1:{port}", "--timeout", "1", input=""),
                              f"cannot reach the broker at 127.0.0.1:{port} within 1 s", "--timeout")
        assert "(connection refused)" in line or "(cannot connect)" in line
        assert time.monotonic() - started < 20  # the interpreter starts too; a hang would take minutes


def test_a_broker_that_never_answers_fails_within_the_timeout():
    with socket.socket() as s:  # accepts connections (the kernel's backlog) but never answers
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        port = s.getsockname()[1]
        started = time.monotonic()
        one_error_line(tierlog("topic", "list", "-b", f"127.0.0.1:{port}", "--timeout", "1.5"),
                       "within 1.5 s", "no answer to requests")
        assert time.monotonic() - started < 20


def test_broker_address_from_the_broker_configuration(tmp_path, cli_broker):
    props = tmp_path / "server.properties"
    props.write_text(f"listeners=PLAINTEXT://127.0.0.1:{cli_broker.port}\n")
    assert as_json("cluster", "info", "-c", props)["brokers"][0]["port"] == cli_broker.port
    one_error_line(tierlog("cluster", "info", "-c", tmp_path / "missing.properties"), "missing.properties")
