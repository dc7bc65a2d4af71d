"""Replication between brokers, from a replica's side.

- :mod:`.replica_fetcher`: followers copying their leaders' logs (Kafka's ReplicaFetcherManager and
  ReplicaFetcherThread);
- :mod:`.alter_partition`: a leader's ISR changes proposed to the controller (Kafka's AlterPartitionManager).

The replica manager (:mod:`tierlog.server.replica_manager`) owns the partitions and drives both.
"""
