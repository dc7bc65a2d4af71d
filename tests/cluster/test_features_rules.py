"""UpdateFeatures' rules (Kafka 4.4's FeatureControlManager), a new cluster's levels, Kafka's ``/feature`` znode
layout, and ApiVersions v5's schema as Kafka 4.4 writes it."""

from __future__ import annotations

import pytest

from tierlog.cluster.features import (
    SAFE_DOWNGRADE,
    UNSAFE_DOWNGRADE,
    UPGRADE,
    FeatureUpdate,
    FeatureUpdateError,
    FinalizedFeatures,
    apply_updates,
    decode_feature_znode,
    encode_feature_znode,
    initial_features,
)
from tierlog.errors import InvalidRequestError, InvalidUpdateVersionError
from tierlog.protocol import encode_request, parse_request, parse_response
from tierlog.protocol.schemas import ApiVersionsRequest, ApiVersionsResponse

SUPPORTED = {"transaction.version": (0, 2), "group.version": (0, 0), "share.version": (0, 1)}
CURRENT = FinalizedFeatures({"transaction.version": 2}, 7)


def _refused(*updates: FeatureUpdate) -> FeatureUpdateError:
    with pytest.raises(FeatureUpdateError) as e:
        apply_updates(CURRENT, updates, SUPPORTED, node_id=3)
    return e.value


def test_updates_apply_all_or_nothing_with_kafkas_errors():
    down = apply_updates(CURRENT, [FeatureUpdate("transaction.version", 1, SAFE_DOWNGRADE)], SUPPORTED, 3)
    assert down == FinalizedFeatures({"transaction.version": 1}, 8)
    off = apply_updates(CURRENT, [FeatureUpdate("transaction.version", 0, UNSAFE_DOWNGRADE),
                                  FeatureUpdate("share.version", 1, UPGRADE)], SUPPORTED, 3)
    assert off == FinalizedFeatures({"share.version": 1}, 8)
    assert apply_updates(CURRENT, [FeatureUpdate("transaction.version", 2)], SUPPORTED, 3) is CURRENT  # no change
    e = _refused(FeatureUpdate("share.version", 1), FeatureUpdate("transaction.version", 3))
    assert e.error is InvalidUpdateVersionError
    assert e.message == ("Invalid update version 3 for feature transaction.version. "
                         "Local controller 3 only supports versions 0-2")
    assert _refused(FeatureUpdate("group.version", 1)).message.endswith("only supports versions 0-0")
    assert _refused(FeatureUpdate("metadata.version", 1)).message.endswith(
        "Local controller 3 does not support this feature.")
    assert "without setting the upgrade type" in _refused(FeatureUpdate("transaction.version", 1)).message
    assert _refused(FeatureUpdate("share.version", 1, SAFE_DOWNGRADE)).message.endswith(
        "Can't downgrade to a newer version.")
    assert _refused(FeatureUpdate("transaction.version", -1, UNSAFE_DOWNGRADE)).message.endswith(
        "A feature version cannot be less than 0.")
    assert _refused(FeatureUpdate("transaction.version", 1, 9)).message.endswith(
        "The controller does not support the given upgrade type.")
    assert _refused(FeatureUpdate("share.version", 1), FeatureUpdate("share.version", 1)).error is InvalidRequestError


def test_a_new_cluster_finalizes_kafkas_levels_within_what_is_supported():
    assert initial_features(SUPPORTED, 2) == FinalizedFeatures({"transaction.version": 2, "share.version": 1}, 0)
    assert initial_features({**SUPPORTED, "group.version": (0, 1)}, 0).levels == {"group.version": 1,
                                                                                  "share.version": 1}


def test_the_feature_znode_is_kafkas_featureznode():
    data = encode_feature_znode(FinalizedFeatures({"transaction.version": 2}, 4))
    assert data == b'{"version":2,"status":1,"features":{"transaction.version":{"max_version_level":2}}}'
    assert decode_feature_znode(data, 5) == FinalizedFeatures({"transaction.version": 2}, 5)
    # what Kafka 3.9's controller writes for a new cluster, and a v1 node with both levels
    assert decode_feature_znode(b'{"features":{},"version":2,"status":1}', 0) == FinalizedFeatures({}, 0)
    v1 = b'{"version":1,"status":1,"features":{"group.version":{"min_version_level":1,"max_version_level":1}}}'
    assert decode_feature_znode(v1, 2).levels == {"group.version": 1}
    with pytest.raises(ValueError):
        decode_feature_znode(b'{"version":3,"status":1,"features":{}}', 0)


def test_api_versions_v5_bytes_are_kafkas():
    # Kafka 4.4's ApiVersionsRequest v5: compact strings, then the nullable cluster id and the int32 node id
    frame = encode_request(ApiVersionsRequest(client_software_name="x", client_software_version="1",
                                              cluster_id="c", node_id=2), 7, "id")
    assert frame[4:].hex() == "0012000500000007000269640002780231" + "0263" + "00000002" + "00"
    ctx = parse_request(frame[4:])
    assert (ctx.request.cluster_id, ctx.request.node_id, ctx.response_type) == ("c", 2, ApiVersionsResponse)
    # an error other than UNSUPPORTED_VERSION comes at the version asked (not read as v0)
    body = bytes.fromhex("00000007" + "0081" + "01" + "00000000" + "00")
    _, response = parse_response(body, ApiVersionsResponse)
    assert response.error_code.value == 129 and response.api_keys == ()
