"""The transaction scenarios of txnlib.py against tierlog's own broker and its transaction coordinator, at
both transaction versions a broker can finalize (the ``transaction.version`` setting): 2 by default (KIP-890
part 2: partition leaders add the partitions of Produce v12 and TxnOffsetCommit v5, every EndTxn v5 bumps the
epoch) and 1 (AddPartitionsToTxn, AddOffsetsToTxn and TxnOffsetCommit, KIP-360 epoch bumps with
InitProducerId). One single broker per version, shared by the module's tests."""

from __future__ import annotations

import pytest

from tests.client import txnlib


@pytest.fixture(scope="module", params=[2, 1], ids=["tv2", "tv1"])
def broker(request, tmp_path_factory):
    from tests.harness.broker import BrokerProcess
    b = BrokerProcess(tmp_path_factory.mktemp(f"tierlog-txn-tv{request.param}") / "logs",
                      {**txnlib.KAFKA_SETTINGS, "transaction.version": str(request.param)})
    b.transaction_version = request.param
    b.start()
    yield b
    b.stop()


def test_commit_is_seen_by_read_committed_and_positions_end_past_the_markers(broker):
    txnlib.commit_scenario(broker.bootstrap, transaction_v2=broker.transaction_version == 2)


def test_abort_is_hidden_from_read_committed_and_seen_by_read_uncommitted(broker):
    txnlib.abort_scenario(broker.bootstrap)


def test_an_abortable_error_bumps_the_epoch_and_the_next_transaction_commits(broker):
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
