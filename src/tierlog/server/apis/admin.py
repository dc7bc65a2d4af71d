"""CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords and DescribeCluster.

The request-level rules of Kafka's ``ControllerApis`` (duplicate names, ``__cluster_metadata``,
names versus ids in DeleteTopics, topic deletion disabled) live here; the topic rules (names,
partitions, replication factor, assignments, configs) are the controller's. DeleteRecords follows
Kafka's ``ReplicaManager.deleteRecords`` / ``Partition.deleteRecordsOnLeader`` and DescribeCluster
``KafkaApis.handleDescribeCluster`` as a broker endpoint.
"""

from __future__ import annotations

import logging

from tierlog.cluster import Controller
from tierlog.cluster.acls import ResourceType
from tierlog.errors import (
    NO_ERROR,
    InvalidReplicaAssignmentError,
    InvalidRequestError,
    KafkaError,
    MismatchedEndpointTypeError,
    TopicDeletionDisabledError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    UnsupportedEndpointTypeError,
    describe_error,
)
from tierlog.kafka_uuid import ZERO_UUID
from tierlog.logs import RepeatLimiter
from tierlog.protocol import ApiKey, RequestContext, build_response, offload
from tierlog.protocol.offload import Pacer, paced
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization
from tierlog.server.apis.configs import describe_topic
from tierlog.server.network.listener_security import endpoint_for_client
from tierlog.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
HIGH_WATERMARK = -1  # DeleteRecordsRequest.HIGH_WATERMARK
INVALID_LOW_WATERMARK = -1
LOGGED_TOPICS = 100  # CreateTopics logs the outcome of this many topics, and how many more



# DescribeCluster endpoint types (KIP-919)
ENDPOINT_TYPES = {1: "BROKER", 2: "CONTROLLER"}
BROKER_ENDPOINT = 1
# Kafka's AclEntry.supportedOperations(CLUSTER): CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS,
# IDEMPOTENT_WRITE, ALTER, DESCRIBE - all granted without an authorizer.
CLUSTER_OPERATIONS = sum(1 << op for op in (5, 9, 10, 11, 12, 7, 8))
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def _err(e: KafkaError) -> dict:
    return {"error_code": e.code, "error_message": e.message}


