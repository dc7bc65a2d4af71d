"""What S3-compatible stores lack, and the plain requests that stand in for it.

Real stores implement different parts of S3: S3Proxy refuses the multi-object delete (``POST ?delete``)
because of the checksum header obstore sends with it, some gateways have no multi-object delete or no
multipart upload at all, and stores backed by a file system list their folders as objects. The
objectstore backend asks this module whether an answer means "not offered here" (:func:`refused`),
deletes one object with a plain ``DELETE`` signed by obstore (:func:`delete_one`), and drops folder
placeholders from listings (:func:`without_placeholders`).
"""

from __future__ import annotations

import re
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tierlog.tiered.rsm.api import RemoteStorageError, RetriableRemoteStorageError

_STATUS = re.compile(r"status code: (\d{3})")
_CODE = re.compile(r"<Code>([^<]+)</Code>")
# Error codes a store gives a request (or one of its headers) it does not implement, rather than a
# request that is wrong: a checksum header it does not know, a missing Content-MD5 it insists on.
_REFUSAL_CODES = frozenset({"NotImplemented", "InvalidRequest", "InvalidArgument", "MissingContentMD5",
                            "InvalidDigest", "BadDigest", "MalformedXML", "MethodNotAllowed"})


@dataclass
class Abilities:
    """What one store (an endpoint's bucket) offers, as found on first use; shared by every manager of
    the process on that store, so each lack is found, and said, once."""

    bulk_delete: bool = True
    multipart: bool = True

    def lose(self, ability: str) -> bool:
        """Mark ``ability`` missing; True for the one caller that changed it (it says so in the log)."""
        with _lock:
            had = getattr(self, ability)
            setattr(self, ability, False)
            return had


_lock = threading.Lock()
_known: dict[tuple[str, ...], Abilities] = {}


def abilities_of(store_id: tuple[str, ...]) -> Abilities:
    with _lock:
        return _known.setdefault(store_id, Abilities())


def status_of(message: str) -> int | None:
    m = _STATUS.search(message)
    return int(m.group(1)) if m else None


def answer(message: str) -> str:
    """The status and S3 error code in a store's error answer (``501 NotImplemented``), for a log line."""
    status, code = status_of(message), _CODE.search(message)
    return " ".join(part for part in (str(status) if status else "", code.group(1) if code else "") if part)


def refused(message: str) -> bool:
    """Whether a store's error answer (obstore's first line, with the status and the XML body) says the
    request is not offered there: 501 or 405, or a 400 whose code names a missing ability."""
    status = status_of(message)
    code = _CODE.search(message)
    if status in (501, 405) or (code and code.group(1) == "NotImplemented"):
        return True
    return status == 400 and code is not None and code.group(1) in _REFUSAL_CODES


def can_sign(store: Any) -> bool:
    return type(store).__name__ in ("S3Store", "GCSStore", "AzureStore")


def opener(client_options: dict[str, str]) -> urllib.request.OpenerDirector:
    """What sends the plain requests, with the HTTP client options of obstore that bear on them: its
    ``proxy_url`` and ``allow_invalid_certificates``."""
    handlers: list[urllib.request.BaseHandler] = []
    proxy = client_options.get("proxy_url")
    if proxy:
        handlers.append(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
    if str(client_options.get("allow_invalid_certificates", "")).strip().lower() in ("true", "1", "yes"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


def delete_one(sign: Callable[[str], str], key: str, timeout_s: float, attempts: int = 3, backoff_s: float = 0.1,
               via: urllib.request.OpenerDirector | None = None) -> None:
    """Delete ``key`` with one plain ``DELETE`` request to the URL ``sign(key)`` gives (obstore signs it
    with the store's credentials; it sends even a single delete as a multi-object one), sent ``via`` an
    :func:`opener`. A missing
    object is fine. Throttling,
    5xx answers and connection errors are tried ``attempts`` times, then raise RetriableRemoteStorageError;
    other answers raise RemoteStorageError. Messages name the key, never the signed URL."""
    last: Exception | None = None
    for attempt in range(attempts):
        if attempt:
            time.sleep(backoff_s * 2 ** (attempt - 1))
        request = urllib.request.Request(sign(key), method="DELETE")
        try:
            with (via or urllib.request.build_opener()).open(request, timeout=timeout_s) as answer:
                answer.read()
            return
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return
            body = _body(e)
            if e.code < 500 and e.code not in (408, 429):
                raise RemoteStorageError(f"DELETE {key} answered {e.code} {e.reason}{body}") from None
            last = RetriableRemoteStorageError(f"DELETE {key} answered {e.code} {e.reason}{body}")
        except (OSError, urllib.error.URLError) as e:
            reason = getattr(e, "reason", None) or e
            last = RetriableRemoteStorageError(f"DELETE {key} failed: {type(reason).__name__}: {reason}")
    assert last is not None
    raise last


def _body(e: urllib.error.HTTPError) -> str:
    try:
        text = e.read(2000).decode(errors="replace")
    except OSError:
        return ""
    code = _CODE.search(text)
    return f" ({code.group(1)})" if code else ""


def without_placeholders(entries: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """Listed (key, size) pairs without folder placeholders: a store backed by a file system (S3Proxy's
    filesystem backend, SeaweedFS's filer) lists each folder as an object ``a/b/``, which obstore hands on
    as ``a/b``. A key that is the folder of another listed key is such a placeholder; tierlog's layout
    never makes one key the folder of another."""
    entries = list(entries)
    folders = set()
    for key, _ in entries:
        parts = key.split("/")
        folders.update("/".join(parts[:i]) for i in range(1, len(parts)))
    return [(key, size) for key, size in entries if key not in folders]
