"""tierlog's transactional producer and read_committed consumer against Apache Kafka 4.1 as it comes:
transaction version 2 (KIP-890) finalized, so the producer takes its path (no AddPartitionsToTxn, a new
epoch from every EndTxn). One single-node KRaft broker for the module: tierlog's broker has no
transaction coordinator yet. The scenarios are in txnlib.py; test_transactions_v1.py runs them with the
cluster's transaction.version at 1.

- commit: read_committed gets exactly the committed records, positions end past the markers;
- abort: read_committed sees none of the aborted records, read_uncommitted all;
- an abortable error (a batch the broker refuses): commit raises it, abort works, the next commits;
- consume-transform-produce with send_offsets_to_transaction: offsets move only on commit;
- a second producer with the same transactional.id fences the first;
- misuse raises IllegalStateError;
- confluent-kafka (librdkafka) on the other side, in both directions.
"""

from __future__ import annotations

import pytest

from tests.client import txnlib
from tests.harness import apache_kafka


@pytest.fixture(scope="module")
def kafka(kafka_jars, tmp_path_factory):
    k = apache_kafka.start_kafka(tmp_path_factory.mktemp("kafka-txn"), "kafka-txn", settings=txnlib.KAFKA_SETTINGS)
    yield k
    k.stop()


def test_commit_is_seen_by_read_committed_and_positions_end_past_the_markers(kafka):
    txnlib.commit_scenario(kafka.bootstrap, transaction_v2=True)


def test_abort_is_hidden_from_read_committed_and_seen_by_read_uncommitted(kafka):
    txnlib.abort_scenario(kafka.bootstrap)


def test_an_abortable_error_is_raised_by_commit_and_the_producer_goes_on_after_the_abort(kafka):
    txnlib.abortable_error_scenario(kafka.bootstrap)


def test_consume_transform_produce_commits_offsets_only_with_the_transaction(kafka):
    txnlib.consume_transform_produce_scenario(kafka.bootstrap)


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(kafka):
    txnlib.fencing_scenario(kafka.bootstrap)


def test_misuse_raises_illegal_state_errors(kafka):
    txnlib.misuse_scenario(kafka.bootstrap)


def test_confluent_transactions_read_by_tierlog_and_tierlog_transactions_read_by_confluent(kafka):
    txnlib.confluent_scenario(kafka.bootstrap)


def test_the_synchronous_facade_runs_transactions(kafka):
    txnlib.sync_facade_scenario(kafka.bootstrap)
