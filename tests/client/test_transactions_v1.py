"""The transaction scenarios of txnlib.py against Apache Kafka 4.1 with the cluster's
``transaction.version`` downgraded to 1 (kafka-features.sh), the protocol of Kafka 3.x clusters: the
producer adds partitions with AddPartitionsToTxn and offsets with AddOffsetsToTxn, caps Produce at v11
and EndTxn at v4, and bumps its epoch with InitProducerId after an abort that needs it (KIP-360). One
single-node KRaft broker for the module."""

from __future__ import annotations

import pytest

from tests.client import txnlib
from tests.harness import apache_kafka


@pytest.fixture(scope="module")
def kafka(kafka_jars, tmp_path_factory):
    k = apache_kafka.start_kafka(tmp_path_factory.mktemp("kafka-txn-v1"), "kafka-txn-v1",
                                 settings=txnlib.KAFKA_SETTINGS)
    try:
        apache_kafka.run_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", k.bootstrap,
                              "downgrade", "--feature", "transaction.version=1")
        yield k
    finally:
        k.stop()


def test_commit_is_seen_by_read_committed_and_positions_end_past_the_markers(kafka):
    txnlib.commit_scenario(kafka.bootstrap, transaction_v2=False)


def test_abort_is_hidden_from_read_committed_and_seen_by_read_uncommitted(kafka):
    txnlib.abort_scenario(kafka.bootstrap)


def test_an_abortable_error_bumps_the_epoch_with_init_producer_id_after_the_abort(kafka):
    txnlib.abortable_error_scenario(kafka.bootstrap)


def test_consume_transform_produce_commits_offsets_only_with_the_transaction(kafka):
    txnlib.consume_transform_produce_scenario(kafka.bootstrap)


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(kafka):
    txnlib.fencing_scenario(kafka.bootstrap)


def test_confluent_transactions_read_by_tierlog_and_tierlog_transactions_read_by_confluent(kafka):
    txnlib.confluent_scenario(kafka.bootstrap)
