"""ElectLeaders (``kafka-leader-election``): preferred and unclean leader elections, run by the controller."""

from __future__ import annotations

from tierlog.cluster import Controller
from tierlog.errors import NO_ERROR, InvalidRequestError
from tierlog.protocol import ApiKey, RequestContext, build_response

PREFERRED, UNCLEAN = 0, 1


class LeadershipApis:
    def __init__(self, controller: Controller):
        self.controller = controller

    def register(self, registry) -> None:
        registry.register(ApiKey.ELECT_LEADERS, 0, 2, self.elect_leaders)

    async def elect_leaders(self, ctx: RequestContext):
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
