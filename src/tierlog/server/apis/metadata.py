"""ApiVersions and Metadata."""

from __future__ import annotations

import dataclasses
import functools
import logging
import typing

from tierlog.cluster import INTERNAL_TOPICS, Controller, validate_topic_name
from tierlog.cluster.acls import AclOperation, ResourceType, operations_bitfield
from tierlog.errors import (
    NO_ERROR,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    LeaderNotAvailableError,
    RebootstrapRequiredError,
    TopicAuthorizationFailedError,
    UnknownTopicIdError,
    UnknownTopicOrPartitionError,
    describe_error,
    error_for_code,
)
from tierlog.kafka_uuid import ZERO_UUID
from tierlog.protocol import ApiKey, HandlerRegistry, RequestContext, build, build_api_versions_response, offload
from tierlog.protocol.offload import SLICE, paced
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization
from tierlog.server.network.listener_security import endpoint_for_client

log = logging.getLogger(__name__)

AUTHORIZED_OPERATIONS_OMITTED = -2147483648  # Kafka's "not requested" marker

# KAFKA-18659: older librdkafka (kcat 1.7.1 ships 2.0.2; 2.16 is fixed) compresses gzip, snappy and lz4 only
# when ApiVersions lists Produce v0, and silently sends them uncompressed otherwise. Kafka 4.x advertises
# Produce from v0 for that reason while refusing v0-v2 on use; so does tierlog (a Produce below the
# registered range closes the connection, as any unsupported version does).
ADVERTISED_PRODUCE_MIN_VERSION = 0
FEATURES_VERSION = 3  # ApiVersions' first version with KIP-584's features
TARGET_CHECK_VERSION = 5  # ApiVersions' first version naming the cluster and node the client means (KIP-1242)


