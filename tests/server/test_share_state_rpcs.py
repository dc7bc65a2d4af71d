"""KIP-932's share coordinator RPCs (InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
DeleteShareGroupState, ReadShareGroupStateSummary), tierlog against Kafka 4.4.0 (the session's ``kafka_peer``):
the versions ApiVersions lists, then one share-partition's life through them with the same answers (error codes,
Kafka's messages, the state read back): never initialized, bad requests, fenced state and leader epochs, a write
read back, a newer leader epoch recorded by a read, and deletion. They are inter-broker RPCs; Kafka's broker
answers them on its listener as tierlog's does."""

from __future__ import annotations

import uuid

from tests.harness.rawclient import create_topic, raw_client, unique
from tests.harness.waiting import wait_until
from tierlog.kafka_uuid import uuid_to_str
from tierlog.protocol import ApiKey

APIS = (ApiKey.INITIALIZE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE, ApiKey.WRITE_SHARE_GROUP_STATE,
        ApiKey.DELETE_SHARE_GROUP_STATE, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY)
RETRIED = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


def _scenario(bootstrap: str) -> dict:
    topic, group = unique("share-rpc"), unique("share-rpc-group")
    create_topic(bootstrap, topic)
    out: dict = {}
    with raw_client(bootstrap) as raw:
        versions = raw.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        out["versions"] = sorted((int(k.api_key), k.min_version, k.max_version) for k in versions.api_keys
                                 if k.api_key in APIS)
        tid = raw.request(ApiKey.METADATA, 12, {"topics": [{"name": topic, "topic_id": None}],
                                                "allow_auto_topic_creation": False,
                                                "include_topic_authorized_operations": False}).topics[0].topic_id

        def call(api: ApiKey, version: int, partition: dict, topic_id: uuid.UUID = tid, group_id: str = group):
            answer = raw.request(api, version, {"group_id": group_id, "topics": [
                {"topic_id": topic_id, "partitions": [partition]}]})
            return answer.results

        def first(api: ApiKey, version: int, partition: dict, topic_id: uuid.UUID = tid, *fields: str) -> tuple:
            r = call(api, version, partition, topic_id)[0].partitions[0]
            return (int(r.error_code), r.error_message, *(getattr(r, f) for f in fields))

        # FindCoordinator key type 2 creates __share_group_state; its partition is ready once a read is answered
        key = f"{group}:{uuid_to_str(tid)}:0"
        wait_until(lambda: raw.request(ApiKey.FIND_COORDINATOR, 6, {"key_type": 2, "coordinator_keys": [key]})
                   .coordinators[0].error_code == 0, timeout=60, what="a share coordinator")
        wait_until(lambda: first(ApiKey.READ_SHARE_GROUP_STATE, 0, {"partition": 0, "leader_epoch": 0})[0]
                   not in RETRIED, timeout=60, what="the state partition loaded")

        read = ApiKey.READ_SHARE_GROUP_STATE, 0
        write = ApiKey.WRITE_SHARE_GROUP_STATE, 1
        init = ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0
        summary = ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 1
        delete = ApiKey.DELETE_SHARE_GROUP_STATE, 0
        summary_fields = ("state_epoch", "leader_epoch", "start_offset", "delivery_complete_count")

        def state_write(state_epoch: int, leader_epoch: int, start: int, batches=()) -> dict:
            return {"partition": 0, "state_epoch": state_epoch, "leader_epoch": leader_epoch, "start_offset": start,
                    "state_batches": [{"first_offset": f, "last_offset": la, "delivery_state": s, "delivery_count": c}
                                      for f, la, s, c in batches]}

        out["read uninitialized"] = first(*read, {"partition": 0, "leader_epoch": 0})
        out["write uninitialized"] = first(*write, state_write(0, 0, 0))
        out["summary uninitialized"] = first(*summary, {"partition": 0, "leader_epoch": 0}, tid, *summary_fields)
        out["read negative partition"] = first(*read, {"partition": -1, "leader_epoch": 0})
        out["read negative leader epoch"] = first(*read, {"partition": 0, "leader_epoch": -1})
        out["write negative state epoch"] = first(*write, state_write(-1, 0, 0))
        out["initialize unknown topic"] = first(*init, {"partition": 0, "state_epoch": 0, "start_offset": -1},
                                                uuid.uuid4())
        out["initialize"] = first(*init, {"partition": 0, "state_epoch": 1, "start_offset": 0})
        out["initialize older state epoch"] = first(*init, {"partition": 0, "state_epoch": 0, "start_offset": 0})
        out["write"] = first(*write, state_write(1, 5, 2, [(2, 3, 0, 1), (4, 4, 2, 1)]))
        out["write older state epoch"] = first(*write, state_write(0, 5, 2))
        out["summary after write"] = first(*summary, {"partition": 0, "leader_epoch": 0}, tid, *summary_fields)
        # a write does not record its leader epoch (a read does): the share-partition's new leader reads first
        r = call(*read, {"partition": 0, "leader_epoch": 6})[0].partitions[0]
        out["read"] = (int(r.error_code), r.state_epoch, r.start_offset,
                       [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in r.state_batches])
        out["summary"] = first(*summary, {"partition": 0, "leader_epoch": 0}, tid, *summary_fields)
        out["read older leader epoch"] = first(*read, {"partition": 0, "leader_epoch": 4})
        out["write older leader epoch"] = first(*write, state_write(1, 5, 2))
        out["write merged"] = first(*write, state_write(1, 6, 3, [(3, 3, 2, 1)]))
        out["write start offset back"] = first(*write, state_write(1, 6, 1, [(4, 4, 0, 2)]))
        r = call(*read, {"partition": 0, "leader_epoch": 6})[0].partitions[0]
        out["read merged"] = (r.start_offset, [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                               for b in r.state_batches])
        out["delete unknown topic"] = first(*delete, {"partition": 0}, uuid.uuid4())
        out["delete"] = first(*delete, {"partition": 0})
        out["summary deleted"] = first(*summary, {"partition": 0, "leader_epoch": 0}, tid, *summary_fields)
        out["read deleted"] = first(*read, {"partition": 0, "leader_epoch": 6})
        out["empty group"] = len(call(*read, {"partition": 0, "leader_epoch": 0}, tid, ""))
        out["no topics"] = len(raw.request(ApiKey.READ_SHARE_GROUP_STATE, 0, {"group_id": group, "topics": []}).results)
    return out


def test_share_state_rpcs_as_kafka_44(tierlog_peer, kafka_peer):
    ours, theirs = _scenario(tierlog_peer.bootstrap), _scenario(kafka_peer.bootstrap)
    assert ours == theirs
    # what the comparison covers, so that a change on both sides is seen
    assert ours["versions"] == [(83, 0, 0), (84, 0, 0), (85, 0, 1), (86, 0, 0), (87, 0, 1)]
    assert ours["read uninitialized"] == (42, "Read operation on uninitialized share partition not allowed.")
    assert ours["write older state epoch"][0] == 124 and ours["read older leader epoch"][0] == 74
    assert ours["write older leader epoch"][0] == 74 and ours["initialize older state epoch"][0] == 124
    assert ours["read merged"] == (3, [(3, 3, 2, 1), (4, 4, 0, 2)])
