"""Fetch, by topic name (v4-v12) and by topic id (v13-v18): the wire to one replica-manager call and back.

The replica manager reads both tiers and waits for data (long polling); this handler only translates.
Incremental fetch sessions are not kept: every answer carries session id 0, which tells clients to
send full fetch requests (all clients accept that).

A request naming :data:`~tierlog.server.fetch_types.BIG_FETCH` partitions or more (a 16 MB one names some
500,000, unknown ones mostly), or of 1 MiB or more, must not hold the event loop: its partitions are walked
a slice at a time, yielding to the loop every few ms, the replica manager reads them likewise, and the
answer is built and encoded in a worker thread (:func:`~tierlog.protocol.offload.respond_parts`), its
records still file regions for sendfile. Smaller requests, the consume path, take none of these steps.
"""

from __future__ import annotations

import asyncio

from tierlog.cluster import Controller
from tierlog.cluster.acls import AclOperation, ResourceType
from tierlog.errors import NO_ERROR, TopicAuthorizationFailedError, UnknownTopicIdError, UnknownTopicOrPartitionError
from tierlog.kafka_uuid import ZERO_UUID
from tierlog.protocol import ApiKey, RequestContext, offload
from tierlog.protocol.hot_responses import encode_fetch_response
from tierlog.protocol.offload import Pacer
from tierlog.server.fetch_types import BIG_FETCH, FetchIsolation, FetchParams, FetchPartitionData, PartitionFetch
from tierlog.server.http.broker_metrics import BrokerTopicMetrics, RequestMetrics, fetch_replica_id
from tierlog.server.quotas.client_quota import ClientQuotas, quota_user
from tierlog.server.replica_manager import ReplicaManager

READ_COMMITTED = 1  # the request's isolation_level for read_committed
#: The smallest partition entry of a Fetch request (v4: partition, fetch offset, partition max bytes): a
#: frame smaller than BIG_FETCH of them cannot name BIG_FETCH partitions.
MIN_PARTITION_BYTES = 16
KIP_219_FETCH_VERSION = 8  # from this version a throttled client is answered at once and waits itself


