"""The transaction coordinator of a single broker, over sockets: confluent-kafka transactional producers
(commit, abort, fencing by a second producer with the same transactional id), read_committed consumers
(confluent-kafka and kafka-python) seeing exactly the committed records, a transaction left open past its
timeout aborted by the coordinator, a broker killed mid-transaction, and the coordinator's errors as a
raw client sees them."""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import KafkaException, Producer

from tests.harness.rawclient import create_topic, raw_client, unique
from tests.harness.transactions import CONSUMERS, READ_COMMITTED, READ_UNCOMMITTED, consume_confluent
from tests.harness.waiting import not_yet, wait_until
from tierlog.coordinator.transaction_log import (
    TxnLogValue,
    TxnState,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from tierlog.protocol import ApiKey

NONE, INVALID_PRODUCER_ID_MAPPING, INVALID_TRANSACTION_TIMEOUT, CONCURRENT_TRANSACTIONS = 0, 49, 50, 51
INVALID_TXN_STATE, PRODUCER_FENCED, TRANSACTION_ABORTABLE, NOT_ENOUGH_REPLICAS = 48, 90, 120, 19

OVERRIDES = {"num.partitions": "1", "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
             "transaction.state.log.num.partitions": "3"}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    from tests.harness.broker import running_broker
    with running_broker(tmp_path_factory.mktemp("txncoord"), OVERRIDES) as b:
        yield b


@pytest.fixture
def raw(shared):
    with raw_client(shared.bootstrap) as c:
        yield c


def producer(bootstrap: str, transactional_id: str, timeout_ms: int = 60000) -> Producer:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                  "transaction.timeout.ms": timeout_ms, "linger.ms": 0})
    p.init_transactions(30)
    return p


def transaction(p: Producer, topic: str, values: list[bytes], commit: bool) -> None:
    p.begin_transaction()
    for v in values:
        p.produce(topic, v, partition=0)
    p.flush(30)  # sent before the end: an abort would purge records still queued
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


def sentinel(bootstrap: str, topic: str) -> bytes:
    end = b"end-" + unique("s").encode()
    p = Producer({"bootstrap.servers": bootstrap})
    p.produce(topic, end, partition=0)
    p.flush(30)
    return end


def test_transaction_log_records_are_kafkas_format():
    key = encode_key("app-1")
    assert key == b"\x00\x00\x00\x05app-1" and decode_key(key) == "app-1"
    v = TxnLogValue(7, 3, 60000, TxnState.ONGOING, frozenset({("t", 1), ("t", 0), ("u", 2)}), 11, 10)
    data = encode_value(v)
    # version, pid, epoch, timeout, status, 2 topics: "t" [0, 1], "u" [2], last update, start
    assert data == (b"\x00\x00" + (7).to_bytes(8, "big") + b"\x00\x03" + (60000).to_bytes(4, "big") + b"\x01"
                    + b"\x00\x00\x00\x02" + b"\x00\x01t\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x01"
                    + b"\x00\x01u\x00\x00\x00\x01\x00\x00\x00\x02" + (11).to_bytes(8, "big") + (10).to_bytes(8, "big"))
    assert decode_value(data) == v
    empty = TxnLogValue(7, 4, 60000, TxnState.EMPTY, frozenset(), 12, -1)
    assert encode_value(empty)[17:21] == b"\xff\xff\xff\xff"  # Empty writes null partitions, as Kafka
    assert decode_value(encode_value(empty)) == empty


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
def test_read_committed_sees_exactly_the_committed_records(shared, consumer):
    consume = CONSUMERS[consumer]
    topic = unique("txc")
    create_topic(shared.bootstrap, topic)
    p = producer(shared.bootstrap, unique("tid"))
    transaction(p, topic, [b"c1", b"c2"], commit=True)
    transaction(p, topic, [b"a1", b"a2"], commit=False)
    transaction(p, topic, [b"c3"], commit=True)
    end = sentinel(shared.bootstrap, topic)
    committed = [v for _, v in consume(shared.bootstrap, topic, READ_COMMITTED, end)]
    assert committed == [b"c1", b"c2", b"c3", end]
    everything = [v for _, v in consume(shared.bootstrap, topic, READ_UNCOMMITTED, end)]
    assert everything == [b"c1", b"c2", b"a1", b"a2", b"c3", end]


def test_second_producer_fences_the_first_and_aborts_its_transaction(shared):
    topic, tid = unique("txf"), unique("tid")
    create_topic(shared.bootstrap, topic)
    first = producer(shared.bootstrap, tid)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    first.flush(30)
    second = producer(shared.bootstrap, tid)  # aborts the open transaction, bumping the epoch
    transaction(second, topic, [b"live"], commit=True)
    with pytest.raises(KafkaException) as failed:
        first.commit_transaction(30)
    assert failed.value.args[0].fatal() or "fenced" in str(failed.value).lower()
    end = sentinel(shared.bootstrap, topic)
    assert [v for _, v in consume_confluent(shared.bootstrap, topic, READ_COMMITTED, end)] == [b"live", end]


