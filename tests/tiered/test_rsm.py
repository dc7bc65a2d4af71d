"""The RemoteStorageManager contract, run over every built-in backend (and compression), plus the
factory and the error hierarchy."""

from __future__ import annotations

import json
import random
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from tests.tiered.rsmlib import BACKENDS, backend_params
from tierlog.errors import InvalidConfigError, KafkaStorageError
from tierlog.kafka_uuid import uuid_to_str
from tierlog.records import build_batch
from tierlog.tiered import exceptions
from tierlog.tiered.metadata import IndexType, RemoteLogSegmentMetadataUpdate, RemoteLogSegmentState
from tierlog.tiered.rsm import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
    RemoteStorageManager,
    RetriableRemoteStorageError,
    create_remote_storage_manager,
    layout,
)
from tierlog.tiered.rsm.filesystem import FileSystemRemoteStorageManager

MODULE = "tests/tiered/test_rsm.py"


@pytest.fixture(params=backend_params(BACKENDS, MODULE))
def backend(request):
    return request.param


@pytest.fixture
def rsm(backend, make_rsm):
    return make_rsm(backend)


def _names_segment(err, md):
    text = str(err)
    tp = md.topic_id_partition
    return (uuid_to_str(md.segment_id.id) in text and f"{tp.topic}-{tp.partition}" in text
            and f"start offset {md.start_offset}" in text)


def test_copy_then_fetch_whole_segment(rsm, segment):
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    assert rsm.fetch_log_segment(md, 0) == segment.files["log"]
    assert rsm.fetch_log_segment(md, 0, len(segment.files["log"]) - 1) == segment.files["log"]


def test_ranged_fetch_returns_the_slice(rsm, segment):
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    log = segment.files["log"]
    size = len(log)
    rnd = random.Random(11)
    ranges = [(0, 0), (size - 1, size - 1), (999, 1000), (1000, 1999), (1, size + 500), (size - 10, None),
              (size, size + 10), (size + 100, None)]
    ranges += [(s, s + rnd.randint(0, 3000)) for s in (rnd.randrange(size) for _ in range(30))]
    for start, end in ranges:
        expected = log[start:] if end is None else log[start:end + 1]
        assert rsm.fetch_log_segment(md, start, end) == expected, (start, end)


def test_read_into_a_reused_buffer_gives_the_same_bytes(rsm, segment):
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    log = segment.files["log"]
    # Byte by byte only where a read is no request: 20,000 of them to a server prove nothing more.
    remote = rsm.configs.get("url", "").startswith("s3:")
    for size in (1000, 4096, len(log) + 7) if remote else (1, 1000, 4096, len(log) + 7):
        buffer = memoryview(bytearray(size))
        buffer[:] = b"\xee" * size  # stale bytes from an earlier read must not leak into the answer
        got = []
        position = 0
        while n := rsm.read_log_segment_into(md, position, buffer):
            got.append(bytes(buffer[:n]))
            position += n
        assert b"".join(got) == log, size
        assert all(len(part) == size for part in got[:-1])
    assert rsm.read_log_segment_into(md, len(log) + 100, memoryview(bytearray(10))) == 0
    with pytest.raises(ValueError):
        rsm.read_log_segment_into(md, -1, memoryview(bytearray(10)))
    rsm.delete_log_segment_data(md)
    with pytest.raises(RemoteResourceNotFoundError) as info:
        rsm.read_log_segment_into(md, 0, memoryview(bytearray(10)))
    assert _names_segment(info.value, md)


def test_fetch_into_a_kept_buffer_gives_the_same_bytes(rsm, segment):
    """The remote reader's read-ahead keeps what fetch_log_segment_buffer returns and answers fetches with
    views into it: the same bytes as fetch_log_segment, read-only; the object store hands over its
    client's buffer rather than a copy."""
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    log = segment.files["log"]
    size = len(log)
    for start, end in ((0, None), (0, 0), (size - 1, size - 1), (1000, 1999), (1, size + 500), (size, None)):
        got = rsm.fetch_log_segment_buffer(md, start, end)
        assert got == (log[start:] if end is None else log[start:end + 1]), (start, end)
        assert memoryview(got).readonly
    uncopied = rsm.configs.get("url", "").partition(":")[0] in ("s3", "memory", "file") and \
        rsm.configs.get("compression.enable") != "true"
    if uncopied:
        assert not isinstance(rsm.fetch_log_segment_buffer(md, 0, 99), bytes)
    rsm.delete_log_segment_data(md)
    with pytest.raises(RemoteResourceNotFoundError) as info:
        rsm.fetch_log_segment_buffer(md, 0)
    assert _names_segment(info.value, md)


