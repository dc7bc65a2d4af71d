"""The remote log manager's per-partition work, as Kafka's ``RemoteLogManager`` splits it into tasks.

- ``state.py``: ``RemotePartitionState``, all the manager knows of one led partition;
- ``base.py``: ``RLMTask``, what every leader task shares (one run, the periodic loop, fencing, events);
- ``copy.py``: ``RLMCopyTask`` uploads rolled segments (and which ones may go: pure functions);
- ``compaction_rebuild.py``: ``CompactionRebuild``, the copy task's part for compacted topics;
- ``expiration.py``: ``RLMExpirationTask`` applies remote retention and cleans up (and which segments: pure
  functions);
- ``follower.py``: ``RLMFollowerTask`` and the follower's aux state (``build_remote_log_aux_state``);
- ``disablement.py``: ``RemoteTopicDisablement``, KIP-950's disablement and a deleted topic's remote data.

``RemoteLogManager`` (``tiered/remote_log_manager.py``) owns the states and schedules the tasks.
"""
