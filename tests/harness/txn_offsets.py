"""Transactional offset commits driven by hand, as a transactional producer and its transaction coordinator
would: TxnOffsetCommit to the group coordinator, then a COMMIT or ABORT marker (WriteTxnMarkers) to the group's
``__consumer_offsets`` partition; OffsetFetch v8 (with or without ``require_stable``) and a plain OffsetCommit
to read and write the group's offsets beside them."""

from __future__ import annotations

from tests.harness.rawclient import RawClient
from tests.harness.transactions import marker, write_markers
from tierlog.protocol import ApiKey

OFFSETS_TOPIC = "__consumer_offsets"


def txn_offset_commit(raw: RawClient, group: str, producer_id: int, epoch: int, offsets: dict[tuple[str, int], int],
                      *, version: int = 3, generation: int = -1, member_id: str = "",
                      instance: str | None = None) -> dict[tuple[str, int], int]:
    """TxnOffsetCommit of ``offsets`` ({(topic, partition): offset}); {(topic, partition): error code}."""
    topics: dict[str, list[dict]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                             "committed_leader_epoch": -1, "committed_metadata": "m"})
    values = {"transactional_id": "hand-made", "group_id": group, "producer_id": producer_id,
              "producer_epoch": epoch, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
    if version >= 3:
        values.update(generation_id=generation, member_id=member_id, group_instance_id=instance)
    resp = raw.request(ApiKey.TXN_OFFSET_COMMIT, version, values)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def offset_commit(raw: RawClient, group: str, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """A plain OffsetCommit v8 with generation -1 (a simple group); {(topic, partition): error code}."""
    topics: dict[str, list[dict]] = {}
    for (topic, partition), offset in offsets.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "committed_offset": offset,
                                             "committed_leader_epoch": -1, "committed_metadata": ""})
    resp = raw.request(ApiKey.OFFSET_COMMIT, 8, {
        "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]})
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def offset_fetch(raw: RawClient, group: str, topic: str, partitions=(0,), require_stable: bool = False
                 ) -> dict[int, tuple[int, int]]:
    """OffsetFetch v8 of one group's topic; {partition: (committed offset, error code)}."""
    resp = raw.request(ApiKey.OFFSET_FETCH, 8, {"require_stable": require_stable, "groups": [
        {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(partitions)}]}]})
    g = resp.groups[0]
    assert g.error_code == 0, g
    return {p.partition_index: (p.committed_offset, p.error_code) for t in g.topics for p in t.partitions}


def end_offsets_txn(raw: RawClient, producer_id: int, epoch: int, commit: bool, offsets_partition: int = 0) -> int:
    """The COMMIT or ABORT marker of the producer on ``__consumer_offsets-offsets_partition``; its error code."""
    codes = write_markers(raw, marker(producer_id, epoch, commit, OFFSETS_TOPIC, (offsets_partition,)))
    return codes[(producer_id, OFFSETS_TOPIC, offsets_partition)]