def test_fetch_range_arguments_are_checked(rsm, segment):
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    with pytest.raises(ValueError):
        rsm.fetch_log_segment(md, -1)
    with pytest.raises(ValueError):
        rsm.fetch_log_segment(md, 10, 9)


def test_fetch_index_returns_local_bytes(rsm, segment):
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    for index_type in IndexType:
        assert rsm.fetch_index(md, index_type) == segment.files[index_type], index_type


def test_missing_transaction_index_is_not_found(rsm, segment):
    md = segment.metadata()
    rsm.copy_log_segment_data(md, replace(segment.data, transaction_index=None))
    with pytest.raises(RemoteResourceNotFoundError) as info:
        rsm.fetch_index(md, IndexType.TRANSACTION)
    assert "transaction index" in str(info.value) and _names_segment(info.value, md)
    assert rsm.fetch_index(md, IndexType.OFFSET) == segment.files[IndexType.OFFSET]


def test_recopy_after_failed_attempt_overwrites(rsm, segment, monkeypatch):
    md = segment.metadata()
    calls = []
    original = type(rsm)._put_bytes

    def fail_indexes(self, key, data):
        calls.append(key)
        if key.endswith(".indexes"):
            raise RetriableRemoteStorageError("injected upload failure")
        return original(self, key, data)

    monkeypatch.setattr(type(rsm), "_put_bytes", fail_indexes)
    with pytest.raises(RetriableRemoteStorageError):
        rsm.copy_log_segment_data(md, segment.data)
    monkeypatch.undo()
    # The partial attempt left a .log but no manifest: the segment is not readable.
    keys = rsm.segment_keys(md)
    assert keys.log in dict(rsm.list_objects())
    with pytest.raises(RemoteResourceNotFoundError):
        rsm.fetch_log_segment(md, 0)
    rsm.copy_log_segment_data(md, segment.data)
    assert rsm.fetch_log_segment(md, 0) == segment.files["log"]
    assert rsm.fetch_index(md, IndexType.TIMESTAMP) == segment.files[IndexType.TIMESTAMP]


def test_recopy_replaces_a_complete_earlier_copy(rsm, segment, tmp_path):
    md = segment.metadata()
    other = tmp_path / "other.log"
    other.write_bytes(b"stale" * 999)
    rsm.copy_log_segment_data(md, replace(segment.data, log_segment=other))
    assert rsm.fetch_log_segment(md, 0, 4) == b"stale"
    rsm.copy_log_segment_data(md, segment.data)
    assert rsm.fetch_log_segment(md, 0) == segment.files["log"]


def test_delete_is_idempotent_and_fetch_after_delete_is_not_found(rsm, segment):
    md = segment.metadata()
    kept = segment.metadata()
    rsm.delete_log_segment_data(md)  # never copied: nothing to delete is fine
    rsm.copy_log_segment_data(md, segment.data)
    rsm.copy_log_segment_data(kept, segment.data)
    rsm.delete_log_segment_data(md)
    rsm.delete_log_segment_data(md)
    for fetch in (lambda: rsm.fetch_log_segment(md, 0), lambda: rsm.fetch_index(md, IndexType.OFFSET)):
        with pytest.raises(RemoteResourceNotFoundError) as info:
            fetch()
        assert _names_segment(info.value, md)
        # One except clause catches the metadata managers' not-found errors and these.
        assert isinstance(info.value, exceptions.RemoteResourceNotFoundError)
    keys = [k for k, _ in rsm.list_objects()]
    assert not [k for k in keys if uuid_to_str(md.segment_id.id) in k]
    assert rsm.fetch_log_segment(kept, 0, 99) == segment.files["log"][:100]


def test_keys_follow_the_documented_layout(rsm, segment):
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    tp = md.topic_id_partition
    stem = (f"{tp.topic}-{uuid_to_str(tp.topic_id)}/{tp.partition}/{md.start_offset:020d}-"
            f"{uuid_to_str(md.segment_id.id)}")
    listed = dict(rsm.list_objects())
    assert sorted(listed) == [stem + ".indexes", stem + ".log", stem + ".manifest"]
    manifest = layout.SegmentManifest.from_json(rsm._get(stem + ".manifest"))
    assert listed[stem + ".log"] == manifest.log_stored_size
    assert listed[stem + ".indexes"] == manifest.indexes_size
    assert manifest.log_size == len(segment.files["log"])
    assert (manifest.log_stored_size < manifest.log_size) == bool(manifest.transforms)
    for key in listed:
        parsed = layout.parse_key(key)
        assert (parsed.topic, parsed.topic_id, parsed.partition) == (tp.topic, tp.topic_id, tp.partition)
        assert (parsed.start_offset, parsed.segment_id) == (md.start_offset, md.segment_id.id)
    # Prefix listing narrows to one partition, one segment, or nothing.
    assert dict(rsm.list_objects(f"{tp.topic}-{uuid_to_str(tp.topic_id)}/{tp.partition}/")) == listed
    assert dict(rsm.list_objects(stem)) == listed
    assert rsm.list_objects(stem + ".l") == [(stem + ".log", listed[stem + ".log"])]
    assert rsm.list_objects("no-such-topic/") == []


