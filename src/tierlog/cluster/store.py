"""Where the controller keeps the cluster metadata of a single-node cluster.

The image is one JSON document, ``tierlog-metadata.json`` in the metadata log dir (the first of
``log.dirs``), replaced atomically (write, fsync, rename) on every change. Each log dir also gets
Kafka's ``meta.properties`` (cluster id, node id, directory id), and start-up refuses a log dir
that belongs to another cluster or node, as Kafka does. A clustered store (on a coordination
service) will implement the same two methods.
"""

from __future__ import annotations

import json
import os
import time

from tierlog.errors import KafkaStorageError
from tierlog.kafka_uuid import new_kafka_uuid, uuid_to_str
from tierlog.storage.checkpoints import write_atomically

METADATA_FILE = "tierlog-metadata.json"
META_PROPERTIES = "meta.properties"


class FileMetadataStore:
    def __init__(self, metadata_dir: str):
        self.path = os.path.join(metadata_dir, METADATA_FILE)
        os.makedirs(metadata_dir, exist_ok=True)

    def load(self) -> dict | None:
        if not os.path.exists(self.path):
            return None
        try:
            with open(self.path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError) as e:
            raise KafkaStorageError(f"cannot read cluster metadata {self.path}: {e}") from e

    def save(self, document: dict) -> None:
        write_atomically(self.path, json.dumps(document, indent=1, sort_keys=True).encode())


def _read_properties(path: str) -> dict[str, str]:
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                out[k.strip()] = v.strip()
    return out


def ensure_meta_properties(log_dirs: list[str], node_id: int, cluster_id: str | None) -> str:
    """Check or write ``meta.properties`` in every log dir; returns the cluster id in use.

    A dir formatted for another node or cluster is refused. Without a cluster id anywhere, a new
    one is made (Kafka needs ``kafka-storage format``; a single tierlog node formats itself)."""
    found = {}
    for d in log_dirs:
        path = os.path.join(d, META_PROPERTIES)
        if os.path.exists(path):
            props = _read_properties(path)
            if props.get("node.id") not in (None, str(node_id)):
                raise KafkaStorageError(f"log dir {d} belongs to node {props['node.id']}, not node {node_id} "
                                        f"({path})")
            if "cluster.id" in props:
                found[d] = props["cluster.id"]
    ids = set(found.values()) | ({cluster_id} if cluster_id else set())
    if len(ids) > 1:
        raise KafkaStorageError(f"log dirs belong to different clusters: {sorted(ids)} ({found})")
    cid = ids.pop() if ids else uuid_to_str(new_kafka_uuid())
    for d in log_dirs:
        path = os.path.join(d, META_PROPERTIES)
        if d in found:
            continue
        os.makedirs(d, exist_ok=True)
        body = (f"#\n#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}\ncluster.id={cid}\n"
                f"directory.id={uuid_to_str(new_kafka_uuid())}\nnode.id={node_id}\nversion=1\n")
        write_atomically(path, body.encode())
    return cid
