"""The issue's round trip, with nothing but the ``tierlog`` command: create a tiered topic, produce 10 MB
from a file, wait until the rolled segments are in the remote tier (and gone from the local disk), consume
from earliest and get the same bytes; then reset a group's offsets and see a consumer of the group resume
exactly there."""

from __future__ import annotations

import json
import random

import pytest

from tests.cli.clilib import as_json, ok, tierlog, wait_for
from tests.harness.tiered import metrics_url

MB = 1 << 20


@pytest.fixture(scope="module")
def b(cli_broker):
    return ["-b", cli_broker.bootstrap]


def _lines(total: int) -> bytes:
    """About ``total`` bytes of lines with every byte value but the newline, empty lines included."""
    rng = random.Random(18)
    out = bytearray()
    while len(out) < total:
        out += rng.randbytes(rng.randrange(0, 400)).replace(b"\n", b"\r") + b"\n"
    return bytes(out)


def test_tiered_round_trip_and_group_reset(b, cli_broker, tmp_path):
    ok("topic", "create", "tiered", "-p", "1", "--config", "remote.storage.enable=true",
       "--config", f"segment.bytes={MB}", "--config", "local.retention.ms=1000", *b)
    data = _lines(10 * MB)
    (tmp_path / "input").write_bytes(data)
    count = data.count(b"\n")
    report = as_json("produce", "tiered", "--file", tmp_path / "input", *b)
    assert report["records"] == count and report["bytes"] == len(data) - count
    assert report["partitions"] == {"0": {"first_offset": 0, "last_offset": count - 1}}

    url = metrics_url(cli_broker)

    def tiered():
        result = tierlog("tier", "status", "--url", url, "--topic", "tiered", "--json")
        if result.returncode != 0:
            return None
        rows = [r for r in json.loads(result.stdout)["partitions"] if r["topic"] == "tiered"]
        # every rolled segment copied (the remote end reaches the active segment) and the local copies gone
        return rows and all(r["copy_lag_segments"] == 0 and r["remote_segments"] >= 8 and r["local_log_start_offset"]
                            > 0 and r["highest_offset_in_remote_storage"] >= r["local_log_start_offset"] - 1
                            for r in rows)

    wait_for(tiered, "the rolled segments in the remote tier and off the local disk", timeout=180)

    out = tierlog("consume", "tiered", "--from", "earliest", "-n", count, *b, text=False, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout == data  # every byte, in order, most of it read from the remote tier

    # a group reads part of the topic, then its offsets are reset (dry run first, then executed)
    assert ok("consume", "tiered", "-g", "resume", "--from", "earliest", "-n", "100", "-f", r"%o\n", *b).stdout \
        .split() == [str(i) for i in range(100)]
    target = count // 2
    plan = as_json("group", "reset-offsets", "resume", "--topic", "tiered", "--to-offset", target, *b)
    assert plan == {"executed": False, "partitions": [{"group": "resume", "topic": "tiered", "partition": 0,
                                                        "current_offset": 100, "new_offset": target}]}
    assert as_json("group", "describe", "resume", *b)["partitions"][0]["current_offset"] == 100  # dry run
    text = ok("group", "reset-offsets", "resume", "--topic", "tiered", "--to-offset", target, "--execute", *b).stdout
    assert "NEW-OFFSET" in text and "committed the new offsets of 1 partition(s)" in text
    described = as_json("group", "describe", "resume", *b)["partitions"][0]
    assert (described["current_offset"], described["lag"]) == (target, count - target)

    resumed = ok("consume", "tiered", "-g", "resume", "-n", "3", "-f", r"%o\n", *b).stdout.split()
    assert resumed == [str(target), str(target + 1), str(target + 2)]
    assert as_json("group", "describe", "resume", *b)["partitions"][0]["current_offset"] == target + 3

    # beyond the end is the end (Kafka's tool does the same), earliest is the log start
    ok("group", "reset-offsets", "resume", "--all-topics", "--to-offset", count * 10, "--execute", *b)
    assert as_json("group", "describe", "resume", *b)["partitions"][0]["lag"] == 0
    ok("group", "reset-offsets", "resume", "--all-topics", "--to-earliest", "--execute", *b)
    assert ok("consume", "tiered", "-g", "resume", "-n", "1", "-f", r"%o\n", *b).stdout == "0\n"