def test_key_prefix_is_prepended_and_recorded_in_custom_metadata(backend, make_rsm, segment):
    rsm = make_rsm(backend, {"key.prefix": "tier/v1/", "custom.metadata.enable": "true"})
    md = segment.metadata()
    custom = rsm.copy_log_segment_data(md, segment.data)
    assert all(k.startswith("tier/v1/orders.v1-eu-") for k, _ in rsm.list_objects())
    assert len(custom) <= 128
    assert json.loads(custom)["p"] == "tier/v1/"
    finished = md.with_update(_finished(md, custom))
    assert rsm.fetch_log_segment(finished, 5, 9) == segment.files["log"][5:10]
    # Moving the prefix keeps old segments readable: the recorded one is used.
    rsm.key_prefix = "tier/v2/"
    assert rsm.fetch_log_segment(finished, 5, 9) == segment.files["log"][5:10]
    rsm.delete_log_segment_data(finished)
    assert rsm.list_objects() == []


def test_custom_metadata_defaults(make_rsm, segment):
    fs = make_rsm("filesystem")
    assert fs.copy_log_segment_data(segment.metadata(), segment.data) is None
    obj = make_rsm("memory")
    custom = obj.copy_log_segment_data(segment.metadata(), segment.data)
    stored = sum(size for key, size in obj.list_objects() if not key.endswith(".manifest"))
    assert json.loads(custom) == {"p": "", "s": stored}
    assert len(custom) < 64


def test_compression_shrinks_and_heuristic_skips_compressed_batches(make_rsm, segment, tmp_path):
    rsm = make_rsm("filesystem-zstd", {"compression.heuristic.enable": "true"})
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)  # random values, uncompressed batches: compressed anyway
    manifest = layout.SegmentManifest.from_json(rsm._get(rsm.segment_keys(md).manifest))
    assert manifest.transforms and manifest.transforms[0]["name"] == "zstd-chunks"
    zipped = tmp_path / "zstd.log"
    zipped.write_bytes(build_batch([(b"k", b"v" * 5000)], compression="zstd") * 3)
    md2 = segment.metadata()
    rsm.copy_log_segment_data(md2, replace(segment.data, log_segment=zipped))
    manifest = layout.SegmentManifest.from_json(rsm._get(rsm.segment_keys(md2).manifest))
    assert manifest.transforms == () and rsm.fetch_log_segment(md2, 0) == zipped.read_bytes()


def test_filesystem_writes_atomically_and_cleans_folders(make_rsm, segment, tmp_path):
    rsm = make_rsm("filesystem", {"fsync.enable": "true"})
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    root = tmp_path / "remote"
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) == 3 and not [p for p in files if p.name.endswith(".tmp")]
    # A stray temporary file of an interrupted write is removed with the segment.
    stray = root / (rsm.segment_keys(md).log + ".0123456789ab.tmp")
    stray.write_bytes(b"partial")
    assert rsm.list_objects() == sorted(rsm.list_objects()) and len(rsm.list_objects()) == 3
    rsm.delete_log_segment_data(md)
    assert root.exists() and list(root.iterdir()) == []


def test_read_only_filesystem_never_creates_or_changes_the_folder(make_rsm, segment, tmp_path):
    missing = tmp_path / "nowhere" / "remote"
    reader = create_remote_storage_manager("filesystem", {"dir": str(missing)}, read_only=True)
    with pytest.raises(RetriableRemoteStorageError, match=re.escape(str(missing)) + ".*does not exist"):
        reader.list_objects()
    md = segment.metadata()
    with pytest.raises(RetriableRemoteStorageError, match="does not exist"):
        reader.fetch_log_segment(md, 0, 0)
    assert not (tmp_path / "nowhere").exists()
    # Over an existing store it reads, and refuses every change.
    writer = make_rsm("filesystem")
    writer.copy_log_segment_data(md, segment.data)
    reader = create_remote_storage_manager("filesystem", writer.configs, read_only=True)
    assert reader.fetch_log_segment(md, 0, 99) == segment.files["log"][:100]
    with pytest.raises(RemoteStorageError, match="read-only"):
        reader.delete_log_segment_data(md)
    with pytest.raises(RemoteStorageError, match="read-only"):
        reader.copy_log_segment_data(md, segment.data)
    assert len(writer.list_objects()) == 3


