"""The shape of a cluster as a Metadata response shows it, for differential tests against Apache Kafka.

Two clusters that went through the same admin requests and the same failures answer Metadata with the
same shape, though broker ids, ports, topic ids and leader epochs differ. ``metadata_shape`` keeps only
what must match: the number of brokers, whether a controller is named, and per topic its error code and
per partition its error code, its leader as an index into the sorted list of live brokers (``"none"``
without one), how many replicas, in-sync replicas and offline replicas it has. ``differences`` lists
where two shapes disagree, one line each, for an assertion message.

Until tierlog replicates data (issue 20) its ISR is the leader alone, where Kafka's holds every caught-up
replica; ``isr="leader"`` compares such clusters: a partition with a leader shows whether its ISR holds
the leader, one without a leader still the ISR's size (both keep the last member, the dead leader).

The response is what ``tests.harness.rawclient.RawClient.request(ApiKey.METADATA, version, ...)``
returns (kio's dataclasses), or the same as dicts; fields a version lacks (``controller_id`` before v1,
``offline_replicas`` before v5) count as absent.
"""

from __future__ import annotations

from typing import Any

NO_LEADER = "none"
#: A leader id that is not among the response's brokers (never expected of a consistent answer).
UNLISTED_LEADER = "unlisted"


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


#: ``isr="leader"``: a led partition's ISR holds its leader, or not.
LEADER_IN_ISR = "leader in"
LEADER_NOT_IN_ISR = "leader not in"


def metadata_shape(response: Any, topics: list[str] | None = None, include_internal: bool = False,
                   isr: str = "size") -> dict:
    """``{"brokers": n, "controller": bool, "topics": {name: {"error": code, "partitions": {index: {"leader":
    i | "none", "replicas": n, "isr": n, "offline": n, "error": code}}}}}``.

    ``topics``: only these (a topic the response lacks is left out, so the shapes differ); else every topic
    of the response, internal ones (``__consumer_offsets``...) only with ``include_internal``. ``isr``:
    ``"size"``, or ``"leader"`` (a led partition's ``"isr"`` is :data:`LEADER_IN_ISR` or
    :data:`LEADER_NOT_IN_ISR`, a leaderless one's its size).
    """
    if isr not in ("size", "leader"):
        raise ValueError(f"isr must be 'size' or 'leader', not {isr!r}")
    broker_ids = sorted(int(_get(b, "node_id")) for b in _get(response, "brokers", ()))
    position = {broker_id: i for i, broker_id in enumerate(broker_ids)}
    controller_id = int(_get(response, "controller_id", -1))
    shape_topics: dict[str, dict] = {}
    for t in _get(response, "topics", ()):
        name = str(_get(t, "name"))
        if topics is not None and name not in topics:
            continue
        if topics is None and _get(t, "is_internal", False) and not include_internal:
            continue
        partitions = {}
        for p in _get(t, "partitions", ()):
            leader = int(_get(p, "leader_id", -1))
            in_sync = [int(r) for r in _get(p, "isr_nodes", ())]
            if isr == "leader" and leader >= 0:
                isr_shape: int | str = LEADER_IN_ISR if leader in in_sync else LEADER_NOT_IN_ISR
            else:
                isr_shape = len(in_sync)
            partitions[int(_get(p, "partition_index"))] = {
                "leader": NO_LEADER if leader < 0 else position.get(leader, UNLISTED_LEADER),
                "replicas": len(_get(p, "replica_nodes", ())),
                "isr": isr_shape,
                "offline": len(_get(p, "offline_replicas", ())),
                "error": int(_get(p, "error_code", 0)),
            }
        shape_topics[name] = {"error": int(_get(t, "error_code", 0)), "partitions": dict(sorted(partitions.items()))}
    return {"brokers": len(broker_ids), "controller": controller_id >= 0,
            "topics": dict(sorted(shape_topics.items()))}


def differences(expected: dict, actual: dict, path: str = "") -> list[str]:
    """Where two shapes (or any nested dicts) differ: ``"topics.t.partitions.0.isr: 3 != 2"`` lines."""
    if not (isinstance(expected, dict) and isinstance(actual, dict)):
        return [] if expected == actual else [f"{path or 'shape'}: {expected!r} != {actual!r}"]
    found = []
    for key in sorted(set(expected) | set(actual), key=str):
        where = f"{path}.{key}" if path else str(key)
        if key not in actual:
            found.append(f"{where}: missing on the right")
        elif key not in expected:
            found.append(f"{where}: missing on the left")
        else:
            found += differences(expected[key], actual[key], where)
    return found
