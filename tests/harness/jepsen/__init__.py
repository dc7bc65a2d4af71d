"""Jepsen-style fault runs against a replicated tierlog cluster: a workload, a nemesis, a checker.

- ``workload``: idempotent producers (confluent-kafka, acks=all) writing unique numbered values, transactional
  producers (two partitions a transaction, some aborted on purpose), read_committed readers, a consumer
  group committing offsets, and the :class:`~tests.harness.jepsen.workload.History` of what they were told;
- ``monitor``: Metadata polled every 100 ms, windows without a leader per partition;
- ``nemesis``: the fault kinds (leader and controller SIGKILL, a leader or the group's coordinator SIGSTOPped
  past the ZooKeeper session, a leader cut from its followers, a broker cut from ZooKeeper, a full disk, a
  ZooKeeper restart, a rolling restart), alone or two nested, drawn by a seeded generator;
- ``checker``: reads every partition back and reports lost, duplicated, reordered and misplaced
  acknowledged writes, committed offsets that went back, and offsets at which consumers (the workload's
  ``ReaderWorker``s and the final read) saw different values, and transactions seen in part, aborted ones
  seen, or values seen before their commit began (tests/cluster/test_jepsen_checker.py);
- ``run``: one whole run on a cluster of its own (``run(work_dir, Settings(...))``).

tests/cluster/test_replication_jepsen.py runs a few cycles; scripts/jepsen_replication.py the long run
(docs/operations.md, "Fault runs").
"""