def test_transaction_open_past_its_timeout_is_aborted(shared):
    topic = unique("txt")
    create_topic(shared.bootstrap, topic)
    p = producer(shared.bootstrap, unique("tid"), timeout_ms=1000)
    p.begin_transaction()
    p.produce(topic, b"stale", partition=0)
    p.flush(30)
    end = sentinel(shared.bootstrap, topic)
    # The abort marker releases the last stable offset: read_committed reaches the sentinel without "stale".
    assert [v for _, v in consume_confluent(shared.bootstrap, topic, READ_COMMITTED, end, timeout=60)] == [end]
    with pytest.raises(KafkaException):
        p.commit_transaction(30)


def test_coordinator_errors(raw):
    tid = unique("tid")
    r = raw.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [tid]})
    assert r.coordinators[0].error_code == NONE  # creates __transaction_state, as a client's first request
    r = raw.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout": 10**9,
                                                  "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == INVALID_TRANSACTION_TIMEOUT
    r = raw.request(ApiKey.END_TXN, 3, {"transactional_id": tid, "producer_id": 1, "producer_epoch": 0,
                                         "committed": True})
    assert r.error_code == INVALID_PRODUCER_ID_MAPPING
    r = raw.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout": 60000,
                                                  "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == NONE and r.producer_epoch == 0
    pid = r.producer_id
    r = raw.request(ApiKey.END_TXN, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": 0,
                                         "committed": True})
    assert r.error_code == INVALID_TXN_STATE  # nothing open
    again = raw.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout": 60000,
                                                      "producer_id": -1, "producer_epoch": -1})
    assert (again.error_code, again.producer_id, again.producer_epoch) == (NONE, pid, 1)
    r = raw.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": tid, "producer_id": pid,
                                                    "producer_epoch": 0, "group_id": "g"})
    assert r.error_code == PRODUCER_FENCED


def test_broker_killed_mid_transaction_recovers_consistently(tmp_path):
    from tests.harness.broker import BrokerProcess
    b = BrokerProcess(tmp_path / "logs", {**OVERRIDES, "transaction.abort.timed.out.transaction.cleanup.interval.ms":
                                          "200"})
    b.start()
    try:
        topic, tid = unique("txk"), unique("tid")
        create_topic(b.bootstrap, topic)
        p = producer(b.bootstrap, tid, timeout_ms=2000)
        transaction(p, topic, [b"before"], commit=True)
        p.begin_transaction()
        p.produce(topic, b"partial", partition=0)
        p.flush(30)
        del p
        b.restart(clean=False)
        # The loaded coordinator finds the transaction open and aborts it past its timeout.
        end = sentinel(b.bootstrap, topic)
        started = time.monotonic()
        got = consume_confluent(b.bootstrap, topic, READ_COMMITTED, end, timeout=60)
        assert time.monotonic() - started < 60
        assert [v for _, v in got] == [b"before", end]
        q = producer(b.bootstrap, tid)  # the id is still coordinated: a new epoch
        transaction(q, topic, [b"after"], commit=True)
        end2 = sentinel(b.bootstrap, topic)
        assert [v for _, v in consume_confluent(b.bootstrap, topic, READ_COMMITTED, end2)] == [
            b"before", end, b"after", end2]
    finally:
        b.stop()


def test_kafka_python_transactional_producer(shared):
    from kafka import KafkaProducer
    topic = unique("txp")
    create_topic(shared.bootstrap, topic)
    p = KafkaProducer(bootstrap_servers=shared.bootstrap, transactional_id=unique("tid"))
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"k1", partition=0)
        p.flush(30)
        p.commit_transaction()
        p.begin_transaction()
        p.send(topic, b"k-aborted", partition=0)
        p.flush(30)
        p.abort_transaction()
    finally:
        p.close(timeout=10)
    end = sentinel(shared.bootstrap, topic)
    assert [v for _, v in CONSUMERS["kafka-python"](shared.bootstrap, topic, READ_COMMITTED, end)] == [b"k1", end]