class AdminApis:
    def __init__(self, controller: Controller, replica_manager: ReplicaManager, *,
                 authorization: ApiAuthorization = ALLOW_ALL):
        self.controller = controller
        self.replica_manager = replica_manager
        self._failures = RepeatLimiter(log, max_keys=1000)
        self.authorization = authorization

    def register(self, registry) -> None:
        registry.register(ApiKey.CREATE_TOPICS, 2, 7, self.create_topics)
        registry.register(ApiKey.DELETE_TOPICS, 1, 6, self.delete_topics)
        registry.register(ApiKey.CREATE_PARTITIONS, 0, 3, self.create_partitions)
        registry.register(ApiKey.DELETE_RECORDS, 0, 2, self.delete_records)
        registry.register(ApiKey.DESCRIBE_CLUSTER, 0, 2, self.describe_cluster)

    # ------------------------------------------------------------------ CreateTopics

    async def create_topics(self, ctx: RequestContext):
        checked = self.authorization.create_topics(ctx)
        ctx = checked.ctx
        req = ctx.request
        validate_only = bool(getattr(req, "validate_only", False))
        results = []
        pacer = Pacer()  # a request may name a million topics: its loops yield to the event loop
        async for chunk in paced(await _once_per_name(req.topics, pacer), 64, pacer):
            for t, duplicated in chunk:
                if duplicated:
                    results.append({"name": t.name, "error_code": InvalidRequestError.code,
                                    "error_message": "Duplicate topic name."})
                elif t.name == CLUSTER_METADATA_TOPIC:
                    results.append({"name": t.name, "error_code": InvalidRequestError.code,
                                    "error_message": f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is "
                                                     "prohibited."})
                else:
                    results.append(await self._create_topic(t, validate_only))
        self._log_outcome("Validated" if validate_only else "CreateTopics", results)
        results += checked.refused
        items = len(results) + sum(len(r.get("configs", ())) for r in results)
        return await offload.respond(ctx, {"throttle_time_ms": 0, "topics": results}, items)

    def _log_outcome(self, verb: str, results: list[dict]) -> None:
        """One INFO line per request, errors by name (``INVALID_REPLICATION_FACTOR (38): <message>``). A
        request that only failed is limited per topic names and errors: a client retrying it every 100 ms
        (a metadata manager asking for an impossible topic) gets one line and a count, not a flood."""
        shown = ", ".join(f"{r['name']}: " + (describe_error(r["error_code"], r.get("error_message"))
                                              if r["error_code"] else "SUCCESS") for r in results[:LOGGED_TOPICS])
        more = f" and {len(results) - LOGGED_TOPICS} more" if len(results) > LOGGED_TOPICS else ""
        if any(r["error_code"] == NO_ERROR for r in results):
            log.info("%s: %s%s", verb, shown, more)
        else:
            key = (verb, tuple((r["name"], r["error_code"]) for r in results[:LOGGED_TOPICS]))
            self._failures.log(key, logging.INFO, "%s: %s%s", verb, shown, more)

    async def _create_topic(self, t, validate_only: bool) -> dict:
        name = t.name
        try:
            assignments: dict[int, list[int]] = {}
            for a in t.assignments:
                if a.partition_index in assignments:
                    raise InvalidReplicaAssignmentError(
                        f"Found multiple manual partition assignments for partition {a.partition_index}")
                assignments[a.partition_index] = list(a.broker_ids)
            topic = await self.controller.call(
                self.controller.create_topic, name, t.num_partitions, t.replication_factor, assignments or None,
                {c.name: c.value for c in t.configs}, validate_only)
        except KafkaError as e:
            return {"name": name, **_err(e)}
        configs = sorted(describe_topic(self.controller, topic.configs), key=lambda e: e.name)
        return {
            "name": name,
            "topic_id": topic.topic_id,
            "error_code": NO_ERROR,
            "error_message": None,
            "num_partitions": len(topic.partitions),
            "replication_factor": len(next(iter(topic.partitions.values())).replicas),
            "topic_config_error_code": NO_ERROR,
            "configs": [{"name": e.name, "value": None if e.sensitive else e.value, "read_only": e.read_only,
                         "config_source": int(e.source), "is_sensitive": e.sensitive} for e in configs],
        }

    # ------------------------------------------------------------------ DeleteTopics

    async def delete_topics(self, ctx: RequestContext):
        checked = self.authorization.delete_topics(ctx)
        ctx = checked.ctx
        req = ctx.request
        by_name: list[str] = list(getattr(req, "topic_names", ()) or ())
        if not self.controller.effective_config["delete.topic.enable"]:
            # Kafka fails the whole request (DeleteTopicsRequest.getErrorResponse, without messages):
            # InvalidRequestError.code before v3, TopicDeletionDisabledError.code from v3 on.
            code = InvalidRequestError.code if ctx.api_version < 3 else TopicDeletionDisabledError.code
            everyone = [(n, ZERO_UUID) for n in by_name] + \
                       [(t.name, t.topic_id) for t in getattr(req, "topics", ()) or ()]
            return await offload.respond(ctx, {"throttle_time_ms": 0, "responses": [
                {"name": n, "topic_id": i, "error_code": code} for n, i in everyone] + checked.refused},
                len(everyone) + len(checked.refused))
        by_id = []
        results: list[dict] = []
        pacer = Pacer()  # a request may name a million topics: its loops yield to the event loop
        for i, t in enumerate(getattr(req, "topics", ()) or ()):
            if not i & 255:
                await pacer()
            topic_id = t.topic_id if t.topic_id is not None else ZERO_UUID
            if t.name is None:
                if topic_id == ZERO_UUID:
                    results.append({"name": None, "topic_id": ZERO_UUID, "error_code": InvalidRequestError.code,
                                    "error_message": "Neither topic name nor id were specified."})
                else:
                    by_id.append(topic_id)
            elif topic_id == ZERO_UUID:
                by_name.append(t.name)
            else:
                results.append({"name": t.name, "topic_id": topic_id, "error_code": InvalidRequestError.code,
                                "error_message": "You may not specify both topic name and topic id."})

        names, dup_names = await _unique(by_name, pacer)
        ids, dup_ids = await _unique(by_id, pacer)
        for n in dup_names:
            results.append({"name": n, "topic_id": ZERO_UUID, "error_code": InvalidRequestError.code,
                            "error_message": "Duplicate topic name."})
        for i in dup_ids:
            results.append({"name": None, "topic_id": i, "error_code": InvalidRequestError.code,
                            "error_message": "Duplicate topic id."})
        image = self.controller.image
        to_delete: dict = {}  # topic id -> name
        for k, i in enumerate(ids):
            if not k & 255:
                await pacer()
            t = image.topic_by_id(i)
            if t is None:
                results.append({"name": None, "topic_id": i, "error_code": UnknownTopicIdError.code,
                                "error_message": None})
            else:
                to_delete[i] = t.name
        for k, n in enumerate(names):
            if not k & 255:
                await pacer()
            t = image.topics.get(n)
            if t is None:
                results.append({"name": n, "topic_id": ZERO_UUID, "error_code": UnknownTopicOrPartitionError.code,
                                "error_message": None})
            elif t.topic_id in to_delete or t.topic_id in dup_ids:
                to_delete.pop(t.topic_id, None)
                dup_ids.append(t.topic_id)
                results.append({"name": n, "topic_id": t.topic_id, "error_code": InvalidRequestError.code,
                                "error_message": "The provided topic name maps to an ID that was already supplied."})
            else:
                to_delete[t.topic_id] = n
        for k, (topic_id, name) in enumerate(to_delete.items()):
            if not k & 15:
                await pacer()
            out = {"name": name, "topic_id": topic_id, "error_code": NO_ERROR, "error_message": None}
            try:
                await self.controller.call(self.controller.delete_topic, name)
            except KafkaError as e:
                out.update(_err(e))
            results.append(out)
        offload.free_later(by_name, by_id, names, ids, to_delete)
        results += checked.refused
        return await offload.respond(ctx, {"throttle_time_ms": 0, "responses": results}, len(results))

    # ------------------------------------------------------------------ CreatePartitions

    async def create_partitions(self, ctx: RequestContext):
        checked = self.authorization.create_partitions(ctx)
        ctx = checked.ctx
        req = ctx.request
        validate_only = bool(getattr(req, "validate_only", False))
        results = []
        for t, duplicated in await _once_per_name(req.topics, Pacer()):
            out = {"name": t.name, "error_code": NO_ERROR, "error_message": None}
            if duplicated:
                out.update(error_code=InvalidRequestError.code, error_message="Duplicate topic name.")
            else:
                assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
                try:
                    await self.controller.call(self.controller.create_partitions, t.name, t.count, assignments,
                                               validate_only)
                except KafkaError as e:
                    out.update(_err(e))
            results.append(out)
        return build_response(ctx, {"throttle_time_ms": 0, "results": results + checked.refused})

    # ------------------------------------------------------------------ DeleteRecords

    async def delete_records(self, ctx: RequestContext):
        checked = self.authorization.delete_records(ctx)
        ctx = checked.ctx
        topics = []
        items = 0
        pacer = Pacer()  # a request may name a million partitions: yield to the event loop every few ms
        for t in ctx.request.topics:
            parts = []
            async for chunk in paced(t.partitions, 64, pacer):
                for p in chunk:
                    low, code = INVALID_LOW_WATERMARK, 0
                    try:
                        low = self.replica_manager.delete_records(t.name, p.partition_index, p.offset)
                    except KafkaError as e:
                        code = e.code
                        log.debug("DeleteRecords on %s-%d failed: %s", t.name, p.partition_index, e)
                    parts.append({"partition_index": p.partition_index, "low_watermark": low, "error_code": code})
            topics.append({"name": t.name, "partitions": parts})
            items += 1 + len(parts)
        topics += checked.refused
        items += sum(1 + len(t["partitions"]) for t in checked.refused)
        return await offload.respond(ctx, {"throttle_time_ms": 0, "topics": topics}, items)

    # ------------------------------------------------------------------ DescribeCluster

    async def describe_cluster(self, ctx: RequestContext):
        req = ctx.request
        operations = self.authorization.operations(ctx, ResourceType.CLUSTER, None, CLUSTER_OPERATIONS) \
            if req.include_cluster_authorized_operations else AUTHORIZED_OPERATIONS_OMITTED
        # An error answer carries the ACLs' bit field when asked for with an authorizer, else none.
        error_operations = operations if self.authorization.authorizer is not None else AUTHORIZED_OPERATIONS_OMITTED
        wanted = getattr(req, "endpoint_type", BROKER_ENDPOINT)
        if wanted not in ENDPOINT_TYPES:
            return build_response(ctx, {"cluster_authorized_operations": error_operations,
                "error_code": InvalidRequestError.code if ctx.api_version == 0 else UnsupportedEndpointTypeError.code,
                "error_message": f"Unsupported endpoint type {wanted}"})
        if wanted != BROKER_ENDPOINT:
            return build_response(ctx, {"cluster_authorized_operations": error_operations,
                "error_code": InvalidRequestError.code if ctx.api_version == 0 else MismatchedEndpointTypeError.code,
                "error_message": f"The request was sent to an endpoint of type BROKER, but we wanted an endpoint "
                                 f"of type {ENDPOINT_TYPES[wanted]}"})
        image = self.controller.image
        brokers = [{"broker_id": b.node_id, "host": host, "port": port, "rack": b.rack, "is_fenced": False}
                   for b in sorted(image.brokers.values(), key=lambda b: b.node_id)
                   for host, port in (endpoint_for_client(b, ctx),)]
        controller_id = image.controller_id if image.controller_id in image.brokers else -1
        return build_response(ctx, {
            "throttle_time_ms": 0, "error_code": NO_ERROR, "error_message": None, "endpoint_type": BROKER_ENDPOINT,
            "cluster_id": image.cluster_id, "controller_id": controller_id, "brokers": brokers,
            "cluster_authorized_operations": operations})


async def _unique(items: list, pacer: Pacer) -> tuple[list, list]:
    """(items named once, items named more than once), each in first-seen order."""
    counts: dict = {}
    async for chunk in paced(items, 512, pacer):
        for x in chunk:
            counts[x] = counts.get(x, 0) + 1
    once: list = []
    more: list = []
    async for chunk in paced(list(counts.items()), 512, pacer):
        for x, n in chunk:
            (once if n == 1 else more).append(x)
    offload.free_later(counts)
    return once, more


__all__ = ["AdminApis"]


async def _once_per_name(topics, pacer: Pacer) -> list:
    """(topic, whether its name appears more than once) for each topic of a request once, in order."""
    counts: dict[str, int] = {}
    async for chunk in paced(topics, 512, pacer):
        for t in chunk:
            counts[t.name] = counts.get(t.name, 0) + 1
    out = []
    async for chunk in paced(topics, 512, pacer):
        for t in chunk:
            n = counts.get(t.name)
            if n is not None:
                out.append((t, n > 1))
                counts[t.name] = None
    offload.free_later(counts)
    return out