def test_read_only_file_object_store_does_not_create_its_folder(make_rsm, tmp_path):
    pytest.importorskip("obstore")
    missing = tmp_path / "nowhere" / "bucket"
    with pytest.raises(InvalidConfigError, match="Cannot open object store"):
        create_remote_storage_manager("objectstore", {"url": missing.as_uri()}, read_only=True)
    assert not (tmp_path / "nowhere").exists()


# A memory store lives and dies with its manager.
@pytest.mark.parametrize("backend", backend_params([b for b in BACKENDS if not b.startswith("memory")], MODULE))
def test_reads_survive_a_new_instance(backend, make_rsm, segment):
    rsm = make_rsm(backend)
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    again = type(rsm)()
    again.configure(rsm.configs)
    assert again.fetch_log_segment(md, 100, 199) == segment.files["log"][100:200]
    assert again.fetch_index(md, IndexType.LEADER_EPOCH) == segment.files[IndexType.LEADER_EPOCH]


def test_newer_manifest_version_is_refused(make_rsm, segment):
    rsm = make_rsm("filesystem")
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    key = rsm.segment_keys(md).manifest
    doc = json.loads(rsm._get(key))
    doc["version"] = layout.MANIFEST_VERSION + 1
    rsm._put_bytes(key, json.dumps(doc).encode())
    fresh = make_rsm("filesystem")
    with pytest.raises(RemoteStorageError, match="version"):
        fresh.fetch_log_segment(md, 0)


def test_corrupt_index_bytes_are_detected(make_rsm, segment):
    rsm = make_rsm("filesystem")
    md = segment.metadata()
    rsm.copy_log_segment_data(md, segment.data)
    key = rsm.segment_keys(md).indexes
    blob = bytearray(rsm._get(key))
    blob[-1] ^= 0xFF  # last byte of the leader-epoch checkpoint
    rsm._put_bytes(key, bytes(blob))
    with pytest.raises(RemoteStorageError, match="corrupt"):
        rsm.fetch_index(md, IndexType.LEADER_EPOCH)


# ---------------------------------------------------------------------------------- factory and errors


def test_factory_resolves_builtin_and_dotted_names(tmp_path):
    configs = {"dir": str(tmp_path / "r")}
    for name in ("filesystem", "tierlog.tiered.rsm.filesystem:FileSystemRemoteStorageManager",
                 "tierlog.tiered.rsm.filesystem.FileSystemRemoteStorageManager"):
        with create_remote_storage_manager(name, configs) as rsm:
            assert isinstance(rsm, FileSystemRemoteStorageManager)


def test_factory_loads_a_plugin_from_the_class_path(tmp_path):
    plugin = tmp_path / "plugins" / "my_rsm_plugin.py"
    plugin.parent.mkdir()
    plugin.write_text("from tierlog.tiered.rsm.filesystem import FileSystemRemoteStorageManager\n"
                      "class Mine(FileSystemRemoteStorageManager):\n    pass\n")
    rsm = create_remote_storage_manager("my_rsm_plugin:Mine", {"dir": str(tmp_path / "r")},
                                        class_path=str(plugin.parent))
    assert type(rsm).__name__ == "Mine"


@pytest.mark.parametrize("name, configs, match", [
    ("nosuch", {}, "neither"),
    ("no.such.module:Cls", {}, "cannot load"),
    ("tierlog.errors:KafkaError", {}, "not a RemoteStorageManager"),
    ("filesystem", {}, "rsm.config.dir"),
    ("filesystem", {"dir": "x", "compression.enable": "maybe"}, "compression.enable"),
    ("filesystem", {"dir": "x", "key.prefix": "../escape/"}, "key.prefix"),
    ("objectstore", {}, "rsm.config.url"),
    ("objectstore", {"url": "memory://", "aws_no_such_option": "1"}, "Cannot open object store"),
])
def test_factory_rejects_bad_configuration(name, configs, match, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidConfigError, match=match):
        create_remote_storage_manager(name, configs)