class MetadataApis:
    def __init__(self, registry: HandlerRegistry, controller: Controller, node_id: int, authorizer=None,
                 authorization: ApiAuthorization = ALLOW_ALL):
        self.registry = registry  # ApiVersions answers what is registered
        self.controller = controller
        self.node_id = node_id
        #: The authorizer when authorizer.class.name is set, else None (nothing checked); the topics are checked
        #: inline (a hot path), the authorized-operations bit fields come from ``authorization``
        self.authorizer = authorizer
        self.authorization = authorization
        #: Each topic's built answer to a Metadata of every topic: (name, the version's topic class) -> (topic
        #: image, live brokers, entity). Images are replaced on every change, never changed, so a topic answers
        #: from here until its image or the live brokers change (a console asks for every topic every few
        #: seconds: building 10,000 partitions' entities was a third of the answer's CPU)
        self._answers: dict[str, tuple] = {}

    def register(self, registry) -> None:
        registry.register(ApiKey.API_VERSIONS, 0, 5, self.api_versions)
        registry.register(ApiKey.METADATA, 0, 13, self.metadata)
        registry.register(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0, self.describe_topic_partitions)

    async def api_versions(self, ctx: RequestContext):
        if ctx.api_version >= TARGET_CHECK_VERSION:
            req = ctx.request
            if (req.cluster_id is None) != (req.node_id == -1):  # Kafka's isValid: both named or neither
                return build_api_versions_response(ctx.api_version, HandlerRegistry(), InvalidRequestError.code)
            if self._other_target(req):
                # KIP-1242: the client reached another cluster or node than it meant (an address reused); it
                # goes back to its bootstrap servers. Kafka answers at the request's version with no API listed.
                return build_api_versions_response(ctx.api_version, HandlerRegistry(), RebootstrapRequiredError.code)
        response = build_api_versions_response(ctx.api_version, self.registry)
        keys = tuple(dataclasses.replace(k, min_version=min(k.min_version, ADVERTISED_PRODUCE_MIN_VERSION))
                     if k.api_key == ApiKey.PRODUCE else k for k in response.api_keys)
        response = dataclasses.replace(response, api_keys=keys)
        if ctx.api_version >= FEATURES_VERSION:
            response = self._with_features(response, ctx.api_version)
        return response

    def _other_target(self, request) -> bool:
        """Kafka's check: a cluster id given and not this cluster's, or given with a node id not this broker's."""
        cluster_id = request.cluster_id
        if cluster_id is None:
            return False
        return cluster_id != self.controller.image.cluster_id or request.node_id != self.node_id

    def _with_features(self, response, ctx_version: int):
        """KIP-584's features (ApiVersions v3+; what DescribeFeatures reads): the supported ranges
        (server/apis/features.py) and the finalized levels with their epoch (levels of 0 are not listed, as
        Kafka lists none). Clients use transaction version 2 when it is finalized at 2."""
        schema = type(response)
        supported = typing.get_args(typing.get_type_hints(schema)["supported_features"])[0]
        finalized = typing.get_args(typing.get_type_hints(schema)["finalized_features"])[0]
        features = self.controller.finalized_features
        # KIP-1022: before v4 a supported feature could not have min version 0; Kafka leaves such ones out
        ranges = sorted(self.controller.supported_features.items()) if ctx_version >= 4 else ()
        return dataclasses.replace(
            response,
            supported_features=tuple(supported(name=name, min_version=lo, max_version=hi) for name, (lo, hi) in ranges),
            finalized_features_epoch=features.epoch,
            finalized_features=tuple(finalized(name=name, max_version_level=level, min_version_level=level)
                                     for name, level in sorted(features.levels.items())))

    async def metadata(self, ctx: RequestContext):
        req = ctx.request
        image = self.controller.image
        allow_create = (getattr(req, "allow_auto_topic_creation", True)
                        and self.controller.effective_config["auto.create.topics.enable"])
        requested = req.topics
        topics_out = []
        partitions = 0  # the answer's size, counted as it is made (a million topics take a while to count)
        if requested is None or (ctx.api_version == 0 and not requested):
            listed = sorted(image.topics)
            if self.authorizer is not None:  # Kafka lists only the topics the principal may DESCRIBE
                listed = [n for n in listed if self._may(ctx, AclOperation.DESCRIBE, n)]
            # the answers of the bit fields asked for (v8+) are filled in per request: those are built each time
            entity = None if self.authorizer is not None and getattr(
                req, "include_topic_authorized_operations", False) else _topic_entity(ctx.response_type)
            async for names in paced(listed, 256):
                topics_out += ([self._topic(image.topics[n]) for n in names] if entity is None else
                               self._built_topics([image.topics[n] for n in names], entity))
                partitions += sum(len(image.topics[n].partitions) for n in names)
            self._forget_deleted(image)
        else:
            async for chunk in paced(requested, 256):  # a request may name a million topics
                for t in chunk:
                    name = getattr(t, "name", None)
                    topic_id = getattr(t, "topic_id", None)
                    if name is None and topic_id not in (None, ZERO_UUID):
                        topic = image.topic_by_id(topic_id)
                        if topic is not None and self.authorizer is not None and not self._may(
                                ctx, AclOperation.DESCRIBE, topic.name):
                            # topic ids are not secret: Kafka answers the id with the error
                            topics_out.append({"error_code": TopicAuthorizationFailedError.code, "name": None,
                                               "topic_id": topic_id, "is_internal": False})
                            continue
                        partitions += len(topic.partitions) if topic else 0
                        topics_out.append(self._topic(topic) if topic else
                                          {"error_code": UnknownTopicIdError.code, "name": None,
                                           "topic_id": topic_id})
                        continue
                    if self.authorizer is not None and not self._may(ctx, AclOperation.DESCRIBE, name or ""):
                        topics_out.append({"error_code": TopicAuthorizationFailedError.code, "name": name,
                                           "is_internal": False})
                        continue
                    if (self.authorizer is not None and allow_create and name not in image.topics
                            and not self._may_create(ctx, name or "")):  # Kafka: no CREATE, no auto-creation
                        topics_out.append({"error_code": TopicAuthorizationFailedError.code, "name": name,
                                           "is_internal": False})
                        continue
                    topics_out.append(answer := await self._named_topic(name, allow_create))
                    partitions += len(answer.get("partitions", ()))
        items = len(topics_out) + partitions
        cluster_operations = AUTHORIZED_OPERATIONS_OMITTED
        if self.authorizer is not None:  # the bit fields asked for (v8+), from the ACLs
            if getattr(req, "include_topic_authorized_operations", False):
                for t in topics_out:
                    if t["error_code"] == NO_ERROR and t.get("name"):
                        t["topic_authorized_operations"] = self.authorization.operations(
                            ctx, ResourceType.TOPIC, t["name"], AUTHORIZED_OPERATIONS_OMITTED)
            if getattr(req, "include_cluster_authorized_operations", False):
                cluster_operations = self.authorization.operations(ctx, ResourceType.CLUSTER, None,
                                                                   AUTHORIZED_OPERATIONS_OMITTED)
        controller_id = image.controller_id if self.controller.clustered else self.node_id
        if controller_id not in image.brokers:
            # Elected, but not yet listed here (its registration reaches this broker with the controller's first
            # push): a client told of a controller it cannot reach waits on it until its timeout. Kafka answers
            # no controller (-1) until it knows the controller's endpoint, and clients ask again.
            controller_id = -1
        return await offload.respond(ctx, {
            "brokers": [{"node_id": b.node_id, "host": host, "port": port, "rack": b.rack}
                        for b in sorted(image.brokers.values(), key=lambda b: b.node_id)
                        for host, port in (endpoint_for_client(b, ctx),)],
            "cluster_id": image.cluster_id,
            "controller_id": controller_id,
            "topics": topics_out,
            "cluster_authorized_operations": cluster_operations,
            "error_code": NO_ERROR,
        }, items)

    async def describe_topic_partitions(self, ctx: RequestContext):
        """KIP-966's DescribeTopicPartitions (the Java admin's describeTopics, ``kafka-topics --describe``), as
        Kafka 4.4 answers it: the topics asked for (or every topic) from the cursor's topic on, sorted by name; at
        most min(response_partition_limit, max.request.partition.size.limit) partitions, the rest named by
        ``next_cursor``. Eligible leader replicas (KIP-966's ELR) are a KRaft controller's: always empty here."""
        req = ctx.request
        image = self.controller.image
        cursor = req.cursor
        start = cursor.topic_name if cursor is not None else ""
        every = not req.topics
        names = {n for n in image.topics if n >= start} if every else {t.name for t in req.topics if t.name >= start}
        if (not every and cursor is not None and cursor.topic_name not in names) or (
                cursor is not None and cursor.partition_index < 0):
            # Kafka's InvalidRequestException, answered for every topic asked for
            return await offload.respond(ctx, {"topics": [
                {"error_code": InvalidRequestError.code, "name": t.name, "topic_id": ZERO_UUID, "is_internal": False,
                 "partitions": []} for t in req.topics], "next_cursor": None}, len(req.topics))
        refused = []
        authorized = []
        for name in sorted(names):
            if self.authorizer is not None and not self._may(ctx, AclOperation.DESCRIBE, name):
                if not every:  # asked by name: refused; listing every topic: left out
                    refused.append({"error_code": TopicAuthorizationFailedError.code, "name": name,
                                    "topic_id": ZERO_UUID, "is_internal": False, "partitions": []})
                continue
            authorized.append(name)
        remaining = max(min(self.controller.effective_config["max.request.partition.size.limit"],
                            req.response_partition_limit), 1)
        topics_out: list[dict] = []
        next_cursor = None
        for name in authorized:
            if remaining == 0:  # the previous topic ended exactly at the limit
                next_cursor = {"topic_name": name, "partition_index": 0}
                break
            topic = image.topics.get(name)
            if topic is None:
                if not every:
                    try:
                        validate_topic_name(name)
                        code = UnknownTopicOrPartitionError.code
                    except KafkaError:
                        code = InvalidTopicError.code
                    topics_out.append({"error_code": code, "name": name, "topic_id": ZERO_UUID,
                                       "is_internal": name in INTERNAL_TOPICS, "partitions": []})
                continue
            first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            count = len(topic.partitions)
            upper = min(count, first + remaining)
            answer = self._topic(topic, range(first, upper))
            for p in answer["partitions"]:
                p["eligible_leader_replicas"] = []
                p["last_known_elr"] = []
            topics_out.append(answer)
            if upper < count:
                next_cursor = {"topic_name": name, "partition_index": upper}
                break
            remaining -= max(upper - first, 0)
        everything = operations_bitfield(ResourceType.TOPIC, lambda op: True)
        for t in topics_out:  # Kafka fills in every answered topic's, unknown ones included
            t["topic_authorized_operations"] = self.authorization.operations(ctx, ResourceType.TOPIC, t["name"],
                                                                            everything)
        return await offload.respond(ctx, {"topics": topics_out + refused, "next_cursor": next_cursor},
                                     len(topics_out) + sum(len(t["partitions"]) for t in topics_out))

    def _built_topics(self, topics: list, entity: type) -> list:
        """:meth:`_topic` of each, built as ``entity`` (the response version's topic class), from
        ``self._answers`` when neither the topic's image nor the live brokers changed since."""
        live = frozenset(self.controller.image.brokers)
        out = []
        for topic in topics:
            cached = self._answers.get((topic.name, entity))
            if cached is not None and cached[0] is topic and cached[1] == live:
                out.append(cached[2])
                continue
            built = build(entity, self._topic(topic))
            # offload.dismantle empties a list of more than SLICE items in place: such a topic is not kept
            if len(topic.partitions) <= SLICE:
                self._answers[(topic.name, entity)] = (topic, live, built)
            out.append(built)
        return out

    def _forget_deleted(self, image) -> None:
        if len(self._answers) > 4 * len(image.topics) + 64:  # a few versions in use, or deleted topics
            for key in [k for k in self._answers if k[0] not in image.topics]:
                del self._answers[key]

    def _may(self, ctx: RequestContext, op: AclOperation, name: str) -> bool:
        return self.authorizer.authorize(ctx.session, op, ResourceType.TOPIC, name)

    def _may_create(self, ctx: RequestContext, name: str) -> bool:
        """Auto-creation needs CREATE on the cluster or on the topic (Kafka's Metadata handler)."""
        return (self.authorizer.authorize(ctx.session, AclOperation.CREATE, ResourceType.CLUSTER)
                or self._may(ctx, AclOperation.CREATE, name))

    async def _named_topic(self, name: str, allow_create: bool) -> dict:
        image = self.controller.image
        topic = image.topics.get(name)
        if topic is not None:
            return self._topic(topic)
        try:
            validate_topic_name(name)
        except KafkaError as e:
            return {"error_code": e.code, "name": name, "is_internal": False}
        if allow_create and name not in INTERNAL_TOPICS:
            try:
                # Kafka answers LEADER_NOT_AVAILABLE and creates in the background; a single node (or the
                # controller of a cluster) creates at once and answers with the new topic.
                created = await self.controller.auto_create_topic(name)
            except KafkaError as e:
                log.info("Auto-creation of topic %s failed: %s", name, describe_error(e))
                return {"error_code": e.code, "name": name}
            if created is not None:
                return self._topic(created)
            return {"error_code": LeaderNotAvailableError.code, "name": name, "is_internal": False}
        return {"error_code": UnknownTopicOrPartitionError.code, "name": name}

    def _topic(self, topic, indexes: range | None = None) -> dict:
        """A topic's Metadata entry; ``indexes``: only those partitions (DescribeTopicPartitions' page)."""
        live = self.controller.image.brokers
        chosen = (sorted(topic.partitions.values(), key=lambda p: p.partition) if indexes is None
                  else [topic.partitions[i] for i in indexes if i in topic.partitions])
        return {
            "error_code": NO_ERROR,
            "name": topic.name,
            "topic_id": topic.topic_id,
            "is_internal": topic.is_internal,
            "partitions": [{
                # Kafka's metadata cache: a partition whose leader is not alive has none to offer
                "error_code": NO_ERROR if p.leader in live else LeaderNotAvailableError.code,
                "partition_index": p.partition,
                "leader_id": p.leader if p.leader in live else -1,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": list(p.replicas),
                "isr_nodes": list(p.isr),
                "offline_replicas": [r for r in p.replicas if r not in live],
            } for p in chosen],
            "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED,
        }


@functools.cache
def _topic_entity(response_type: type) -> type:
    """The topic class of a Metadata response version (``topics: tuple[Topic, ...]``)."""
    return typing.get_args(typing.get_type_hints(response_type)["topics"])[0]


__all__ = ["MetadataApis", "error_for_code"]
