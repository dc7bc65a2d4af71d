"""A broker at its open file limit: started with RLIMIT_NOFILE=64, flooded with connections, it closes
the ones that would take the descriptors storage needs, logs that a few times with a count (not once per
attempt, not with tracebacks), keeps its log dir online, and serves as before once the connections are
gone."""

from __future__ import annotations

import socket

from confluent_kafka import Producer

from tests.harness.broker import BrokerProcess, log_lines
from tests.harness.rawclient import RawClient, create_topic
from tests.harness.tiered import wait_for
from tierlog.protocol import ApiKey


def produce(b: BrokerProcess, topic: str, n: int) -> list[int]:
    """Produce ``n`` records with confluent-kafka (acks=all); the offsets they were given."""
    errors, offsets = [], []
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, f"v{i}".encode(),
                  on_delivery=lambda err, msg: errors.append(err) if err else offsets.append(msg.offset()))
    assert p.flush(30) == 0 and not errors, errors
    return sorted(offsets)


def test_connections_at_the_fd_limit_are_closed_and_logged_a_few_times(tmp_path):
    b = BrokerProcess(tmp_path / "logs", {"internal.log.repeat.interval.ms": "1000"}, nofile=64).start()
    try:
        create_topic(b.bootstrap, "before")  # its segment files are open before the flood
        flood = []
        for _ in range(300):
            try:
                flood.append(socket.create_connection(("127.0.0.1", b.port), timeout=10))
            except OSError:
                break
        try:
            # Connections beyond the reserve are closed at once; the others stay open.
            closed = wait_for(lambda: [m for m in log_lines(b.output, "WARNING", "tierlog.server.network")
                                       if "kept for storage" in m["message"]], "the refusal logged", 20)
            assert closed
            wait_for(lambda: [m for m in log_lines(b.output, "WARNING", "tierlog.server.network")
                              if "(repeated " in m["message"]], "the count of repeated refusals", 20)
        finally:
            for s in flood:
                s.close()
        # Serving again: a new topic (new segment files) and requests on a new connection, once the broker has
        # seen the flood's connections close (on a loaded machine that may take a moment: until then a new
        # connection is still one too many and is closed at once).
        def created() -> bool:
            try:
                create_topic(b.bootstrap, "after")
            except ConnectionError:
                return False
            return True
        wait_for(created, "a new connection served after the flood closed", 30)
        client = RawClient(b.bootstrap)
        assert client.request(ApiKey.API_VERSIONS, 0, {}).error_code == 0
        meta = client.request(ApiKey.METADATA, 1, {"topics": [{"name": "before"}, {"name": "after"}]})
        assert [t.error_code for t in meta.topics] == [0, 0]
        client.close()
        assert produce(b, "before", 10) == list(range(10))
        assert produce(b, "after", 10) == list(range(10))
        network = log_lines(b.output, logger="tierlog.server.network")
        assert 2 <= len(network) <= 8, [m.string for m in network]
        assert not log_lines(b.output, "ERROR"), "".join(b.output)  # the log dir stayed online
        assert not [line for line in b.output if line.startswith("Traceback")], "".join(b.output)
    except BaseException:
        print("".join(b.output))
        raise
    finally:
        b.stop()