def test_error_hierarchy():
    assert issubclass(RemoteStorageError, KafkaStorageError) and RemoteStorageError.code == 56
    assert issubclass(RetriableRemoteStorageError, RemoteStorageError)
    assert issubclass(RemoteResourceNotFoundError, RemoteStorageError)
    assert issubclass(RemoteResourceNotFoundError, exceptions.RemoteResourceNotFoundError)
    assert not issubclass(RemoteResourceNotFoundError, RetriableRemoteStorageError)
    assert RemoteStorageManager.__abstractmethods__ >= {"copy_log_segment_data", "fetch_log_segment",
                                                        "fetch_index", "delete_log_segment_data", "list_objects"}


def test_not_found_message_names_segment_and_object(make_rsm, segment):
    rsm = make_rsm("filesystem")
    md = segment.metadata()
    with pytest.raises(RemoteResourceNotFoundError) as info:
        rsm.fetch_index(md, IndexType.OFFSET)
    assert _names_segment(info.value, md)
    assert re.search(r"object \S+\.manifest", str(info.value))


# ------------------------------------------------------------------------------------------- helpers


def _finished(md, custom):
    return RemoteLogSegmentMetadataUpdate(md.segment_id, md.event_timestamp_ms + 1, custom,
                                          RemoteLogSegmentState.COPY_SEGMENT_FINISHED, 1)


def test_concurrent_copies_and_reads(rsm, segment):
    # The broker calls a manager from several pool threads at once.
    mds = [segment.metadata() for _ in range(4)]
    log = segment.files["log"]

    def work(md):
        rsm.copy_log_segment_data(md, segment.data)
        got = [rsm.fetch_log_segment(md, s, s + 1500) for s in range(0, len(log), 3001)]
        rsm.delete_log_segment_data(md)
        return got

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, mds))
    expected = [log[s:s + 1501] for s in range(0, len(log), 3001)]
    assert results == [expected] * 4
    assert rsm.list_objects() == []


CLUSTER = "MkU3OEVBNTcwNTJENDM2Qk"


# memory:// lives only as long as its manager: this case needs two managers on one store.
@pytest.mark.parametrize("backend", backend_params([b for b in BACKENDS if not b.startswith("memory")], MODULE))
def test_segments_of_either_layout_are_found(backend, make_rsm, segment):
    """With the cluster id, copies go below the cluster folder; segments of the older layout (no cluster
    folder) still read and delete, with or without custom metadata to say where they are."""
    md_old, md_new = segment.metadata(), segment.metadata()
    md_new = replace(md_new, segment_id=replace(md_new.segment_id, id=uuid.uuid4()))
    older = make_rsm(backend, {"cluster.id": CLUSTER, "key.cluster.id.enable": "false", "key.prefix": "t/"})
    custom_old = older.copy_log_segment_data(md_old, segment.data)
    assert older.write_keys(md_old).stem.startswith("t/" + md_old.topic_id_partition.topic)
    store = {"url": older.configs["url"]} if "url" in older.configs else {}  # the same bucket folder
    rsm = make_rsm(backend, {"cluster.id": CLUSTER, "key.prefix": "t/", **store})
    custom_new = rsm.copy_log_segment_data(md_new, segment.data)
    keys = {k for k, _ in rsm.list_objects("t/")}
    assert rsm.write_keys(md_new).log in keys and rsm.write_keys(md_new).log.startswith(f"t/{CLUSTER}/")
    assert layout.parse_key(rsm.write_keys(md_new).log, "t/").cluster_id == CLUSTER
    for md, custom in ((md_old, custom_old), (md_new, custom_new)):
        finished = replace(md, custom_metadata=custom, state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
        assert rsm.fetch_log_segment(finished, 0) == segment.files["log"]
        assert rsm.fetch_index(finished, IndexType.OFFSET) == segment.files[IndexType.OFFSET]
        if custom is not None:  # the recorded prefix names the folder, cluster folder included
            assert json.loads(custom)["p"] == ("t/" if md is md_old else f"t/{CLUSTER}/")
    # A reader that does not know the cluster id finds a cluster-layout segment only through its custom metadata.
    blind = make_rsm(backend, {"key.prefix": "t/", **store})
    finished_new = replace(md_new, custom_metadata=custom_new)
    if custom_new is None:
        with pytest.raises(RemoteResourceNotFoundError):
            blind.fetch_log_segment(finished_new, 0)
    else:
        assert blind.fetch_log_segment(finished_new, 0) == segment.files["log"]
    rsm.delete_log_segment_data(md_old)
    rsm.delete_log_segment_data(md_new)
    assert rsm.list_objects("t/") == []
