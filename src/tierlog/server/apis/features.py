"""UpdateFeatures (KIP-584, KIP-778's upgrade types), what ``kafka-features upgrade|downgrade|disable`` sends,
and the feature levels this broker supports. DescribeFeatures is ApiVersions (server/apis/metadata.py).

The supported ranges are Kafka 4.4's for the features whose behaviour tierlog has, and are derived from the
handlers the broker serves, so a level is claimed only once its APIs exist: ``transaction.version`` 0-2
(KIP-890 part 2), ``group.version`` 0-1 when ConsumerGroupHeartbeat is served (KIP-848) and 0-0 otherwise,
``share.version`` 0-1 when ShareGroupHeartbeat is served (KIP-932; level 2, Kafka 4.4's share-group dead letter
queue, is not built) and 0-0 otherwise. The controller applies an update (all of a request's updates or none)
and keeps the levels in the metadata image; in a cluster the request is forwarded to it (forwarding.py).
"""

from __future__ import annotations

import logging

from tierlog.cluster import Controller
from tierlog.cluster.acls import AclOperation
from tierlog.cluster.features import (
    GROUP_VERSION,
    SAFE_DOWNGRADE,
    SHARE_VERSION,
    TRANSACTION_VERSION,
    UPGRADE,
    FeatureUpdate,
    FeatureUpdateError,
)
from tierlog.errors import NO_ERROR, KafkaError
from tierlog.protocol import ApiKey, HandlerRegistry, RequestContext, build_response
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization

log = logging.getLogger(__name__)

MAX_TRANSACTION_VERSION = 2


def supported_features(registry: HandlerRegistry) -> dict[str, tuple[int, int]]:
    """feature -> (min, max) level this broker supports, from what it serves."""
    return {
        GROUP_VERSION: (0, 1 if ApiKey.CONSUMER_GROUP_HEARTBEAT in registry else 0),
        SHARE_VERSION: (0, 2 if ApiKey.SHARE_GROUP_HEARTBEAT in registry else 0),  # 2: KIP-1191 DLQ
        TRANSACTION_VERSION: (0, MAX_TRANSACTION_VERSION),
    }


class FeatureApis:
    def __init__(self, controller: Controller, authorization: ApiAuthorization = ALLOW_ALL):
        self.controller = controller
        self.authorization = authorization

    def register(self, registry: HandlerRegistry) -> None:
        registry.register(ApiKey.UPDATE_FEATURES, 0, 2, self.update_features)

    async def update_features(self, ctx: RequestContext):
        if (refused := self.authorization.cluster(ctx, AclOperation.ALTER)) is not None:
            return refused
        req = ctx.request
        updates = []
        for u in req.feature_updates:
            if ctx.api_version == 0:  # v0: a level below the finalized one needs allow_downgrade
                kind = SAFE_DOWNGRADE if u.allow_downgrade else UPGRADE
            else:
                kind = int(u.upgrade_type)
            updates.append(FeatureUpdate(u.feature, int(u.max_version_level), kind))
        validate_only = bool(getattr(req, "validate_only", False))
        try:
            await self.controller.call(self.controller.update_features, updates, validate_only)
        except FeatureUpdateError as e:
            # Kafka refuses the whole request with the first feature's error as the top-level one
            message = f"The update failed for all features since the following feature had an error: {e.message}"
            return self._answer(ctx, e.error.code, message, updates)
        except KafkaError as e:
            return self._answer(ctx, e.code, e.message, updates)
        if not validate_only:
            log.info("Finalized features updated: %s", ", ".join(f"{u.feature}={u.max_version_level}"
                                                               for u in updates))
        return self._answer(ctx, NO_ERROR, None, updates)

    @staticmethod
    def _answer(ctx: RequestContext, code: int, message: str | None, updates: list[FeatureUpdate]):
        # v0-v1 also answer per feature (v2 dropped the results): each carries the request's outcome
        return build_response(ctx, {"error_code": code, "error_message": message,
                                    "results": [{"feature": u.feature, "error_code": code, "error_message": message}
                                                for u in updates]})
