"""Leader elections on request (``tierlog leader-election``, Kafka's kafka-leader-election) over ElectLeaders:
``preferred`` gives a partition back to its first replica when that one is alive and in sync; ``unclean``
elects a live replica outside the ISR for a partition without a leader (records only the lost in-sync
replicas had are gone).

The partitions are every partition of the cluster, those of a topic (all, or one), or those of Kafka's JSON
file ``{"partitions":[{"topic":"orders","partition":0}]}``. Input mistakes raise ValueError
(``<what>; <what to do>``); what the controller answers per partition is returned, not raised.
"""

from __future__ import annotations

import json

from tierlog import errors
from tierlog.client.admin import Admin
from tierlog.client.types import TopicPartition

ELECTION_TYPES = ("preferred", "unclean")
EXAMPLE = '{"partitions":[{"topic":"orders","partition":0}]}'


def parse_partitions(text: str) -> list[TopicPartition]:
    """The partitions of Kafka's election file, checked as kafka-leader-election checks them."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the election file is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                         f"write it as {EXAMPLE}") from None
    if not isinstance(doc, dict) or "partitions" not in doc:
        raise ValueError(f"Replica election data is missing \"partitions\" field; write it as {EXAMPLE}")
    items = doc["partitions"]
    out = []
    for item in items if isinstance(items, list) else [items]:
        topic = item.get("topic") if isinstance(item, dict) else None
        partition = item.get("partition") if isinstance(item, dict) else None
        if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool):
            raise ValueError(f"{json.dumps(item)} in the election file is no partition; name each as "
                             "{\"topic\": \"orders\", \"partition\": 0}")
        out.append(TopicPartition(topic, partition))
    twice = sorted({tp for tp in out if out.count(tp) > 1})
    if twice:
        raise ValueError("Replica election data contains duplicate partitions: "
                         f"{', '.join(f'{t}-{p}' for t, p in twice)}; name each partition once")
    if not out:
        raise ValueError(f"the election file names no partition; write it as {EXAMPLE}")
    return out


async def topic_partitions(admin: Admin, topic: str, partition: int | None) -> list[TopicPartition]:
    """One partition of a topic, or all of them (UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist)."""
    if partition is not None:
        return [TopicPartition(topic, partition)]
    described = (await admin.describe_topics([topic]))[topic]
    return [TopicPartition(topic, p.partition) for p in described.partitions]


async def elect(admin: Admin, election_type: str, partitions: list[TopicPartition] | None) -> dict:
    """Run the election for ``partitions`` (None: every partition of the cluster). Returns the partitions
    ``elected``, those that needed none (``not_needed``: already led by the preferred replica, or led at all for
    an unclean election) and the ``failed`` ones with their Kafka error."""
    results = await admin.elect_leaders(election_type, partitions)
    out: dict = {"election_type": election_type.upper(), "elected": [], "not_needed": [], "failed": []}
    for tp, error in results.items():
        entry = {"topic": tp.topic, "partition": tp.partition}
        if error is None:
            out["elected"].append(entry)
        elif isinstance(error, errors.ElectionNotNeededError):
            out["not_needed"].append(entry)
        else:
            out["failed"].append({**entry, "error": error.name, "message": error.message})
    return out
