"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455), answered by the controller of a
cluster (brokers forward them, :mod:`tierlog.server.apis.forwarding`); the rules are
:mod:`tierlog.cluster.reassignment`'s. A single node has no other broker to move a replica to and does not
offer them."""

from __future__ import annotations

from tierlog.cluster import Controller
from tierlog.cluster.acls import AclOperation
from tierlog.cluster.zookeeper import FencedControllerError
from tierlog.errors import NO_ERROR, KafkaError, NotControllerError
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization

NO_ERROR_MESSAGE = ""  # Kafka's top-level error message without an error (the field's default), not null


class ReassignmentApis:
    def __init__(self, controller: Controller, *, authorization: ApiAuthorization = ALLOW_ALL):
        self.controller = controller
        self.authorization = authorization

    def register(self, registry) -> None:
        if self.controller.clustered:
            registry.register(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 0, self.alter_partition_reassignments)
            registry.register(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0, self.list_partition_reassignments)

    async def alter_partition_reassignments(self, ctx: RequestContext):
        if (refused := self.authorization.cluster(ctx, AclOperation.ALTER)) is not None:
            return refused
        req = ctx.request
        items = [(t.name, int(p.partition_index), None if p.replicas is None else tuple(int(r) for r in p.replicas))
                 for t in req.topics for p in t.partitions]
        controller = self.controller
        try:
            results = await controller.call(controller.reassignments.alter, items)
        except FencedControllerError:  # another controller was elected meanwhile
            e = NotControllerError("This is not the correct controller for this cluster.")
            return build_response(ctx, {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message,
                                        "responses": []})
        except KafkaError as e:  # NOT_CONTROLLER: the client asks the new controller
            return build_response(ctx, {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message,
                                        "responses": []})
        by_topic: dict[str, list] = {}
        for (name, p), error in results.items():
            by_topic.setdefault(name, []).append({
                "partition_index": p, "error_code": NO_ERROR if error is None else error.code,
                "error_message": None if error is None else error.message})
        return build_response(ctx, {"throttle_time_ms": 0, "error_code": NO_ERROR, "error_message": NO_ERROR_MESSAGE,
                                    "responses": [{"name": n, "partitions": parts} for n, parts in by_topic.items()]})

    async def list_partition_reassignments(self, ctx: RequestContext):
        if (refused := self.authorization.cluster(ctx, AclOperation.DESCRIBE)) is not None:
            return refused
        req = ctx.request
        wanted = None if req.topics is None else [
            (t.name, int(p)) for t in req.topics for p in t.partition_indexes]
        controller = self.controller
        try:
            found = await controller.execute(controller.reassignments.list, wanted)
        except KafkaError as e:
            return build_response(ctx, {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message,
                                        "topics": []})
        by_topic: dict[str, list] = {}
        for (name, p), pi in found.items():
            by_topic.setdefault(name, []).append({
                "partition_index": p, "replicas": list(pi.replicas), "adding_replicas": list(pi.adding_replicas),
                "removing_replicas": list(pi.removing_replicas)})
        return build_response(ctx, {"throttle_time_ms": 0, "error_code": NO_ERROR, "error_message": NO_ERROR_MESSAGE,
                                    "topics": [{"name": n, "partitions": parts} for n, parts in by_topic.items()]})


__all__ = ["ReassignmentApis"]
