"""Where the controller keeps the cluster metadata of a single-node cluster.

The image is one JSON document, ``tierlog-metadata.json`` in the metadata log dir (the first of
``log.dirs``), replaced atomically (write, fsync, rename) on every change. Each log dir also gets
Kafka's ``meta.properties`` (cluster id, node id, directory id), and start-up refuses a log dir
that belongs to another cluster or node, as Kafka does. A clustered store (on a coordination
service) will implement the same two methods.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import time

from tierlog.errors import StartupError
from tierlog.kafka_uuid import new_kafka_uuid, uuid_to_str
from tierlog.storage.checkpoints import write_atomically

METADATA_FILE = "tierlog-metadata.json"
META_PROPERTIES = "meta.properties"

log = logging.getLogger(__name__)


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
            raise StartupError(f"cannot read the cluster metadata {self.path}: {e}; restore the file from a "
                               f"backup (it holds every topic's id and settings)") from e

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


def _read_meta_properties(path: str) -> dict[str, str]:
    """An existing ``meta.properties``, checked as Kafka's MetaProperties checks it (a readable file, a
    cluster id, version 0 or 1); a bad one stops the start with what to do."""
    try:
        props = _read_properties(path)
    except (OSError, UnicodeDecodeError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise StartupError(f"cannot read {path}: {why}; restore the file from a backup or give log.dirs "
                           f"another folder") from e
    if props.get("version", "0") not in ("0", "1"):
        raise StartupError(f"invalid {path}: unknown version {props['version']!r}; restore the file from a "
                           f"backup or give log.dirs another folder")
    if not props.get("cluster.id"):
        raise StartupError(f"invalid {path}: no cluster.id; restore the file from a backup or give log.dirs "
                           f"another folder")
    return props


def describe_os_error(e: OSError) -> tuple[str, str]:
    """(why, what to do) for an OSError on a log dir the operator configured."""
    why = (e.strerror or str(e)).lower()
    if e.errno in (errno.ENOTDIR, errno.EEXIST):
        return why, "a file is in the way; give log.dirs a folder"
    if e.errno in (errno.EACCES, errno.EPERM):
        return why, "make the folder writable by this user or change log.dirs"
    if e.errno == errno.EROFS:
        return why, "the file system is read-only; change log.dirs"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return why, "free space on that disk or change log.dirs"
    return why, "check the folder or change log.dirs"


def existing_cluster_id(log_dirs: list[str]) -> str | None:
    """The cluster id a log dir's ``meta.properties`` already names, if any (checked in full later)."""
    for d in log_dirs:
        path = os.path.join(d, META_PROPERTIES)
        if os.path.exists(path):
            try:
                cid = _read_properties(path).get("cluster.id")
            except (OSError, UnicodeDecodeError):
                continue
            if cid:
                return cid
    return None


def ensure_meta_properties(log_dirs: list[str], node_id: int, cluster_id: str | None) -> str:
    """Check or write ``meta.properties`` in every log dir; returns the cluster id in use.

    A dir formatted for another node or cluster, or with an unreadable ``meta.properties``, is refused
    (:class:`~tierlog.errors.StartupError` saying what to do). Without a cluster id anywhere, a new one is
    made (Kafka needs ``kafka-storage format``; a single tierlog node formats itself, and says so once
    per dir at INFO)."""
    found = {}
    for d in log_dirs:
        path = os.path.join(d, META_PROPERTIES)
        if os.path.exists(path):
            props = _read_meta_properties(path)
            if props.get("node.id", props.get("broker.id")) not in (None, str(node_id)):
                other = props.get("node.id", props.get("broker.id"))
                raise StartupError(f"log dir {d} belongs to node {other}, not node {node_id} ({path}); set "
                                   f"node.id={other} or give log.dirs another folder")
            found[d] = props["cluster.id"]
    ids = set(found.values()) | ({cluster_id} if cluster_id else set())
    if len(ids) > 1:
        where = ", ".join(f"{d}: {cid}" for d, cid in found.items())
        raise StartupError(f"log dirs belong to different clusters ({where}); give log.dirs folders of one "
                           f"cluster")
    cid = ids.pop() if ids else uuid_to_str(new_kafka_uuid())
    for d in log_dirs:
        path = os.path.join(d, META_PROPERTIES)
        if d in found:
            continue
        body = (f"#\n#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}\ncluster.id={cid}\n"
                f"directory.id={uuid_to_str(new_kafka_uuid())}\nnode.id={node_id}\nversion=1\n")
        try:
            os.makedirs(d, exist_ok=True)
            write_atomically(path, body.encode())
        except OSError as e:
            why, todo = describe_os_error(e)
            raise StartupError(f"cannot use log dir {d}: {why}; {todo}") from e
        log.info("Formatting new log dir %s (cluster id %s, node id %d)", d, cid, node_id)
    return cid
