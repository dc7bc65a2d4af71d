"""``filesystem``: remote storage in a local or mounted folder (NFS, a FUSE-mounted bucket, a test dir).

Settings (``rsm.config.`` stripped): ``dir`` (required; created if missing), ``fsync.enable``
(default true: fsync each object and its folder before the rename that publishes it), plus the
common ones of :class:`~tierlog.tiered.rsm.LayoutRemoteStorageManager`. Custom metadata is off by
default (``custom.metadata.enable=true`` turns it on).

Every object is written to a temporary file beside its final name and renamed over it, so readers
see either the old or the whole new object. Object keys map to paths below ``dir``.

An unavailable folder (a file where the folder should be, a path that cannot be created, a folder that
is not writable, an unmounted volume) is not a configuration error: ``configure`` logs a WARNING and
the broker starts, serving its local data. Every call then raises a RetriableRemoteStorageError
naming the folder (KAFKA_STORAGE_ERROR to a client), and works again once the folder is usable: a
folder that could not be created at start-up is created by the first call that finds it possible;
one that existed and then vanished is not created again (a missing mount point must not be filled
with segments on the local disk underneath), it is waited for.

Opened read-only (``read_only``, by readers such as the Spark source and audits) the folder is never
created: a missing one makes every call raise a RetriableRemoteStorageError saying it does not exist,
and only read access is required.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Iterable, Mapping

from tierlog.errors import InvalidConfigError
from tierlog.tiered.rsm.api import RetriableRemoteStorageError, error_from_os
from tierlog.tiered.rsm.base import COMMON_CONFIG_KEYS, LayoutRemoteStorageManager, rsm_setting

log = logging.getLogger(__name__)

TMP_SUFFIX = ".tmp"


class FileSystemRemoteStorageManager(LayoutRemoteStorageManager):
    custom_metadata_default = False

    def __init__(self) -> None:
        super().__init__()
        self.root = ""
        self.fsync = True
        self._dirs_lock = threading.Lock()
        self._root_made = False  # the folder was created (or found) once: never created again
        self._unavailable: str | None = None  # why the folder cannot be used, while it cannot

    def configure(self, configs: Mapping[str, str]) -> None:
        super().configure(configs)
        root = str(configs.get("dir") or "").strip()
        if not root:
            raise InvalidConfigError("Missing required configuration rsm.config.dir of the filesystem remote "
                                     "storage manager")
        self.fsync = rsm_setting(configs, "fsync.enable")
        unknown = sorted(set(configs) - COMMON_CONFIG_KEYS - {"dir", "fsync.enable"})
        if unknown:
            log.warning("Ignoring settings unknown to the filesystem remote storage: %s", ", ".join(unknown))
        self.root = os.path.abspath(root)
        if self.read_only:
            return  # a reader checks the folder when it uses it, and must not create it
        try:
            self._check_root()
        except RetriableRemoteStorageError:
            log.warning("Remote storage folder %s is unavailable (%s); the broker starts anyway and serves "
                        "local data: remote reads answer KAFKA_STORAGE_ERROR and uploads wait until the folder "
                        "can be used (every use tries again)", self.root, self._unavailable)

    # -- availability --

    def _check_root(self) -> None:
        """Raise a RetriableRemoteStorageError naming the folder unless it is a writable folder (readable,
        when read-only); create it if it was never created (never, when read-only)."""
        if not os.path.isdir(self.root):
            if os.path.lexists(self.root):
                raise self._unusable("it is not a folder")
            if self._root_made:
                raise self._unusable("it does not exist any more")
            if self.read_only:
                raise self._unusable("it does not exist")
            try:
                os.makedirs(self.root, exist_ok=True)
            except OSError as e:
                raise self._unusable(f"it cannot be created: {e.strerror or e}") from None
        if not os.access(self.root, self._access_mode()):
            raise self._unusable("it is not readable" if self.read_only else "it is not writable")
        self._root_made = True
        if self._unavailable is not None:
            self._unavailable = None
            log.info("Remote storage folder %s is available again", self.root)

    def _unusable(self, why: str) -> RetriableRemoteStorageError:
        if self._unavailable != why:
            if self._root_made or self._unavailable is not None:  # configure says it itself
                log.warning("Remote storage folder %s is unavailable: %s", self.root, why)
            self._unavailable = why
        return RetriableRemoteStorageError(f"filesystem remote storage {self.root} is unavailable: {why}")

    def _access_mode(self) -> int:
        return os.R_OK | os.X_OK if self.read_only else os.W_OK | os.X_OK

    def _after_failure(self, e: OSError) -> None:
        """A call failed: when the folder itself is the cause, say that instead (raises)."""
        if self._root_made and os.path.isdir(self.root) and os.access(self.root, self._access_mode()):
            return
        try:
            self._check_root()
        except RetriableRemoteStorageError as unusable:
            raise unusable from e

    # -- primitives --

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    def _local_path(self, key: str) -> str:
        self._check_root()  # the reader opens the file itself: a missing object must not hide a missing store
        return self._path(key)

    def _put_file(self, key: str, path: str) -> None:
        self._publish(key, lambda tmp: shutil.copyfile(path, tmp))

    def _put_chunks(self, key: str, chunks: Iterable[bytes]) -> None:
        def write(tmp: str) -> None:
            with open(tmp, "wb") as f:
                for chunk in chunks:
                    f.write(chunk)

        self._publish(key, write)

    def _publish(self, key: str, write) -> None:
        self._check_writable(f"write {key}")
        self._check_root()  # before the folders below it are created
        final = self._path(key)
        folder = os.path.dirname(final)
        tmp = f"{final}.{uuid.uuid4().hex[:12]}{TMP_SUFFIX}"
        try:
            self._create_tmp(folder, tmp)
        except OSError as e:
            self._after_failure(e)
            raise
        try:
            write(tmp)
            if self.fsync:
                fd = os.open(tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
            os.replace(tmp, final)
        except BaseException as e:
            _remove(tmp)
            if isinstance(e, OSError):
                self._after_failure(e)
            raise
        if self.fsync:
            _fsync_dir(folder)

    def _create_tmp(self, folder: str, tmp: str) -> None:
        # Once the temporary file exists the folder is not empty, so a delete's rmdir leaves it alone.
        # The lock covers this process; the retries cover another broker sharing the folder.
        for attempt in range(5):
            with self._dirs_lock:
                try:
                    os.makedirs(folder, exist_ok=True)
                    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                    return
                except (FileNotFoundError, FileExistsError):
                    if attempt == 4:
                        raise

    def _get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except OSError as e:
            self._after_failure(e)
            raise

    def _open(self, key: str) -> int:
        try:
            return os.open(self._path(key), os.O_RDONLY)
        except OSError as e:
            self._after_failure(e)
            raise

    def _get_range(self, key: str, start: int, length: int) -> bytes:
        fd = self._open(key)
        try:
            parts = []
            while length > 0:
                chunk = os.pread(fd, length, start)
                if not chunk:
                    break
                parts.append(chunk)
                start += len(chunk)
                length -= len(chunk)
            return b"".join(parts)
        finally:
            os.close(fd)

    def _get_range_into(self, key: str, start: int, buffer: memoryview) -> int:
        fd = self._open(key)
        try:
            got = 0
            while got < len(buffer):
                n = os.preadv(fd, [buffer[got:]], start + got)
                if n == 0:
                    break
                got += n
            return got
        finally:
            os.close(fd)

    def _delete(self, keys: list[str]) -> None:
        self._check_writable("delete objects")
        self._check_root()  # missing objects are fine, a missing store is not
        folders = set()
        for key in keys:
            path = self._path(key)
            try:
                _remove(path)
            except OSError as e:
                self._after_failure(e)
                raise
            folders.add(os.path.dirname(path))
        for folder in folders:
            self._remove_stray_tmp(folder, keys)
            # Empty partition and topic folders go too (see _create_tmp for racing copies).
            with self._dirs_lock:
                for d in (folder, os.path.dirname(folder)):
                    if d.startswith(self.root + os.sep):
                        try:
                            os.rmdir(d)
                        except OSError:
                            break

    def _remove_stray_tmp(self, folder: str, keys: list[str]) -> None:
        # Temporary files of an interrupted write of these objects.
        names = {os.path.basename(self._path(k)) for k in keys}
        try:
            entries = os.listdir(folder)
        except FileNotFoundError:
            return
        for name in entries:
            if name.endswith(TMP_SUFFIX) and name.rsplit(".", 2)[0] in names:
                _remove(os.path.join(folder, name))

    def _list(self, prefix: str) -> list[tuple[str, int]]:
        # Walk only the folder the prefix points into, then filter by the full prefix.
        self._check_root()
        start = self._path(prefix.rpartition("/")[0]) if "/" in prefix else self.root
        out = []
        for folder, _, files in os.walk(start):
            rel = os.path.relpath(folder, self.root)
            base = "" if rel == "." else rel.replace(os.sep, "/") + "/"
            for name in files:
                key = base + name
                if name.endswith(TMP_SUFFIX) or not key.startswith(prefix):
                    continue
                try:
                    out.append((key, os.path.getsize(os.path.join(folder, name))))
                except FileNotFoundError:
                    pass  # deleted while listing
        return out


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise error_from_os(e, f"cannot open {path}") from None
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
