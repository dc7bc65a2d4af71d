"""A consume-transform-produce processor on confluent-kafka (tests/apps/processor.py), exactly once against
tierlog (one broker, and a cluster of three) and Apache Kafka 4.1: the processor SIGKILLed with a transaction
open and started again (its successor fences it and the open transaction is aborted), and the broker SIGKILLed
with the processor's transaction open and restarted on its log dir. The committed output holds each input record
transformed exactly once, in order; read_uncommitted also shows the aborted attempt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.apps.support import (
    TARGETS,
    TIERLOG_TARGETS,
    Target,
    committed,
    end_offsets,
    held_partitions,
    open_transactions,
    pending_offsets,
    read_to_end,
    wait_until,
)
from tests.harness.rawclient import unique
from tests.harness.transactions import READ_COMMITTED, READ_UNCOMMITTED

PROCESSOR = Path(__file__).resolve().parent / "processor.py"
RECORDS, PARTITIONS = 400, 2
class Processor:
    def __init__(self, bootstrap: str, names: tuple, gate: Path, log: Path):
        self.log = open(log, "a")  # noqa: SIM115 - closed in kill/stop
        self.proc = subprocess.Popen([sys.executable, str(PROCESSOR), bootstrap, *names, str(gate)],
                                     stdout=subprocess.PIPE, stderr=self.log, text=True)
        assert self.proc.stdout.readline().strip() == "READY", log.read_text()

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
        self.log.close()


@pytest.fixture
def processors():
    started: list[Processor] = []
    yield started
    for p in started:
        if p.proc.poll() is None:
            p.kill()


def produce_input(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    """RECORDS values rec-00000... over the partitions round robin; the expected output per partition."""
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    expected: dict[int, list[bytes]] = {i: [] for i in range(PARTITIONS)}
    for i in range(RECORDS):
        value = f"rec-{i:05d}"
        p.produce(topic, value.encode(), key=str(i).encode(), partition=i % PARTITIONS)
        expected[i % PARTITIONS].append(value.upper().encode())
    assert p.flush(60) == 0
    return expected


def wait_for_file(path: Path, proc: subprocess.Popen, timeout: float = 120) -> None:
    wait_until(lambda: path.exists() or proc.poll() is not None, timeout, f"{path.name}")
    assert path.exists(), f"the processor exited {proc.returncode} before {path.name}"


def check_output(bootstrap: str, source: str, sink: str, group: str, expected: dict[int, list[bytes]]) -> dict:
    """Wait until the group committed all input and no transaction is open, then the committed output must be
    exactly ``expected``; the read_uncommitted view returned."""
    ends = wait_until(lambda: end_offsets(bootstrap, source), 60, f"the end offsets of {source}")
    wait_until(lambda: committed(bootstrap, group, source) == ends, 180, f"{group} committed {ends}")
    wait_until(lambda: not open_transactions(bootstrap, group), 120, "no open transaction")
    got = read_to_end(bootstrap, sink, READ_COMMITTED)
    assert {p: [v for _, v in got[p]] for p in got} == expected
    return read_to_end(bootstrap, sink, READ_UNCOMMITTED)


def names():
    source, sink, group = unique("proc-in"), unique("proc-out"), unique("proc")
    return source, sink, group, group + "-txn"


def start_held(target: Target, tmp_path, processors: list, value: str):
    """Topics and input, then a processor held (by its gate) with the transaction holding ``value``'s output
    open; returns the names, the gate folder, the expected output and the processor."""
    bootstrap = target.bootstrap
    source, sink, group, tid = names()
    for t in (source, sink):
        target.create_topic(t, PARTITIONS)
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "values").write_text(f"{value}\n")
    expected = produce_input(bootstrap, source)
    proc = Processor(bootstrap, (source, sink, group, tid), gate, tmp_path / "processor.log")
    processors.append(proc)
    wait_for_file(gate / f"held-{value}", proc.proc)
    assert open_transactions(bootstrap, tid) == [(tid, "Ongoing")]
    return (source, sink, group, tid), gate, expected, proc


@pytest.mark.parametrize("target", TARGETS)
def test_processor_killed_mid_transaction(crashable, tmp_path, processors):
    """SIGKILL the processor with a transaction open (its output of rec-00100 in the log), start another:
    the open transaction is aborted, the input after the committed offsets processed again, exactly once."""
    bootstrap = crashable.bootstrap
    (source, sink, group, tid), gate, expected, first = start_held(crashable, tmp_path, processors, "rec-00100")
    assert held_partitions(bootstrap, sink) == [0]  # the held output is past the last stable offset
    first.kill()
    (gate / "release-rec-00100").write_text("")
    processors.append(Processor(bootstrap, (source, sink, group, tid), gate, tmp_path / "processor.log"))
    uncommitted = check_output(bootstrap, source, sink, group, expected)
    # The aborted attempt stays in the log: a read_uncommitted consumer sees rec-00100's output twice.
    assert [v for _, v in uncommitted[0]].count(b"REC-00100") == 2


@pytest.mark.parametrize("target", TIERLOG_TARGETS)
def test_processor_across_broker_kill(crashable, tmp_path, processors):
    """SIGKILL the broker (on the cluster: the leader of the output partition holding the open transaction's
    records) with the processor's transaction open (rec-00250's output in the log), restart it on its log dir,
    let the processor go on: still exactly once."""
    bootstrap = crashable.bootstrap
    (source, sink, group, tid), gate, expected, proc = start_held(crashable, tmp_path, processors, "rec-00250")
    crashable.sigkill_restart(coordinator_of=tid, leader_of=sink)
    (gate / "release-rec-00250").write_text("")
    check_output(bootstrap, source, sink, group, expected)
    assert proc.proc.poll() is None, (tmp_path / "processor.log").read_text()
    if crashable.elect_preferred_leaders():  # read again from the restarted brokers
        check_output(bootstrap, source, sink, group, expected)


@pytest.mark.parametrize("target", TIERLOG_TARGETS)
def test_processor_offsets_pending_across_coordinator_kills(crashable, tmp_path, processors):
    """Hold the transaction after its offsets reached the group coordinator (TxnOffsetCommit answered), just
    before the commit: OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT. SIGKILL the broker (on
    the cluster: the transaction's coordinator and the group's coordinator) and restart it: the coordinator
    that loads the group's offsets must know them pending still, and the commit must then make them the
    group's, exactly once."""
    bootstrap = crashable.bootstrap
    value = "committing-rec-00250"
    (source, sink, group, tid), gate, expected, proc = start_held(crashable, tmp_path, processors, value)
    assert pending_offsets(bootstrap, group, source)
    crashable.sigkill_restart(coordinator_of=tid, group_coordinator_of=group)
    assert wait_until(lambda: pending_offsets(bootstrap, group, source), 120, "the group's offsets still pending")
    (gate / f"release-{value}").write_text("")
    uncommitted = check_output(bootstrap, source, sink, group, expected)
    assert proc.proc.poll() is None, (tmp_path / "processor.log").read_text()
    print(f"read_uncommitted: {sum(map(len, uncommitted.values())) - RECORDS} aborted records")
    if crashable.elect_preferred_leaders():  # read again from the restarted brokers
        check_output(bootstrap, source, sink, group, expected)
