"""The remote store as the Spark reader and jobs see it: opened read-only, and checked against the
metadata before any row is read.

A wrong store (a mistyped folder, a relative path resolved from another folder, the wrong bucket or key
prefix) looks, object by object, exactly like segments deleted by retention. Taking it for data loss
would fail with advice to set ``failOnDataLoss=false``, and following that advice would silently return
only the broker's local tail. So the driver tells the two apart before planning tasks:

- the store's root must exist (the filesystem store; a reader never creates it);
- for each topic, at least one of the remote segments the plan reads must be in the store. The newest
  planned segment of each partition is probed first (retention deletes the oldest first, so the newest
  ones are the last to go), then the others, newest first, up to :data:`MAX_PROBES`;
- when none is found, the partitions' log start offsets are asked again: if every planned segment now
  lies below its partition's log start, retention deleted them all after the metadata was read (data
  loss, governed by ``failOnDataLoss``); otherwise the store is misconfigured and the query fails with
  :class:`RemoteStoreConfigError` naming the store and the option to fix, whatever ``failOnDataLoss``.

A segment missing while others of its topic are present is what retention does between planning and
reading: the executor reports data loss for it (:mod:`tierlog.spark.read`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from tierlog.client.types import TopicPartition
from tierlog.errors import InvalidConfigError
from tierlog.tiered.metadata import RemoteLogSegmentMetadata

from .options import RemoteStoreConfigError, SourceOptions

log = logging.getLogger(__name__)

#: Probes per topic before a store that answers "not found" to all of them counts as the wrong one.
MAX_PROBES = 64

_stores: dict[tuple, object] = {}


def open_store(opts: SourceOptions, cluster_id: str | None = None):
    """The remote storage manager the options name, opened read-only, one per process (Spark reuses its
    Python workers, so consecutive tasks share it and its manifest cache); with ``cluster_id`` it finds
    segments in the cluster's key folder too (the broker's default layout)."""
    config = dict(opts.storage_config)
    if cluster_id and "cluster.id" not in config:
        config["cluster.id"] = cluster_id
    key = (opts.storage_manager, tuple(sorted(config.items())))
    rsm = _stores.get(key)
    if rsm is None:
        from tierlog.tiered.rsm import create_remote_storage_manager
        try:
            rsm = create_remote_storage_manager(opts.storage_manager, config, read_only=True)
        except InvalidConfigError as e:
            raise RemoteStoreConfigError(f"{e.message}; {setting_hint(opts)}") from None
        _stores[key] = rsm
    return rsm


def describe(rsm, opts: SourceOptions) -> str:
    """Where the store is, as a person would look for it."""
    root = getattr(rsm, "root", None) or getattr(rsm, "url", None) or opts.storage_config.get("dir") \
        or opts.storage_config.get("url") or str(opts.storage_manager)
    prefix = getattr(rsm, "key_prefix", "")
    return f"{root} (key prefix {prefix})" if prefix else str(root)


def setting_hint(opts: SourceOptions) -> str:
    """Which options (and broker settings) choose the store."""
    if opts.storage_manager == "filesystem":
        return ("check tierlog.rsm.dir: it must be the broker's rsm.config.dir folder (a relative path resolves "
                "against the current folder)")
    if opts.storage_manager == "objectstore":
        return ("check tierlog.rsm.url and tierlog.rsm.key.prefix: they must be the broker's rsm.config.url and "
                "key.prefix")
    return ("check tierlog.remote.storage.manager and tierlog.rsm.*: they must be the broker's "
            "remote.log.storage.manager.class.name and rsm.config.* settings")


def check_root(rsm, opts: SourceOptions) -> None:
    """A filesystem store's folder must exist: raise RemoteStoreConfigError naming it otherwise."""
    root = getattr(rsm, "root", None)
    if opts.storage_manager == "filesystem" and root and not os.path.isdir(root):
        what = "is not a folder" if os.path.lexists(root) else "does not exist"
        raise RemoteStoreConfigError(f"remote store {root} {what}; {setting_hint(opts)}")


def present(rsm, md: RemoteLogSegmentMetadata) -> bool:
    """Whether the store holds segment ``md`` (its first byte can be read)."""
    from tierlog.tiered.exceptions import RemoteResourceNotFoundError
    try:
        rsm.fetch_log_segment(md, 0, 0)
    except RemoteResourceNotFoundError:
        return False
    return True


def verify(opts: SourceOptions, segments: dict[TopicPartition, list[RemoteLogSegmentMetadata]],
           log_starts: Callable[[list[TopicPartition]], dict[TopicPartition, int]],
           cluster_id: str | None = None) -> None:
    """Raise RemoteStoreConfigError unless the store holds at least one of each topic's ``segments`` (the
    remote segments a plan reads), or retention has deleted them all since (see the module's text)."""
    wanted = {tp: mds for tp, mds in segments.items() if mds}
    if not wanted:
        return
    rsm = open_store(opts, cluster_id)
    check_root(rsm, opts)
    by_topic: dict[str, dict[TopicPartition, list[RemoteLogSegmentMetadata]]] = {}
    for tp, mds in wanted.items():
        by_topic.setdefault(tp.topic, {})[tp] = mds
    for topic, parts in sorted(by_topic.items()):
        newest = [max(mds, key=lambda m: m.end_offset) for mds in parts.values()]
        others = sorted((m for mds in parts.values() for m in mds if all(m is not n for n in newest)),
                        key=lambda m: -m.end_offset)
        probes = (newest + others)[:max(MAX_PROBES, len(newest))]
        if any(present(rsm, md) for md in probes):
            continue
        starts = log_starts(sorted(parts))
        if all(md.end_offset < starts.get(tp, -1) for tp, mds in parts.items() for md in mds):
            log.warning("The remote segments planned for topic %s were deleted by retention after the metadata "
                        "was read", topic)
            continue
        listed = sum(len(mds) for mds in parts.values())
        counted = (f"none of the {listed} remote segment(s)" if len(probes) == listed
                   else f"none of {len(probes)} probed of the {listed} remote segment(s)")
        raise RemoteStoreConfigError(
            f"remote store {describe(rsm, opts)} holds {counted} the metadata lists for topic {topic}: the "
            f"store is not the broker's (a configuration error, not data loss; failOnDataLoss does not apply); "
            f"{setting_hint(opts)}")
