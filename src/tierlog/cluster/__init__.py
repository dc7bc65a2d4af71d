"""Cluster metadata: the image (topics, ids, partitions, configs), its store and the controller."""

from tierlog.cluster.channel import DisableRemoteTopicRequest, DisableRemoteTopicResponse, LocalBrokerChannel
from tierlog.cluster.controller import ConfigOp, Controller, apply_config_ops, validate_topic_name
from tierlog.cluster.image import (
    COORDINATOR_TOPICS,
    INTERNAL_TOPICS,
    BrokerImage,
    MetadataDelta,
    MetadataImage,
    PartitionImage,
    TieringState,
    TopicImage,
    TopicTiering,
)
from tierlog.cluster.store import FileMetadataStore, ensure_meta_properties

__all__ = [
    "COORDINATOR_TOPICS", "INTERNAL_TOPICS", "BrokerImage", "ConfigOp", "Controller", "DisableRemoteTopicRequest",
    "DisableRemoteTopicResponse", "FileMetadataStore", "LocalBrokerChannel", "MetadataDelta", "MetadataImage",
    "PartitionImage", "TieringState", "TopicImage", "TopicTiering", "apply_config_ops", "ensure_meta_properties",
    "validate_topic_name",
]
