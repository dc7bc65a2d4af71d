"""The broker's side of transactions and of the coordinators' topics.

- :mod:`.add_partitions_to_txn_manager`: KIP-890 part 1 from the partition leader's side (Kafka's
  AddPartitionsToTxnManager): the leader asks the transaction coordinator before a transaction's first batch;
- :mod:`.txn_marker_channel`: the transaction coordinator's COMMIT and ABORT markers sent to the partitions'
  leaders (Kafka's TransactionMarkerChannelManager);
- :mod:`.offsets_topic_log`: this broker's ``__consumer_offsets`` as the group coordinator's store sees it (the
  adapter from the coordinator to the controller and the replica manager);
- :mod:`.coordinator_leadership`: the group and transaction coordinators follow the leadership of their topics'
  partitions on this broker;
- :mod:`.builder`: ``build_transactions``, the coordinator, its marker channel, verification and APIs as one
  frozen value.
"""
