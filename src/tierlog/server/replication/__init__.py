"""Replication between brokers, from a replica's side.

- :mod:`.replica_fetcher`: followers copying their leaders' logs (Kafka's ReplicaFetcherManager and
  ReplicaFetcherThread);
- :mod:`.alter_partition`: a leader's ISR changes proposed to the controller (Kafka's AlterPartitionManager);
- :mod:`.builder`: ``build_replication``, both with the replication throttle and ISR metrics as one frozen value.

The replica manager (:mod:`tierlog.server.replica_manager`) owns the partitions and drives both.
"""
