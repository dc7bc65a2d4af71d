"""CreateAcls, DescribeAcls and DeleteAcls (v1-v3, as Kafka 4 serves them), as Kafka's AclApis answers them.

The requests need ALTER (create, delete) or DESCRIBE (describe) on the cluster; without an authorizer they
answer SECURITY_DISABLED. Bindings are kept by the controller in the metadata image (a single node's
metadata file, or Kafka's ZooKeeper znodes in a cluster, where a broker that is not the controller forwards
the changes in an Envelope), so every broker's authorizer applies them.
"""

from __future__ import annotations

from tierlog.cluster import Controller
from tierlog.cluster.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    binding_problem,
)
from tierlog.errors import (
    NO_ERROR,
    ClusterAuthorizationFailedError,
    InvalidRequestError,
    KafkaError,
    SecurityDisabledError,
)
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.server.authorizer import Authorizer

NO_AUTHORIZER = "No Authorizer is configured."
NO_AUTHORIZER_DESCRIBE = "No Authorizer is configured on the broker"
CLUSTER_DENIED = "Cluster authorization failed."


def _enum(cls, value: int):
    try:
        return cls(value)
    except ValueError:
        return cls(0)  # UNKNOWN


def _filter(f) -> AclBindingFilter:
    return AclBindingFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                            _enum(PatternType, getattr(f, "pattern_type_filter", PatternType.LITERAL)),
                            f.principal_filter, f.host_filter, _enum(AclOperation, f.operation),
                            _enum(PermissionType, f.permission_type))


class AclApis:
    def __init__(self, controller: Controller, authorizer: Authorizer | None):
        self.controller = controller
        self.authorizer = authorizer

    def register(self, registry) -> None:
        registry.register(ApiKey.DESCRIBE_ACLS, 1, 3, self.describe_acls)
        registry.register(ApiKey.CREATE_ACLS, 1, 3, self.create_acls)
        registry.register(ApiKey.DELETE_ACLS, 1, 3, self.delete_acls)

    def _cluster_allowed(self, ctx: RequestContext, op: AclOperation) -> bool:
        return self.authorizer.authorize(ctx.session, op, ResourceType.CLUSTER)

    async def describe_acls(self, ctx: RequestContext):
        if self.authorizer is None:
            return build_response(ctx, {"error_code": SecurityDisabledError.code,
                                        "error_message": NO_AUTHORIZER_DESCRIBE, "resources": []})
        if not self._cluster_allowed(ctx, AclOperation.DESCRIBE):
            return build_response(ctx, {"error_code": ClusterAuthorizationFailedError.code,
                                        "error_message": CLUSTER_DENIED, "resources": []})
        f = _filter(ctx.request)
        unknown = f.unknown_field()
        if unknown is not None:
            return build_response(ctx, {"error_code": InvalidRequestError.code,
                                        "error_message": f"The {unknown} of the filter is UNKNOWN",
                                        "resources": []})
        resources: dict[tuple, list] = {}
        for b in self.controller.image.acls:
            if f.matches(b):
                resources.setdefault((b.resource_type, b.resource_name, b.pattern_type), []).append(
                    {"principal": b.principal, "host": b.host, "operation": b.operation,
                     "permission_type": b.permission_type})
        return build_response(ctx, {"error_code": NO_ERROR, "error_message": None, "resources": [
            {"resource_type": rt, "resource_name": name, "pattern_type": pt, "acls": acls}
            for (rt, name, pt), acls in resources.items()]})

    async def create_acls(self, ctx: RequestContext):
        creations = ctx.request.creations
        if self.authorizer is None:
            return self._create_error(ctx, SecurityDisabledError.code, NO_AUTHORIZER)
        if not self._cluster_allowed(ctx, AclOperation.ALTER):
            return self._create_error(ctx, ClusterAuthorizationFailedError.code, CLUSTER_DENIED)
        results, valid = [], []
        for c in creations:
            b = AclBinding(_enum(ResourceType, c.resource_type), c.resource_name,
                           _enum(PatternType, getattr(c, "resource_pattern_type", PatternType.LITERAL)),
                           c.principal, c.host, _enum(AclOperation, c.operation),
                           _enum(PermissionType, c.permission_type))
            problem = binding_problem(b)
            if problem is not None:
                results.append({"error_code": InvalidRequestError.code, "error_message": problem})
            else:
                results.append({"error_code": NO_ERROR, "error_message": None})
                valid.append(b)
        if valid:
            try:
                await self.controller.call(self.controller.create_acls, valid)
            except KafkaError as e:
                results = [r if r["error_code"] else {"error_code": e.code, "error_message": e.message}
                           for r in results]
        return build_response(ctx, {"results": results})

    def _create_error(self, ctx: RequestContext, code: int, message: str):
        return build_response(ctx, {"results": [{"error_code": code, "error_message": message}
                                                for _ in ctx.request.creations]})

    async def delete_acls(self, ctx: RequestContext):
        filters = ctx.request.filters
        if self.authorizer is None:
            return self._delete_error(ctx, SecurityDisabledError.code, NO_AUTHORIZER)
        if not self._cluster_allowed(ctx, AclOperation.ALTER):
            return self._delete_error(ctx, ClusterAuthorizationFailedError.code, CLUSTER_DENIED)
        parsed = [_filter(f) for f in filters]
        usable = [f for f in parsed if f.unknown_field() is None]
        try:
            removed = await self.controller.call(self.controller.delete_acls, usable) if usable else []
        except KafkaError as e:
            return self._delete_error(ctx, e.code, e.message)
        by_filter = dict(zip(map(id, usable), removed))
        results = []
        for f in parsed:
            if f.unknown_field() is not None:
                results.append({"error_code": InvalidRequestError.code,
                                "error_message": f"The {f.unknown_field()} of the filter is UNKNOWN",
                                "matching_acls": []})
                continue
            results.append({"error_code": NO_ERROR, "error_message": None, "matching_acls": [
                {"error_code": NO_ERROR, "error_message": None, "resource_type": b.resource_type,
                 "resource_name": b.resource_name, "pattern_type": b.pattern_type, "principal": b.principal,
                 "host": b.host, "operation": b.operation, "permission_type": b.permission_type}
                for b in by_filter[id(f)]]})
        return build_response(ctx, {"filter_results": results})

    def _delete_error(self, ctx: RequestContext, code: int, message: str):
        return build_response(ctx, {"filter_results": [{"error_code": code, "error_message": message,
                                                        "matching_acls": []} for _ in ctx.request.filters]})


__all__ = ["AclApis"]
