"""Compacted topics tiered (issue 23, part 3; docs/tiered-storage.md, "Compacted topics"), on a single
broker with the local-folder store and with S3 (S3Proxy): keys produced, overwritten and deleted; the cleaner
cleans, cleaned segments upload, a later cleaning replaces uploaded segments; a consumer from the earliest
offset reads exactly the compacted view from the remote tier, also while a replacement is finished and the
segment it replaces not yet marked for deletion (held by the metadata manager, not by timing), across a
kill -9 right there, and after everything settled; `tierlog tier reconcile` finds no orphan."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.harness.broker import BrokerProcess
from tests.harness.tiered import call, metrics_url, remote_manifests, tiered_settings
from tests.tiered.compactlib import (
    CLEANER_SETTINGS,
    cleaned_and_tiered,
    create,
    fill,
    partition_status,
    produce,
    read_earliest,
    rewrite_with_replacement_held,
    wait_until,
)
from tests.tiered.holds import delete_held_rlmm_settings


@pytest.fixture(scope="module", params=["filesystem", "s3proxy"])
def held_broker(request, tmp_path_factory):
    """A tiered broker whose DELETE_SEGMENT_STARTED events wait while ``b.hold`` exists."""
    root = tmp_path_factory.mktemp(f"compacted-{request.param}")
    storage = {}
    if request.param == "s3proxy":
        server = request.getfixturevalue("s3proxy_s3")
        url = f"s3://tiered/{uuid.uuid4().hex}"
        storage = {"remote.log.storage.manager.class.name": "objectstore",
                   **{f"rsm.config.{k}": v for k, v in server.objectstore_configs(url).items()}}
    b = BrokerProcess(root / "logs", tiered_settings(
        root, **CLEANER_SETTINGS, **storage, **delete_held_rlmm_settings(root / "hold", root / "reached"))).start()
    b.root, b.backend = root, request.param
    b.hold, b.reached = root / "hold", root / "reached"
    yield b
    b.kill()


def reconcile_cli(b: BrokerProcess) -> dict:
    out = subprocess.run([sys.executable, "-m", "tierlog", "tier", "reconcile", "--json", "--url", metrics_url(b)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_consumer_reads_the_compacted_view_from_the_remote_tier(held_broker):
    b = held_broker
    topic = "compacted"
    create(b, topic)
    # Phase 1: 200 keys, each once; cleaned segments upload.
    records = produce(b, topic, [(b"k%03d" % i, b"v1-%03d-" % i + b"x" * 80) for i in range(200)])
    last1 = records[-1][0]
    records += fill(b, topic, "a")
    wait_until(lambda: cleaned_and_tiered(b, topic, last1), "phase 1 cleaned and tiered")

    # Phase 2, with DELETE_SEGMENT_STARTED held: half the keys written again, a quarter deleted. The cleaner
    # waits (min.compaction.lag.ms) until all of it is written, so one round cleans it: it shrinks uploaded
    # segments, whose replacements upload; the first replaced segment's mark waits.
    last2, expected = rewrite_with_replacement_held(b, topic, records)
    got = read_earliest(b, topic, expected[-1][0])
    assert got == expected, "while the replaced segment is still finished, readers see the replacement"

    # kill -9 while held, then a start without the hold: both segments are finished when it starts.
    port = b.port
    b.kill()
    b.hold.unlink()
    b.overrides["listeners"] = f"PLAINTEXT://127.0.0.1:{port}"
    b.port = None
    b.start()
    wait_until(lambda: partition_status(b, topic)["ready"], "metadata loaded after the restart")
    assert read_earliest(b, topic, expected[-1][0]) == expected

    # Everything settles: phase 2 cleaned and tiered, replaced segments deleted, only the active segment local.
    s = wait_until(lambda: (st := cleaned_and_tiered(b, topic, last2)) and st["local_log_start_offset"] > last2
                   and st, "phase 2 cleaned, tiered and deleted locally")
    assert s["log_start_offset"] == 0  # compact-only: nothing expires
    got = read_earliest(b, topic, expected[-1][0])
    assert got == expected
    assert any(v is None for _, _, v in got) and len(got) < len(records)
    report = reconcile_cli(b)
    assert report["orphans"] == [] and report["missing"] == [], report
    if b.backend == "filesystem":
        # One remote segment per offset range: replaced segments are gone.
        ranges = [(m.start_offset, m.end_offset) for m in remote_manifests(b.root, topic)]
        assert ranges and all(prev[1] < nxt[0] for prev, nxt in zip(ranges, ranges[1:])), ranges
        assert ranges[0][0] == 0 and ranges[-1][1] >= last2
    assert call(b, "/v1/tier/reconcile")["orphans"] == []