def test_list_and_describe_transactions(shared, raw):
    topic, tid = unique("txl"), unique("tid")
    create_topic(shared.bootstrap, topic)
    p = producer(shared.bootstrap, tid)
    p.begin_transaction()
    p.produce(topic, b"open", partition=0)
    p.flush(30)
    listed = raw.request(ApiKey.LIST_TRANSACTIONS, 2, {"state_filters": ["Ongoing"], "producer_id_filters": [],
                                                       "duration_filter": -1, "transactional_id_pattern": tid})
    assert listed.error_code == NONE
    assert [(t.transactional_id, t.transaction_state) for t in listed.transaction_states] == [(tid, "Ongoing")]
    unknown = raw.request(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": ["Nope"], "producer_id_filters": []})
    assert list(unknown.unknown_state_filters) == ["Nope"]
    # (An unknown id is answered with start time -1, as Kafka does, which kio's parser refuses: the tool
    # test below reads that answer with Kafka's own client.)
    described = raw.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})
    (ours,) = described.transaction_states
    assert (ours.error_code, ours.transaction_state) == (NONE, "Ongoing")
    assert [(t.topic, list(t.partitions)) for t in ours.topics] == [(topic, [0])]
    p.commit_transaction(30)


def test_kafka_transactions_tool_lists_and_describes(shared, kafka_jars):
    from tests.harness import apache_kafka
    topic, tid = unique("txk"), unique("tid")
    create_topic(shared.bootstrap, topic)
    p = producer(shared.bootstrap, tid)
    transaction(p, topic, [b"x"], commit=True)
    tool = "org.apache.kafka.tools.TransactionsCommand"
    listed = apache_kafka.run_tool(tool, "--bootstrap-server", shared.bootstrap, "list").stdout
    assert tid in listed and "CompleteCommit" in listed, listed
    described = apache_kafka.run_tool(tool, "--bootstrap-server", shared.bootstrap, "describe",
                                      "--transactional-id", tid).stdout
    assert "CompleteCommit" in described, described
    missing = apache_kafka.run_tool(tool, "--bootstrap-server", shared.bootstrap, "describe",
                                    "--transactional-id", unique("missing"), check=False)
    assert missing.returncode != 0 and "could not be found" in missing.stderr, missing


def test_add_partitions_to_txn_one_transaction_and_batched(shared, raw):
    topic, tid = unique("txa"), unique("tid")
    create_topic(shared.bootstrap, topic)
    init = raw.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": tid, "transaction_timeout": 60000,
                                                     "producer_id": -1, "producer_epoch": -1})
    pid, epoch = init.producer_id, init.producer_epoch
    r = raw.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid, "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": [0]}, {"name": unique("nope"), "partitions": [0]}]})
    codes = {t.name == topic: t.results_by_partition[0].partition_error_code for t in r.results_by_topic_v3_and_below}
    assert codes == {True: 55, False: 3}  # OPERATION_NOT_ATTEMPTED beside UNKNOWN_TOPIC_OR_PARTITION
    r = raw.request(ApiKey.ADD_PARTITIONS_TO_TXN, 5, {"transactions": [
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "verify_only": True,
         "topics": [{"name": topic, "partitions": [0]}]}]})
    assert r.results_by_transaction[0].topic_results[0].results_by_partition[0].partition_error_code == \
        TRANSACTION_ABORTABLE  # verify-only: not in a transaction yet (Kafka 4.1's answer)
    r = raw.request(ApiKey.ADD_PARTITIONS_TO_TXN, 5, {"transactions": [
        {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "verify_only": False,
         "topics": [{"name": topic, "partitions": [0]}]},
        {"transactional_id": tid, "producer_id": pid + 1000, "producer_epoch": 0, "verify_only": False,
         "topics": [{"name": topic, "partitions": [0]}]}]})
    assert r.error_code == NONE
    assert [t.topic_results[0].results_by_partition[0].partition_error_code for t in r.results_by_transaction] == \
        [NONE, INVALID_PRODUCER_ID_MAPPING]
    r = raw.request(ApiKey.END_TXN, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                         "committed": False})
    assert r.error_code == NONE
    again = raw.request(ApiKey.END_TXN, 3, {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                                             "committed": True})
    assert again.error_code in (CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE)  # aborting or aborted: not a commit


# ------------------------------------------------------------------------ a hanging transaction, found and aborted

@pytest.fixture(scope="module")
def unverified(tmp_path_factory):
    """A broker without KIP-890's verification: the only way a client alone can leave a hanging transaction (a
    transactional batch its coordinator never heard of), as on a Kafka broker with verification off."""
    from tests.harness.broker import running_broker
    from tests.harness.transactions import UNVERIFIED
    with running_broker(tmp_path_factory.mktemp("txnhang"), {**OVERRIDES, **UNVERIFIED}) as b:
        yield b


def _table(out: str) -> list[dict]:
    lines = [re.split(r"\s+", line.strip()) for line in out.splitlines() if line.strip()]
    return [dict(zip(lines[0], row, strict=True)) for row in lines[1:]]


