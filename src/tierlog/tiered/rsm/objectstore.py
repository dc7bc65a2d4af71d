"""``objectstore``: remote storage in S3, GCS, Azure Blob, a local folder or memory, through obstore.

Settings (``rsm.config.`` stripped):

- ``url`` (required): ``s3://bucket/prefix``, ``gs://bucket/prefix``, ``az://container/prefix``,
  ``file:///path`` (created if missing) or ``memory://`` (one store per manager, for tests);
- store options, passed to obstore as they are: any key starting with ``aws_``, ``google_`` or
  ``azure_`` (e.g. ``aws_endpoint``, ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_region``,
  ``aws_virtual_hosted_style_request``); such a key naming an HTTP client option (``aws_allow_http``)
  and any ``client.<option>`` key go to obstore's client options instead;
- timeouts and retries: ``request.timeout.ms``, ``connect.timeout.ms``, ``retry.max.retries``,
  ``retry.timeout.ms``, ``retry.backoff.ms``, ``retry.backoff.max.ms`` (obstore's defaults when unset:
  30 s, 5 s, 10 retries, 3 min, 100 ms, 15 s);
- ``upload.part.size`` (default 8 MiB): part size of multipart uploads, used above that size;
- the common ones of :class:`~tierlog.tiered.rsm.LayoutRemoteStorageManager`; custom metadata is on by
  default here (``custom.metadata.enable=false`` turns it off).

Credentials may also come from the environment (AWS_*, GOOGLE_*, AZURE_* variables) as obstore reads
them. Keys are relative to the URL's path.

Stores that lack part of S3 (:mod:`tierlog.tiered.rsm.storecompat`): the first time a store refuses the
multi-object delete or a multipart upload, this manager says so in one INFO line and from then on deletes
one object per plain ``DELETE`` request, or uploads with single PUTs; folder placeholders are left out of
listings.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import obstore
from obstore import exceptions as obs_errors
from obstore.store import from_url

from tierlog.config.values import HIDDEN, is_sensitive_key
from tierlog.errors import InvalidConfigError
from tierlog.tiered.rsm import storecompat
from tierlog.tiered.rsm.api import RemoteStorageError, RetriableRemoteStorageError, error_from_os
from tierlog.tiered.rsm.base import COMMON_CONFIG_KEYS, LayoutRemoteStorageManager, rsm_setting
from tierlog.tiered.rsm.requests import StoreRequests

log = logging.getLogger(__name__)

_T = TypeVar("_T")
_STORE_PREFIXES = ("aws_", "google_", "azure_")
# obstore's HTTP client options; given with a store prefix (aws_allow_http) they must not reach the
# store config, where obstore aborts on them.
_CLIENT_OPTIONS = frozenset({
    "allow_http", "allow_invalid_certificates", "connect_timeout", "default_content_type", "http1_only",
    "http2_keep_alive_interval", "http2_keep_alive_timeout", "http2_keep_alive_while_idle", "http2_only",
    "pool_idle_timeout", "pool_max_idle_per_host", "proxy_url", "proxy_ca_certificate", "proxy_excludes",
    "randomize_addresses", "read_timeout", "timeout", "user_agent",
})
_OWN_KEYS = frozenset({"url", "request.timeout.ms", "connect.timeout.ms", "retry.max.retries", "retry.timeout.ms",
                       "retry.backoff.ms", "retry.backoff.max.ms", "upload.part.size"})
_SIGNED_URL_LIFETIME = timedelta(minutes=15)  # of a plain DELETE's URL (stores without multi-object delete)
_MIN_PART_SIZE = 5 * 1024 * 1024  # S3's smallest part but the last
_STATUS_RE = re.compile(r"status code: (\d{3})")
# what a request URL may carry that is a credential: a password before the host, a SAS signature, a
# presigned request's signature, credential scope or session token
_URL_PASSWORD = re.compile(r"(\w+://[^/\s:@]+:)[^/\s@]+@")
_URL_SECRET_PARAM = re.compile(r"(?i)([?&](?:sig|signature|x-amz-signature|x-amz-credential|x-amz-security-token|"
                               r"token|access_token)=)[^&\s#]+")


class ObjectStoreRemoteStorageManager(LayoutRemoteStorageManager):
    custom_metadata_default = True

    def __init__(self) -> None:
        super().__init__()
        self.url = ""
        self.shown_url = ""
        self.part_size = 8 * 1024 * 1024
        self._store: Any = None
        self._secrets: tuple[str, ...] = ()  # credential values, cut out of every error text
        self.requests = StoreRequests()
        self.abilities = storecompat.Abilities()  # what the store turned out to lack
        self._request_timeout_s = 30.0
        self._backoff_s = 0.1
        self._plain_requests = storecompat.opener({})

    def configure(self, configs: Mapping[str, str]) -> None:
        super().configure(configs)
        self.url = str(configs.get("url") or "").strip()
        self.shown_url = redact(self.url)  # what messages name
        if not self.url:
            raise InvalidConfigError("Missing required configuration rsm.config.url of the objectstore remote "
                                     "storage manager")
        self.part_size = rsm_setting(configs, "upload.part.size")
        # a store's error may quote what it was given (an S3 403 names the access key id): errors reach the
        # broker's log, the tier status and clients, so the credentials are cut out of them. Real keys are
        # 16 characters and more; a short test value ("test") would cut words out of every message.
        self._secrets = tuple(sorted({str(v) for k, v in configs.items() if is_sensitive_key(k) and len(str(v)) >= 8},
                                     key=len, reverse=True))
        store_config: dict[str, str] = {}
        client: dict[str, Any] = {}
        ignored = []
        for key, value in configs.items():
            lower = key.lower()
            if key in COMMON_CONFIG_KEYS or key in _OWN_KEYS:
                continue
            if lower.startswith("client."):
                client[lower[len("client."):]] = str(value)
            elif lower.startswith(_STORE_PREFIXES):
                option = lower.split("_", 1)[1]
                if option in _CLIENT_OPTIONS:
                    client[option] = str(value)
                else:
                    store_config[lower] = str(value)
            else:
                ignored.append(key)
        if ignored:
            log.warning("Ignoring settings unknown to the objectstore remote storage: %s", ", ".join(sorted(ignored)))
        for key, option in (("request.timeout.ms", "timeout"), ("connect.timeout.ms", "connect_timeout")):
            ms = rsm_setting(configs, key)
            if ms is not None:
                client[option] = f"{ms}ms"
        self._request_timeout_s = (rsm_setting(configs, "request.timeout.ms") or 30_000) / 1000
        self._backoff_s = (rsm_setting(configs, "retry.backoff.ms") or 100) / 1000
        self._plain_requests = storecompat.opener(client)
        retry = _retry_config(configs)
        endpoint = next((v for k, v in store_config.items() if k.endswith("endpoint")), "")
        self.abilities = storecompat.abilities_of((self.url.split("/", 3)[2] if "://" in self.url else self.url,
                                                   self.url.split(":", 1)[0], endpoint))
        kwargs: dict[str, Any] = {}
        if self.url.startswith("file:") and not self.read_only:
            kwargs["mkdir"] = True  # a reader must not create the folder (RemoteStorageManager.read_only)
        try:
            self._store = from_url(self.url, config=store_config or None, client_options=client or None,
                                   retry_config=retry, **kwargs)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # obstore reports some bad options as a Rust panic (a BaseException)
            raise InvalidConfigError(f"Cannot open object store {self.shown_url}: {type(e).__name__}: "
                                     f"{_first_line(e, self._secrets)}") from None

    def close(self) -> None:
        self._store = None

    def store_requests(self) -> dict[str, dict[str, int]]:
        return self.requests.snapshot()

    # -- primitives --

    def _put_file(self, key: str, path: str) -> None:
        # obstore goes multipart above one part; only a refusal of that says the store lacks multipart.
        if self.abilities.multipart and os.path.getsize(path) > self.part_size:
            try:
                self._call(f"upload {key}", obstore.put, self._store, key, Path(path), chunk_size=self.part_size)
                return
            except RemoteStorageError as e:
                if not self._multipart_refused(e):
                    raise
        self._call(f"upload {key}", obstore.put, self._store, key, Path(path), use_multipart=False)

    def _put_chunks(self, key: str, chunks: Iterable[bytes]) -> None:
        if not self.abilities.multipart:  # one PUT of the whole object, held in memory
            self._call(f"upload {key}", obstore.put, self._store, key, b"".join(chunks), use_multipart=False)
            return
        pulled = _Pulled(chunks)
        try:
            self._call(f"upload {key}", obstore.put, self._store, key, pulled, chunk_size=self.part_size)
        except RemoteStorageError as e:
            if not self._multipart_refused(e):
                raise
            if pulled.started:  # the stream cannot be read again: the caller's next attempt goes whole
                raise RetriableRemoteStorageError(f"cannot upload {key} in {self.shown_url}: multipart upload "
                                                  f"refused; the next attempt uses a single PUT") from None
            self._call(f"upload {key}", obstore.put, self._store, key, b"".join(chunks), use_multipart=False)

    def _put_bytes(self, key: str, data: bytes) -> None:
        # One plain PUT: small objects need no multipart upload.
        self._call(f"upload {key}", obstore.put, self._store, key, data, use_multipart=False)

    def _get(self, key: str) -> bytes:
        data = b""
        try:
            data = self._call(f"read {key}", lambda: bytes(obstore.get(self._store, key).bytes()))
            return data
        finally:  # a missing object is a request too
            self.requests.add("GET", 1, len(data))

    def _get_range(self, key: str, start: int, length: int) -> bytes:
        return bytes(self._get_range_buffer(key, start, length))

    def _get_range_buffer(self, key: str, start: int, length: int) -> memoryview:
        # obstore's immutable Bytes as they came off the wire, not copied into bytes (0.2-0.4 ms of CPU
        # per MiB, paid by every remote catch-up)
        data = b""
        try:
            data = memoryview(self._call(f"read {key}", obstore.get_range, self._store, key, start=start,
                                         length=length))
            return data
        finally:
            self.requests.add("GET_RANGE", 1, len(data))

    def _exists(self, key: str) -> bool:
        try:
            self._call(f"read {key}", obstore.head, self._store, key)
            return True
        except FileNotFoundError:
            return False

    def _delete(self, keys: list[str]) -> None:
        if self.abilities.bulk_delete:
            try:
                self._call("delete objects", obstore.delete, self._store, keys)
                return
            except FileNotFoundError:
                pass  # stores without bulk delete (local) stop at the first missing key: go one by one
            except RemoteStorageError as e:
                if not (storecompat.can_sign(self._store) and storecompat.refused(str(e))):
                    raise
                if self.abilities.lose("bulk_delete"):
                    log.info("Object store %s refuses multi-object deletes (%s): deleting one object per request "
                             "from now on", self.shown_url, storecompat.answer(str(e)) or str(e))
        for key in keys:
            self._delete_one(key)

    def _delete_one(self, key: str) -> None:
        if not storecompat.can_sign(self._store):
            try:
                self._call(f"delete {key}", obstore.delete, self._store, key)
            except FileNotFoundError:
                pass
            return
        if self._store is None:
            raise RemoteStorageError(f"cannot delete {key}: the object store is not configured or closed")
        try:
            self.requests.add("DELETE")  # a plain DELETE outside _call, sent whatever it answers
            storecompat.delete_one(lambda k: obstore.sign(self._store, "DELETE", k, _SIGNED_URL_LIFETIME), key,
                                   self._request_timeout_s, backoff_s=self._backoff_s, via=self._plain_requests)
        except RemoteStorageError as e:
            raise type(e)(f"cannot delete {key} in {self.shown_url}: {redact(str(e), self._secrets)}") from None
        except obs_errors.BaseError as e:  # signing failed (no credentials to sign with)
            raise RemoteStorageError(f"cannot delete {key} in {self.shown_url}: {_first_line(e, self._secrets)}"
                                     ) from None

    def _multipart_refused(self, e: RemoteStorageError) -> bool:
        """Whether ``e`` says the store offers no multipart upload; switches to single PUTs once if so."""
        if not storecompat.refused(str(e)):
            return False
        if self.abilities.lose("multipart"):
            log.info("Object store %s refuses multipart uploads (%s): uploading every object with a single PUT "
                     "(held in memory) from now on", self.shown_url, storecompat.answer(str(e)) or str(e))
        return True

    def _list(self, prefix: str) -> list[tuple[str, int]]:
        # obstore lists by whole path segments; list the prefix's folder and filter the rest.
        folder = prefix.rpartition("/")[0] or None

        listed = 0

        def run() -> list[tuple[str, int]]:
            nonlocal listed
            out = []
            for batch in obstore.list(self._store, prefix=folder):
                listed += len(batch)
                out.extend((m["path"], m["size"]) for m in batch if m["path"].startswith(prefix))
            return storecompat.without_placeholders(out)

        try:
            return self._call(f"list {prefix!r}", run)
        except FileNotFoundError:
            return []
        finally:  # the store pages the whole folder, filtered or not
            self.requests.listed(listed)

    def _call(self, what: str, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        if self._store is None:
            raise RemoteStorageError(f"cannot {what}: the object store is not configured or closed")
        try:
            return self.requests.call(fn, *args, **kwargs)  # uploads, deletes and HEADs counted there
        except FileNotFoundError:
            raise
        except obs_errors.NotFoundError as e:
            raise FileNotFoundError(_first_line(e, self._secrets)) from None
        except (obs_errors.PermissionDeniedError, obs_errors.UnauthenticatedError, obs_errors.InvalidPathError,
                obs_errors.NotSupportedError, obs_errors.UnknownConfigurationKeyError) as e:
            raise RemoteStorageError(f"cannot {what} in {self.shown_url}: {_first_line(e, self._secrets)}") from None
        except obs_errors.BaseError as e:
            raise _classify(f"cannot {what} in {self.shown_url}", e, self._secrets) from None
        except OSError as e:
            raise error_from_os(e, f"cannot {what} in {self.shown_url}") from None


class _Pulled:
    """An iterable that notes whether anything read it yet."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = chunks
        self.started = False

    def __iter__(self) -> Iterator[bytes]:
        self.started = True
        yield from self._chunks


