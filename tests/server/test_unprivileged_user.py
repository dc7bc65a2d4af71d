"""A broker run as a service account: an unprivileged user (``nobody``) with no home, the install and this
tree read-only to it, and a log dir of its own. It starts, validates produced records with the compiled
kernels (a keyless record on a compacted topic is refused), and serves produce and consume to a real client.
Before the kernels were built at install, numba could not write its cache there and the broker did not
start (``cannot cache function '_varint': no locator available``)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness import ROOT
from tests.harness.broker import BrokerProcess, as_user

USER = "nobody"

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="switching to another user needs root and setpriv")

# What the account may not write: its home, the installed packages, the tierlog package it runs.
_PROBE = """
import os, sys, sysconfig, tierlog
places = [os.path.expanduser("~"), sysconfig.get_paths()["purelib"], os.path.dirname(tierlog.__file__), sys.argv[1]]
for place in places:
    try:
        open(os.path.join(place, "probe"), "w").close()
        print("wrote", place)
    except OSError:
        pass
print("uid", os.getuid())
"""


@pytest.fixture
def folder():
    """A folder the account owns (pytest's tmp_path is under root's 0700 folder)."""
    pw = pwd.getpwnam(USER)
    path = Path(tempfile.mkdtemp(prefix="tierlog-unprivileged-"))
    os.chown(path, pw.pw_uid, pw.pw_gid)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _delivered(producer: Producer, topic: str, records: list[tuple[bytes | None, bytes]]) -> list:
    errors = []
    for key, value in records:
        producer.produce(topic, value, key, on_delivery=lambda err, _msg: errors.append(err))
    assert producer.flush(60) == 0
    return errors


def test_a_broker_runs_as_an_unprivileged_user_without_a_home_or_a_writable_install(folder):
    args, env = as_user(USER, [sys.executable, "-c", _PROBE, str(ROOT)], {**os.environ,
                                                                        "PYTHONPATH": str(ROOT / "src")})
    probe = subprocess.run(args, env=env, cwd=folder, capture_output=True, text=True, timeout=120, check=True)
    assert probe.stdout.split("\n")[:-1] == [f"uid {pwd.getpwnam(USER).pw_uid}"], probe.stdout + probe.stderr

    b = BrokerProcess(folder / "logs", {"auto.create.topics.enable": "false"}, user=USER).start()
    try:
        with open(f"/proc/{b.proc.pid}/status") as status:
            uids = next(line for line in status if line.startswith("Uid:")).split()[1:]
        assert set(uids) == {str(pwd.getpwnam(USER).pw_uid)}
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        for future in admin.create_topics([NewTopic("events", 1, 1),
                                           NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"})]).values():
            future.result(60)
        records = [(b"k%d" % (i % 50), b"v%d" % i * 20) for i in range(2000)]
        for codec in ("none", "lz4"):
            producer = Producer({"bootstrap.servers": b.bootstrap, "compression.type": codec, "linger.ms": 5})
            assert _delivered(producer, "events", records) == [None] * len(records)
            assert _delivered(producer, "compacted", records[:10]) == [None] * 10
            # the validator reads every record: a record without a key has no place on a compacted topic
            refused = _delivered(producer, "compacted", [(None, b"keyless")])
            assert [e.name() for e in refused] == ["INVALID_RECORD"]

        consumer = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "unprivileged", "auto.offset.reset":
                             "earliest", "enable.auto.commit": False})
        consumer.subscribe(["events"])
        got = []
        try:
            while len(got) < 2 * len(records):
                for m in consumer.consume(1000, timeout=30):
                    if m.error():
                        raise KafkaException(m.error())
                    got.append((m.key(), m.value()))
            consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        assert got == records * 2
    finally:
        assert b.stop() == 0, "".join(b.output[-40:])
    assert (folder / "logs" / "events-0").is_dir()
