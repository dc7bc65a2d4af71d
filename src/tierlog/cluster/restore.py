"""How a topic rebuilt from the remote tier (``tierlog tier restore``) reaches the controller.

Its remote segments' object keys hold the topic id, so a restored topic must get its original id back,
and each partition must start where its remote segments end. Kafka's CreateTopics has no field for
either, so the restore tool sends an ordinary CreateTopics whose configs carry two tierlog-reserved
entries: :data:`RESTORE_TOPIC_ID` (the id, Kafka's base64 text) and :data:`RESTORE_POINTS` (JSON, partition
-> :class:`~tierlog.cluster.image.RestorePoint`). The request travels like any creation (forwarded to the
controller in an Envelope in a cluster), and the controller takes both out before it validates and stores
the configs: they are never topic configs. This keeps every metadata write in the controller (no tool
writes ZooKeeper behind its back), in single-node and ZooKeeper mode alike.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from tierlog.cluster.image import RestorePoint, restore_points_from_json, restore_points_to_json
from tierlog.errors import InvalidRequestError
from tierlog.kafka_uuid import uuid_from_str, uuid_to_str

RESTORE_TOPIC_ID = "tierlog.restore.topic.id"
RESTORE_POINTS = "tierlog.restore.points"


@dataclass(frozen=True, slots=True)
class TopicRestore:
    topic_id: uuid.UUID
    points: dict[int, RestorePoint]

    @property
    def initial_leader_epoch(self) -> int:
        """The restored partitions' first leader epoch: above every epoch of the restored data, in every
        partition, so the leader-epoch lineage of new records continues that of the remote segments."""
        return max((rp.latest_epoch for rp in self.points.values()), default=-1) + 1


def restore_configs(topic_id: uuid.UUID, points: Mapping[int, RestorePoint]) -> dict[str, str]:
    """The reserved CreateTopics configs that ask the controller to restore a topic."""
    return {RESTORE_TOPIC_ID: uuid_to_str(topic_id),
            RESTORE_POINTS: json.dumps(restore_points_to_json(dict(points)), separators=(",", ":"))}


def split_restore(configs: Mapping[str, str | None] | None) -> tuple[dict[str, str | None], TopicRestore | None]:
    """(the topic's own configs, the restore asked for or None)."""
    configs = dict(configs or {})
    raw_id, raw_points = configs.pop(RESTORE_TOPIC_ID, None), configs.pop(RESTORE_POINTS, None)
    if raw_id is None and raw_points is None:
        return configs, None
    if raw_id is None or raw_points is None:
        raise InvalidRequestError(f"a restore needs both {RESTORE_TOPIC_ID} and {RESTORE_POINTS}")
    try:
        topic_id = uuid_from_str(raw_id)
        points = restore_points_from_json(json.loads(raw_points))
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise InvalidRequestError(f"unreadable restore request: {e}") from None
    if topic_id.int == 0:
        raise InvalidRequestError("a restored topic needs a topic id other than the zero id")
    return configs, TopicRestore(topic_id, points)
