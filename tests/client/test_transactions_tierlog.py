"""The transaction scenarios of txnlib.py against tierlog's own broker and its transaction coordinator.
tierlog advertises no ``transaction.version`` feature, so the client takes its transaction version 1 path
(AddPartitionsToTxn, AddOffsetsToTxn and TxnOffsetCommit, KIP-360 epoch bumps with InitProducerId). One
single broker for the module."""

from __future__ import annotations

import pytest

from tests.client import txnlib


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    from tests.harness.broker import BrokerProcess
    b = BrokerProcess(tmp_path_factory.mktemp("tierlog-txn") / "logs", dict(txnlib.KAFKA_SETTINGS))
    b.start()
    yield b
    b.stop()


def test_commit_is_seen_by_read_committed_and_positions_end_past_the_markers(broker):
    txnlib.commit_scenario(broker.bootstrap, transaction_v2=False)


def test_abort_is_hidden_from_read_committed_and_seen_by_read_uncommitted(broker):
    txnlib.abort_scenario(broker.bootstrap)


def test_an_abortable_error_bumps_the_epoch_with_init_producer_id_after_the_abort(broker):
    txnlib.abortable_error_scenario(broker.bootstrap)


def test_a_second_producer_fences_the_first(broker):
    txnlib.fencing_scenario(broker.bootstrap)


def test_misuse_raises_illegal_state(broker):
    txnlib.misuse_scenario(broker.bootstrap)


def test_confluent_kafka_and_tierlog_read_each_others_transactions(broker):
    txnlib.confluent_scenario(broker.bootstrap)


def test_the_sync_facade(broker):
    txnlib.sync_facade_scenario(broker.bootstrap)


def test_consume_transform_produce_commits_offsets_only_with_the_transaction(broker):
    txnlib.consume_transform_produce_scenario(broker.bootstrap)
