"""Cluster metadata: the image (topics, ids, partitions, configs), its store and the controller."""

from tierlog.cluster.controller import ConfigOp, Controller, apply_config_ops, validate_topic_name
from tierlog.cluster.image import (
    INTERNAL_TOPICS,
    BrokerImage,
    MetadataDelta,
    MetadataImage,
    PartitionImage,
    TopicImage,
)
from tierlog.cluster.store import FileMetadataStore, ensure_meta_properties

__all__ = [
    "INTERNAL_TOPICS", "BrokerImage", "ConfigOp", "Controller", "FileMetadataStore", "MetadataDelta",
    "MetadataImage", "PartitionImage", "TopicImage", "apply_config_ops", "ensure_meta_properties",
    "validate_topic_name",
]
