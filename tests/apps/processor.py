"""A consume-transform-produce stream processor on confluent-kafka, exactly once (KIP-98/447): read_committed
input, a transactional producer, the consumed offsets committed in each transaction
(send_offsets_to_transaction with the consumer's group metadata). Each input value ``v`` of partition p
becomes ``v.upper()`` on the same partition of the output topic. Run by tests/apps/test_python_processor.py:

    python tests/apps/processor.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID GATE_DIR

Prints ``READY`` once its first assignment arrives. The gate holds a transaction open for a fault test: after
the output of an input value listed (one per line) in GATE_DIR/values is in the broker's log, and while
GATE_DIR/release-<value> does not exist, it writes GATE_DIR/held-<value> and waits for the release file; a
line ``committing-<value>`` holds so once the transaction's offsets were sent (TxnOffsetCommit answered), just
before the commit, with the gate files named after ``committing-<value>``.
An abortable error aborts the transaction and rewinds to the committed offsets; a fatal one exits 1.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition


def hold(gate: Path, value: str) -> None:
    if (gate / f"release-{value}").exists():
        return
    (gate / f"held-{value}").write_text("held\n")
    print(f"HELD {value}", flush=True)
    while not (gate / f"release-{value}").exists():
        time.sleep(0.02)


def retried(call) -> None:
    """``call`` again while librdkafka says the error is retriable (a coordinator away for a moment)."""
    while True:
        try:
            return call()
        except KafkaException as e:
            if not e.args[0].retriable():
                raise
            time.sleep(0.5)


def rewind(consumer: Consumer) -> None:
    """Back to the group's committed offsets: what the aborted transaction consumed is read again."""
    assigned = consumer.assignment()
    for tp in consumer.committed(assigned, timeout=30):
        consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))


def main(bootstrap: str, source: str, sink: str, group: str, transactional_id: str, gate_dir: str) -> int:
    gate = Path(gate_dir)
    gated = set((gate / "values").read_text().split()) if (gate / "values").exists() else set()
    # A static member (KIP-345): a processor started again after a crash takes its predecessor's place at once
    # rather than after the predecessor's session times out.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         "group.instance.id": transactional_id})
    debug = {"debug": os.environ["PROCESSOR_DEBUG"]} if os.environ.get("PROCESSOR_DEBUG") else {}
    # metadata.recovery.strategy=none: when its only broker goes away, librdkafka 2.16's re-bootstrap (KIP-899)
    # decommissions the broker a pending group-coordinator request waits on, and send_offsets_to_transaction
    # then never sends TxnOffsetCommit (seen against tierlog and Apache Kafka alike; see the report in
    # docs/compatibility.md). Without re-bootstrap the producer reconnects to the restarted broker.
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                         "transaction.timeout.ms": 60000, "metadata.recovery.strategy": "none", **debug})
    producer.init_transactions(60)
    ready: list[bool] = []
    consumer.subscribe([source], on_assign=lambda c, parts: ready or (ready.append(True), print("READY", flush=True)))
    while True:
        batch = consumer.consume(100, timeout=0.5)
        records = [m for m in batch if m.error() is None]
        for m in batch:
            if m.error() is not None and m.error().code() != KafkaError._PARTITION_EOF:
                print(f"consumer error {m.error()}", file=sys.stderr, flush=True)
        if not records:
            continue
        try:
            producer.begin_transaction()
            for m in records:
                value = m.value().decode()
                producer.produce(sink, value.upper().encode(), key=m.key(), partition=m.partition())
                if value in gated:
                    producer.flush(60)  # in the log, its transaction open
                    hold(gate, value)
            positions = consumer.position(consumer.assignment())
            group = consumer.consumer_group_metadata()
            retried(lambda: producer.send_offsets_to_transaction(positions, group, 60))  # noqa: B023 - called here
            for m in records:  # the consumed offsets pending at the group coordinator, the transaction open
                if f"committing-{m.value().decode()}" in gated:
                    hold(gate, f"committing-{m.value().decode()}")
            retried(lambda: producer.commit_transaction(60))
        except KafkaException as e:
            error = e.args[0]
            print(f"transaction failed: {error}", file=sys.stderr, flush=True)
            if not error.txn_requires_abort():
                return 1
            producer.abort_transaction(60)
            rewind(consumer)


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
