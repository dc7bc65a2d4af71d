"""DescribeLogDirs (``kafka-log-dirs --describe``): this broker's log dirs, the partitions each holds, their sizes.

As Kafka's KafkaApis.handleDescribeLogDirsRequest and ReplicaManager.describeLogDirs answer it: one result per
log dir in ``log.dirs``; an offline dir carries KAFKA_STORAGE_ERROR and nothing else; an online one lists the
asked partitions it holds (every partition when the request's topics are null; partitions this broker does not
host are left out, and topics left with no partition) with their size, offset lag and ``is_future_key`` (always
false: tierlog has no AlterReplicaLogDirs), and from v4 the total and usable bytes of its file system. The log
manager supplies the figures; there is no authorizer, so the cluster-level DESCRIBE check always passes.
"""

from __future__ import annotations

from itertools import groupby

from tierlog.cluster.acls import AclOperation
from tierlog.errors import NO_ERROR, KafkaStorageError
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization
from tierlog.storage import LogManager


class LogDirApis:
    def __init__(self, log_manager: LogManager, *, authorization: ApiAuthorization = ALLOW_ALL):
        self.log_manager = log_manager
        self.authorization = authorization

    def register(self, registry) -> None:
        # Kafka 4 removed v0 (KIP-896); v4 added the volume's total and usable bytes, v5 (Kafka 4.3,
        # KIP-1066) whether the dir is cordoned.
        registry.register(ApiKey.DESCRIBE_LOG_DIRS, 1, 5, self.describe_log_dirs)

    async def describe_log_dirs(self, ctx: RequestContext):
        if (refused := self.authorization.cluster(ctx, AclOperation.DESCRIBE)) is not None:
            return refused
        topics = ctx.request.topics
        wanted = None if topics is None else {(t.topic, int(p)) for t in topics for p in t.partitions}
        results = []
        cordoned = self.log_manager.cordoned_log_dirs
        for d in self.log_manager.describe_log_dirs(wanted):
            if d.offline is not None:  # its failure was logged when it happened; Kafka logs it again here
                results.append({"error_code": KafkaStorageError.code, "log_dir": d.log_dir, "topics": []})
                continue
            results.append({
                "error_code": NO_ERROR, "log_dir": d.log_dir, "total_bytes": d.total_bytes,
                "usable_bytes": d.usable_bytes, "is_cordoned": d.log_dir in cordoned,
                "topics": [{"name": topic, "partitions": [
                    {"partition_index": r.partition, "partition_size": r.size, "offset_lag": r.offset_lag,
                     "is_future_key": r.is_future} for r in replicas]}
                    for topic, replicas in groupby(d.replicas, key=lambda r: r.topic)]})
        return build_response(ctx, {"throttle_time_ms": 0, "error_code": NO_ERROR, "results": results})