class FetchApis:
    def __init__(self, replica_manager: ReplicaManager, controller: Controller,
                 request_metrics: RequestMetrics | None = None, topic_metrics: BrokerTopicMetrics | None = None, *,
                 client_quotas: ClientQuotas | None = None, authorizer=None):
        """``request_metrics`` counts partitions answered with an error, ``topic_metrics`` the bytes sent to
        consumers (Kafka's ErrorsPerSec and BytesOutPerSec)."""
        self.replica_manager = replica_manager
        self.controller = controller
        self.request_metrics = request_metrics
        self.topic_metrics = topic_metrics
        #: the broker's client quotas (consumer_byte_rate), or None
        self.client_quotas = client_quotas
        #: The authorizer when authorizer.class.name is set, else None (nothing checked)
        self.authorizer = authorizer

    def register(self, registry) -> None:
        # v18 (KIP-1166) adds the follower's high watermark per partition: accepted and not used, as Kafka
        # 4.4's replica manager does (only its KRaft metadata log answers a fetch early on it)
        registry.register(ApiKey.FETCH, 4, 18, self.fetch)

    async def fetch(self, ctx: RequestContext):
        req = ctx.request
        rm = self.replica_manager
        by_id = ctx.api_version >= 13
        replica_id = fetch_replica_id(req)
        if replica_id >= 0:
            isolation = FetchIsolation.LOG_END  # a follower reads up to the log end
        elif getattr(req, "isolation_level", 0) == READ_COMMITTED:
            isolation = FetchIsolation.TXN_COMMITTED
        else:
            isolation = FetchIsolation.HIGH_WATERMARK
        max_bytes = getattr(req, "max_bytes", 0x7FFFFFFF)
        quota = None
        if replica_id < 0:  # a consumer's request is capped by the broker's fetch.max.bytes, as in Kafka
            max_bytes = min(max_bytes, self.controller.effective_config["fetch.max.bytes"])
            quotas = self.client_quotas
            if quotas is not None and quotas.fetch.enabled:  # no quota configured: this one check
                quota = quotas.fetch
                user, client_id = quota_user(ctx), ctx.client_id or ""
                # Kafka's bound: never more than the quota lets through within its window
                window_max = quota.max_value_in_window(user, client_id)
                if window_max is not None:
                    max_bytes = max(1, min(max_bytes, int(window_max)))
        rack = getattr(req, "rack_id", None) if replica_id < 0 else None  # Fetch v11+ (KIP-392)
        params = FetchParams(replica_id, int(max(req.max_wait.total_seconds(), 0) * 1000), req.min_bytes, max_bytes,
                             isolation, rack)
        # A frame too small for BIG_FETCH partitions costs one comparison here; a frame of 1 MiB or more (parsed
        # off the loop already) is answered off the loop whatever it names (thousands of long topic names).
        denied = self._denied_topics(ctx, replica_id, by_id) if self.authorizer is not None else None
        if ctx.frame_size >= MIN_PARTITION_BYTES * BIG_FETCH and (
                ctx.frame_size >= offload.BIG_FRAME_BYTES or len(req.topics) >= BIG_FETCH
                or sum(len(t.partitions) for t in req.topics) >= BIG_FETCH):
            return await self._fetch_many(ctx, params, by_id, replica_id >= 0, denied)
        keys = []  # each partition's topic key in the response (name, or id from v13)
        fetches = []
        for i, t in enumerate(req.topics):
            key = t.topic_id if by_id else t.topic
            name = rm.topic_name(t.topic_id) if by_id else t.topic
            unknown = UnknownTopicIdError.code if by_id and key != ZERO_UUID else UnknownTopicOrPartitionError.code
            if denied and i in denied:
                name, unknown = None, TopicAuthorizationFailedError.code
            for p in t.partitions:
                keys.append(key)
                fetches.append(PartitionFetch(name, p.partition, p.fetch_offset, p.partition_max_bytes,
                                              getattr(p, "current_leader_epoch", -1), unknown))
        results = await rm.fetch_messages(params, fetches, ctx.timing)
        self._count(fetches, results, replica_id >= 0)
        # Written straight to bytes and file regions (protocol/hot_responses.py): through kio the answer cost a
        # tenth of the consume path's CPU.
        answer = _answer(keys, fetches, results, by_id)
        responses = answer["responses"]
        throttle = 0
        if quota is not None:
            size = sum(len(r.records) for r in results)
            throttle = quota.record_and_get_throttle_time_ms(user, client_id, size)
            if throttle:
                # Kafka's throttled fetch: an answer naming no partition (its bytes taken back), then the wait
                quota.unrecord(user, client_id, size)
                responses = []
                if ctx.api_version < KIP_219_FETCH_VERSION:
                    await asyncio.sleep(throttle / 1000)
                else:
                    ctx.throttle_ms = throttle
        return offload.EncodedResponse(encode_fetch_response(ctx.api_version, ctx.correlation_id,
                                                             responses, throttle))

    def _denied_topics(self, ctx: RequestContext, replica_id: int, by_id: bool) -> set[int]:
        """Kafka's checks: a follower needs CLUSTER_ACTION on the cluster, a consumer READ on each topic; the
        indexes of the request's topics refused (answered TOPIC_AUTHORIZATION_FAILED in their places)."""
        authz, rm = self.authorizer, self.replica_manager
        topics = ctx.request.topics
        if replica_id >= 0:
            if authz.authorize(ctx.session, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
                return set()
            return set(range(len(topics)))
        names = [rm.topic_name(t.topic_id) if by_id else t.topic for t in topics]
        # an unknown topic id stays UNKNOWN_TOPIC_ID, as in Kafka (its name cannot be authorized)
        return {i for i, name in enumerate(names) if name is not None
                and not authz.authorize(ctx.session, AclOperation.READ, ResourceType.TOPIC, name)}

    async def _fetch_many(self, ctx: RequestContext, params: FetchParams, by_id: bool,
                          follower: bool, denied: set[int] | None = None) -> offload.EncodedResponse:
        """:meth:`fetch` for a request naming many partitions: the same steps, each yielding to the loop
        every few ms, and the answer built and encoded in a worker thread."""
        rm = self.replica_manager
        pacer = Pacer()
        names = rm.topic_names() if by_id else None  # one map, not a walk of the topics for each of 100,000s
        keys: list = []
        fetches: list[PartitionFetch] = []
        walked = 0  # topics and partitions: the clock is read every 512 (a topic may have no partition)
        for i, t in enumerate(ctx.request.topics):
            walked += 1
            if not walked & 511:
                await pacer()
            key = t.topic_id if by_id else t.topic
            name = names.get(t.topic_id) if by_id else t.topic
            unknown = UnknownTopicIdError.code if by_id and key != ZERO_UUID else UnknownTopicOrPartitionError.code
            if denied and i in denied:
                name, unknown = None, TopicAuthorizationFailedError.code
            for p in t.partitions:
                keys.append(key)
                fetches.append(PartitionFetch(name, p.partition, p.fetch_offset, p.partition_max_bytes,
                                              getattr(p, "current_leader_epoch", -1), unknown))
                walked += 1
                if not walked & 511:
                    await pacer()
        results = await rm.fetch_messages(params, fetches, ctx.timing)

        def answer_counted() -> dict:  # in the worker thread: counting walks every partition too
            self._count(fetches, results, follower)
            return _answer(keys, fetches, results, by_id)

        answer = await offload.respond_parts(ctx, answer_counted)
        offload.free_later(keys, fetches, results)
        return answer

    def _count(self, fetches: list[PartitionFetch], results: list[FetchPartitionData], follower: bool) -> None:
        """Errors by partition, and bytes sent per topic to consumers (a follower's are replication bytes)."""
        errors, sent = self.request_metrics, self.topic_metrics
        if errors is None and sent is None:
            return
        for f, r in zip(fetches, results):
            if r.error_code:
                if errors is not None:
                    errors.error(ApiKey.FETCH, r.error_code, follower)
            elif sent is not None and not follower:
                size = len(r.records)
                if size:
                    sent.sent(f.topic, size)


def _answer(keys: list, fetches: list[PartitionFetch], results: list[FetchPartitionData], by_id: bool) -> dict:
    """The response's values: the partitions in request order, grouped by topic (a topic named twice is
    one entry, at its first place)."""
    topics = []
    index: dict = {}
    for key, f, r in zip(keys, fetches, results):
        if key not in index:
            index[key] = len(topics)
            topics.append({"topic_id" if by_id else "topic": key, "partitions": []})
        topics[index[key]]["partitions"].append({
            "partition_index": f.partition, "error_code": r.error_code, "high_watermark": r.high_watermark,
            "last_stable_offset": r.last_stable_offset, "log_start_offset": r.log_start_offset,
            "aborted_transactions": None if r.aborted_transactions is None else [
                {"producer_id": pid, "first_offset": first} for pid, first in r.aborted_transactions],
            "preferred_read_replica": r.preferred_read_replica, "records": r.records})
    return {"throttle_time_ms": 0, "error_code": NO_ERROR, "session_id": 0, "responses": topics}