def test_kafka_transactions_tool_finds_and_aborts_a_hanging_transaction(unverified, kafka_jars):
    from tests.harness import apache_kafka
    from tests.harness.transactions import init_producer_id, list_offset
    from tierlog.records import build_batch
    tool = "org.apache.kafka.tools.TransactionsCommand"
    bootstrap = unverified.bootstrap
    topic = unique("txh")
    create_topic(bootstrap, topic)
    p = producer(bootstrap, unique("tid"))
    transaction(p, topic, [b"before"], commit=True)  # a coordinator-managed producer beside the hanging one
    with raw_client(bootstrap) as raw:
        pid, epoch = init_producer_id(raw)
        # Stamped an hour ago, so it is older than find-hanging's --max-transaction-timeout (in minutes).
        old = int(time.time() * 1000) - 3600_000
        batch = build_batch([(None, b"hanging", [], old)], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                            is_transactional=True)
        r = raw.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout": 10000, "transactional_id": unique("nobody"),
                                            "topic_data": [{"name": topic, "partition_data": [
                                                {"index": 0, "records": batch}]}]})
        assert r.responses[0].partition_responses[0].error_code == NONE
        start = r.responses[0].partition_responses[0].base_offset
        assert list_offset(raw, topic, 1) == start  # the hanging transaction holds the last stable offset
    described = _table(apache_kafka.run_tool(tool, "--bootstrap-server", bootstrap, "describe-producers",
                                             "--topic", topic, "--partition", "0").stdout)
    assert {(int(d["ProducerId"]), d["CurrentTransactionStartOffset"]) for d in described} >= {(pid, str(start))}
    hanging = _table(apache_kafka.run_tool(tool, "--bootstrap-server", bootstrap, "find-hanging", "--topic", topic,
                                           "--max-transaction-timeout", "1").stdout)
    assert [(h["Topic"], h["Partition"], int(h["ProducerId"]), h["StartOffset"]) for h in hanging] == [
        (topic, "0", pid, str(start))], hanging
    apache_kafka.run_tool(tool, "--bootstrap-server", bootstrap, "abort", "--topic", topic, "--partition", "0",
                          "--start-offset", str(start))
    with raw_client(bootstrap) as raw:
        assert list_offset(raw, topic, 1) == list_offset(raw, topic, 0) == start + 2  # the ABORT marker after it
    assert _table(apache_kafka.run_tool(tool, "--bootstrap-server", bootstrap, "find-hanging", "--topic", topic,
                                        "--max-transaction-timeout", "1").stdout) == []
    end = sentinel(bootstrap, topic)
    assert [v for _, v in consume_confluent(bootstrap, topic, READ_COMMITTED, end)] == [b"before", end]


def _set_verification(raw, value: str | None) -> None:
    """transaction.partition.verification.enable as a cluster-wide dynamic default (None deletes it)."""
    r = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": 4, "resource_name": "", "configs": [
            {"name": "transaction.partition.verification.enable", "config_operation": 0 if value else 1,
             "value": value}]}], "validate_only": False})
    assert r.responses[0].error_code == NONE, r.responses[0]


def test_partition_verification_is_dynamic(shared, raw):
    """KIP-890 part 1 on by default: a batch of a transactional id the coordinator does not know is refused
    (INVALID_PRODUCER_ID_MAPPING, as Kafka answers it); with verification turned off as a dynamic broker
    default it is appended, and refused again once that default is deleted."""
    from tests.harness.transactions import init_producer_id, produce
    topic = unique("txv")
    create_topic(shared.bootstrap, topic)
    pid, epoch = init_producer_id(raw)
    raw.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["hand-made"]})  # the state log

    def answered(value: bytes, producer_id: int, producer_epoch: int) -> list[int]:
        return [produce(raw, topic, [value], producer_id=producer_id, epoch=producer_epoch, sequence=0,
                        transactional=True).error_code]

    # NOT_ENOUGH_REPLICAS (retriable) until the coordinator has loaded its partition, as Kafka's produce path answers
    (code,) = wait_until(lambda: (c := answered(b"x", pid, epoch)) != [NOT_ENOUGH_REPLICAS] and c, 30, interval=0.1,
                         what="an answer other than NOT_ENOUGH_REPLICAS")
    assert code == INVALID_PRODUCER_ID_MAPPING  # the coordinator has no such transactional id
    _set_verification(raw, "false")
    try:
        def accepted():
            (code,) = answered(b"x", pid, epoch)
            assert code in (NONE, INVALID_PRODUCER_ID_MAPPING), code
            return code == NONE or not_yet(code)

        wait_until(accepted, 30, interval=0.1, what="the produce accepted without verification")
    finally:
        _set_verification(raw, None)
    other = list(init_producer_id(raw))

    def verified():
        if (c := answered(b"y", *other)) != [NONE]:
            return c
        other[:] = init_producer_id(raw)
        return None

    (code,) = wait_until(verified, 30, interval=0.1, what="verification back on")
    assert code == INVALID_PRODUCER_ID_MAPPING