def _retry_config(configs: Mapping[str, str]) -> dict[str, Any] | None:
    retry: dict[str, Any] = {}
    backoff: dict[str, Any] = {}
    retries = rsm_setting(configs, "retry.max.retries")
    if retries is not None:
        retry["max_retries"] = retries
    timeout = rsm_setting(configs, "retry.timeout.ms")
    if timeout is not None:
        retry["retry_timeout"] = timedelta(milliseconds=timeout)
    for key, option in (("retry.backoff.ms", "init_backoff"), ("retry.backoff.max.ms", "max_backoff")):
        ms = rsm_setting(configs, key)
        if ms is not None:
            backoff[option] = timedelta(milliseconds=ms)
    if backoff:
        backoff.setdefault("init_backoff", timedelta(milliseconds=100))
        backoff.setdefault("max_backoff", max(timedelta(seconds=15), backoff["init_backoff"]))
        backoff.setdefault("base", 2)
        retry["backoff"] = backoff
    return retry or None


def _classify(what: str, e: Exception, secrets: tuple[str, ...] = ()) -> RemoteStorageError:
    """A client error (4xx other than timeout/throttling) will fail again; connection errors, timeouts
    and 5xx answers may not."""
    m = _STATUS_RE.search(str(e))
    status = int(m.group(1)) if m else None
    permanent = status is not None and 400 <= status < 500 and status not in (408, 429)
    cls = RemoteStorageError if permanent else RetriableRemoteStorageError
    return cls(f"{what}: {_first_line(e, secrets)}")


def _first_line(e: BaseException, secrets: tuple[str, ...] = ()) -> str:
    # obstore appends a multi-line Rust debug dump; the first line says what happened.
    return redact(str(e).strip().split("\n", 1)[0], secrets)


def redact(text: str, secrets: tuple[str, ...] = ()) -> str:
    """``text`` without the credential values ``secrets`` and without the credentials a URL in it carries."""
    for secret in secrets:  # longest first, so a secret containing another is cut whole
        text = text.replace(secret, HIDDEN)
    text = _URL_PASSWORD.sub(r"\1" + HIDDEN + "@", text)
    return _URL_SECRET_PARAM.sub(r"\1" + HIDDEN, text)
