"""Kafka's Java transactional producer (4.1's client) against tierlog's transaction coordinator: transactions
committed and aborted by plan, read back by Kafka's Java consumer and confluent-kafka with read_committed
(never an aborted record) and read_uncommitted (every record), from local segments and, on a tiered topic
with small segments and local.retention.bytes=1, from the remote tier; and the transaction version the producer
runs, 2 as tierlog finalizes it by default (KIP-890 part 2), 1 on a broker set to it."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from tests.harness.java_transactions import java_consume, java_produce
from tests.harness.rawclient import create_topic, raw_client, unique
from tests.harness.tiered import tier_status, tiered_settings, wait_for
from tests.harness.transactions import READ_COMMITTED, READ_UNCOMMITTED, consume_confluent
from tests.harness.waiting import not_yet, wait_until
from tierlog.protocol import ApiKey

LOCAL_PLAN = "c3,a2,c2,a3,c1"
TIERED_PLAN = "c5,a5,c5,a5,c5,a5,c5"  # ~260 bytes a record: several 2000-byte segments
TIERED = {"remote.storage.enable": "true", "segment.bytes": "2000", "local.retention.bytes": "1",
          "file.delete.delay.ms": "0"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.harness.broker import BrokerProcess
    root = tmp_path_factory.mktemp("java-txn")
    b = BrokerProcess(root / "logs", tiered_settings(root)).start()
    yield b
    b.stop()


def sentinel(bootstrap: str, topic: str) -> str:
    end = "end-" + unique("s")
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, end.encode(), partition=0)
    assert p.flush(30) == 0
    return end


@pytest.fixture(scope="module")
def local_topic(broker):
    topic = unique("java-txn-local")
    create_topic(broker.bootstrap, topic)
    committed, aborted = java_produce(broker.bootstrap, topic, unique("java-tid"), LOCAL_PLAN)
    return topic, committed, aborted, sentinel(broker.bootstrap, topic)


@pytest.fixture(scope="module")
def tiered_topic(broker):
    topic = unique("java-txn-tiered")
    create_topic(broker.bootstrap, topic, configs=TIERED)
    committed, aborted = java_produce(broker.bootstrap, topic, unique("java-tid"), TIERED_PLAN)
    end = sentinel(broker.bootstrap, topic)
    # The first aborted transaction (offsets 6-10, its marker 11) must be read from the remote tier.
    wait_for(lambda: (p := tier_status(broker, topic)["partitions"][0])["copy_lag_segments"] == 0
             and p["local_log_start_offset"] > 12, "the transactions to be tiered and deleted locally", timeout=120)
    return topic, committed, aborted, end


def _values(got) -> list[str]:
    return [v.decode() if isinstance(v, bytes) else v for _, v in got]


@pytest.mark.parametrize("where", ["local_topic", "tiered_topic"])
def test_java_read_committed_sees_only_committed_records(broker, where, request):
    topic, committed, aborted, end = request.getfixturevalue(where)
    got = _values(java_consume(broker.bootstrap, topic, READ_COMMITTED, end))
    assert got == committed + [end]
    assert not set(got) & set(aborted)


@pytest.mark.parametrize("where", ["local_topic", "tiered_topic"])
def test_confluent_read_committed_sees_only_committed_records(broker, where, request):
    topic, committed, aborted, end = request.getfixturevalue(where)
    got = _values(consume_confluent(broker.bootstrap, topic, READ_COMMITTED, end.encode()))
    assert got == committed + [end]


@pytest.mark.parametrize("where", ["local_topic", "tiered_topic"])
def test_java_read_uncommitted_sees_every_record(broker, where, request):
    topic, committed, aborted, end = request.getfixturevalue(where)
    got = _values(java_consume(broker.bootstrap, topic, READ_UNCOMMITTED, end))
    assert sorted(got) == sorted(committed + aborted + [end]) and got[-1] == end


# ------------------------------------------------------------------------------ transaction versions

def _described(bootstrap: str, transactional_id: str):
    """DescribeTransactions of ``transactional_id`` once its last transaction is complete."""
    with raw_client(bootstrap) as raw:
        def complete():
            (d,) = raw.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [transactional_id]}
                               ).transaction_states
            return d if d.transaction_state.startswith("Complete") else not_yet(d)

        # the markers follow EndTxn's answer
        return wait_until(complete, 60, what=f"the last transaction of {transactional_id} complete")


@pytest.fixture(scope="module")
def broker_tv1(tmp_path_factory):
    from tests.harness.broker import BrokerProcess
    b = BrokerProcess(tmp_path_factory.mktemp("java-txn-tv1") / "logs", {"transaction.version": "1"}).start()
    yield b
    b.stop()


@pytest.mark.parametrize("version", [2, 1])
def test_java_producer_runs_the_finalized_transaction_version(broker, broker_tv1, version):
    """Kafka 4.4's Java producer follows the transaction.version tierlog finalizes: at 2 (the default) it sends
    no AddPartitionsToTxn, the leader adds the partition of its Produce v12 and every EndTxn v5 bumps the epoch
    (five transactions: epoch 5); at 1 it adds partitions itself and keeps its epoch. read_committed reads
    exactly the committed records either way."""
    b = broker if version == 2 else broker_tv1
    topic, tid = unique(f"java-tv{version}"), unique("java-tid")
    create_topic(b.bootstrap, topic)
    committed, aborted = java_produce(b.bootstrap, topic, tid, LOCAL_PLAN)
    d = _described(b.bootstrap, tid)
    assert (d.transaction_state, d.producer_epoch) == ("CompleteCommit", 5 if version == 2 else 0)
    end = sentinel(b.bootstrap, topic)
    assert _values(java_consume(b.bootstrap, topic, READ_COMMITTED, end)) == committed + [end]
    assert sorted(_values(java_consume(b.bootstrap, topic, READ_UNCOMMITTED, end))) == sorted(
        committed + aborted + [end])
