"""The controller's leadership requests: ElectLeaders (``kafka-leader-election``: preferred and unclean
elections) and, in a cluster, AlterPartition (a leader's ISR changes, Kafka's broker-to-controller request)."""

from __future__ import annotations

from tierlog.cluster import Controller
from tierlog.cluster.acls import AclOperation
from tierlog.errors import NO_ERROR, InvalidRequestError, KafkaError
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization

PREFERRED, UNCLEAN = 0, 1


class LeadershipApis:
    def __init__(self, controller: Controller, *, authorization: ApiAuthorization = ALLOW_ALL):
        self.controller = controller
        self.authorization = authorization

    def register(self, registry) -> None:
        registry.register(ApiKey.ELECT_LEADERS, 0, 2, self.elect_leaders)
        if self.controller.clustered:
            registry.register(ApiKey.ALTER_PARTITION, 2, 2, self.alter_partition)

    async def alter_partition(self, ctx: RequestContext):
        if (refused := self.authorization.cluster_action(ctx)) is not None:
            return refused
        req = ctx.request
        controller = self.controller
        items = [(t.topic_id, int(p.partition_index), int(p.leader_epoch), tuple(int(r) for r in p.new_isr),
                  int(p.partition_epoch)) for t in req.topics for p in t.partitions]
        try:
            results = await controller.execute(controller.alter_partition, int(req.broker_id), items)
        except KafkaError as e:  # NOT_CONTROLLER: the leader asks again
            return build_response(ctx, {"throttle_time_ms": 0, "error_code": e.code, "topics": []})
        topics: dict = {}
        for (topic_id, partition), (code, state) in results.items():
            topics.setdefault(topic_id, []).append({
                "partition_index": partition, "error_code": code,
                "leader_id": state.leader if state else -1, "leader_epoch": state.leader_epoch if state else -1,
                "isr": list(state.isr) if state else [], "leader_recovery_state": 0,
                "partition_epoch": state.partition_epoch if state else -1})
        return build_response(ctx, {"throttle_time_ms": 0, "error_code": NO_ERROR, "topics": [
            {"topic_id": tid, "partitions": parts} for tid, parts in topics.items()]})

    async def elect_leaders(self, ctx: RequestContext):
        if (refused := self.authorization.cluster(ctx, AclOperation.ALTER)) is not None:
            return refused
        req = ctx.request
        election_type = int(getattr(req, "election_type", PREFERRED))
        if election_type not in (PREFERRED, UNCLEAN):
            return build_response(ctx, {"throttle_time_ms": 0, "error_code": InvalidRequestError.code,
                                        "replica_election_results": []})
        wanted = None if req.topic_partitions is None else [
            (t.topic, int(p)) for t in req.topic_partitions for p in t.partitions]
        controller = self.controller
        results = await controller.call(controller.run_election, election_type, wanted)
        by_topic: dict[str, list] = {}
        for (topic, partition), error in sorted(results.items()):
            by_topic.setdefault(topic, []).append({
                "partition_id": partition, "error_code": NO_ERROR if error is None else error.code,
                "error_message": None if error is None else error.message})
        return build_response(ctx, {"throttle_time_ms": 0, "error_code": NO_ERROR, "replica_election_results": [
            {"topic": t, "partition_result": parts} for t, parts in by_topic.items()]})
