"""KIP-584 features: the cluster's finalized feature levels and the rules of UpdateFeatures.

A feature (``transaction.version``, ``group.version``, ``share.version``) has a range of levels this broker
supports and one cluster-wide finalized level, 0 meaning off (Kafka lists no finalized entry for 0). The
finalized levels live in the metadata image (:attr:`tierlog.cluster.image.MetadataImage.features`), hence
in ``tierlog-metadata.json`` on a single node and, in ZooKeeper mode, in Kafka's ``/feature`` znode
(FeatureZNode v2: ``{"version":2,"status":1,"features":{"transaction.version":{"max_version_level":2}}}``)
whose data version is the finalized features' epoch, as Kafka's ZooKeeper-mode brokers reported it.

The rest of the broker asks a finalized level through ``Controller.finalized_level(name)`` (0 when not
finalized); the supported ranges are decided by the server (a level is claimed only where tierlog has its
behaviour, see docs/compatibility.md) and handed to the checks here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from tierlog.errors import InvalidRequestError, InvalidUpdateVersionError, KafkaError

TRANSACTION_VERSION = "transaction.version"
GROUP_VERSION = "group.version"
SHARE_VERSION = "share.version"

# UpdateFeatures' upgrade types (v1+; v0's allow_downgrade maps to SAFE_DOWNGRADE)
UPGRADE = 1
SAFE_DOWNGRADE = 2
UNSAFE_DOWNGRADE = 3

# Kafka 4.4's levels for a new cluster (kafka-storage format's defaults), capped at what a broker supports
NEW_CLUSTER_LEVELS = {TRANSACTION_VERSION: 2, GROUP_VERSION: 1, SHARE_VERSION: 2}

FEATURE_ZNODE = "/feature"
FEATURE_ZNODE_VERSION = 2  # Kafka 3.3+'s layout: max_version_level only
FEATURE_ZNODE_ENABLED = 1


@dataclass(frozen=True, slots=True)
class FinalizedFeatures:
    """The finalized levels (features at 0 left out) and their epoch, raised by every change."""

    levels: Mapping[str, int] = field(default_factory=dict)
    epoch: int = 0

    def level(self, name: str) -> int:
        return self.levels.get(name, 0)

    def to_json(self) -> dict:
        return {"epoch": self.epoch, "levels": dict(sorted(self.levels.items()))}

    @classmethod
    def from_json(cls, d: Mapping) -> FinalizedFeatures:
        return cls({str(k): int(v) for k, v in d.get("levels", {}).items() if int(v) > 0}, int(d.get("epoch", 0)))


def initial_features(supported: Mapping[str, tuple[int, int]], transaction_version: int) -> FinalizedFeatures:
    """What a new cluster finalizes: Kafka's defaults for a new cluster within the supported ranges, and
    ``transaction.version`` at the broker's setting of that name."""
    levels = {name: min(level, supported.get(name, (0, 0))[1]) for name, level in NEW_CLUSTER_LEVELS.items()}
    levels[TRANSACTION_VERSION] = min(transaction_version, supported.get(TRANSACTION_VERSION, (0, 0))[1])
    return FinalizedFeatures({k: v for k, v in levels.items() if v > 0}, 0)


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    feature: str
    max_version_level: int
    upgrade_type: int = UPGRADE


class FeatureUpdateError(KafkaError):
    """An UpdateFeatures request refused as a whole: the error of the first feature that failed."""

    def __init__(self, error: type[KafkaError], message: str):
        super().__init__(message)
        self.error = error


def _invalid(feature: str, level: int, why: str) -> FeatureUpdateError:
    return FeatureUpdateError(InvalidUpdateVersionError,
                              f"Invalid update version {level} for feature {feature}. {why}")


def apply_updates(current: FinalizedFeatures, updates: Iterable[FeatureUpdate],
                  supported: Mapping[str, tuple[int, int]], node_id: int) -> FinalizedFeatures:
    """The finalized features after ``updates`` (Kafka's FeatureControlManager rules), epoch raised by one
    when anything changes; raises :class:`FeatureUpdateError` with the first refused update (Kafka refuses
    the whole request then)."""
    levels = dict(current.levels)
    seen: set[str] = set()
    for u in updates:
        if not u.feature or u.feature.strip() == "":
            raise FeatureUpdateError(InvalidRequestError, "Feature name can not be empty.")
        if u.feature in seen:
            raise FeatureUpdateError(InvalidRequestError, f"Feature {u.feature} appears more than once.")
        seen.add(u.feature)
        if u.upgrade_type not in (UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE):
            raise _invalid(u.feature, u.max_version_level, "The controller does not support the given upgrade type.")
        level, old = u.max_version_level, levels.get(u.feature, 0)
        if level < 0:
            raise _invalid(u.feature, level, "A feature version cannot be less than 0.")
        if u.feature not in supported:
            raise _invalid(u.feature, level, f"Local controller {node_id} does not support this feature.")
        lo, hi = supported[u.feature]
        if level != 0 and not lo <= level <= hi:
            raise _invalid(u.feature, level, f"Local controller {node_id} only supports versions {lo}-{hi}")
        if level < old and u.upgrade_type == UPGRADE:
            raise _invalid(u.feature, level, "Can't downgrade the version of this feature without setting the "
                                             "upgrade type to either safe or unsafe downgrade.")
        if level > old and u.upgrade_type != UPGRADE:
            raise _invalid(u.feature, level, "Can't downgrade to a newer version.")
        if level == 0:
            levels.pop(u.feature, None)
        else:
            levels[u.feature] = level
    if levels == dict(current.levels):
        return current
    return FinalizedFeatures(levels, current.epoch + 1)


# -- ZooKeeper mode: Kafka's /feature znode ------------------------------------------------------------------

def encode_feature_znode(features: FinalizedFeatures) -> bytes:
    return json.dumps({"version": FEATURE_ZNODE_VERSION, "status": FEATURE_ZNODE_ENABLED,
                       "features": {name: {"max_version_level": level}
                                    for name, level in sorted(features.levels.items())}},
                      separators=(",", ":")).encode()


def decode_feature_znode(data: bytes, znode_version: int) -> FinalizedFeatures:
    """The finalized features of a ``/feature`` znode (v1 or v2 layout) whose data version is
    ``znode_version`` (the epoch); a disabled node finalizes nothing. ValueError when malformed."""
    d = json.loads(data or b"{}")
    if d.get("version") not in (1, 2):
        raise ValueError(f"unsupported version {d.get('version')!r} of {FEATURE_ZNODE}")
    if d.get("status") != FEATURE_ZNODE_ENABLED:
        return FinalizedFeatures({}, znode_version)
    levels = {str(name): int(v["max_version_level"]) for name, v in d.get("features", {}).items()}
    return FinalizedFeatures({k: v for k, v in levels.items() if v > 0}, znode_version)
