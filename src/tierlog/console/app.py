"""The console's HTTP app: its JSON API and its assets, served by the broker's HTTP server
(:class:`~tierlog.server.http.http_endpoint.HttpEndpoint`) with the same rules: it binds the loopback
address unless told otherwise, a GET never changes anything, and every action is a POST refused (403)
unless the console was started with an admin token and answered 401 without ``Authorization: Bearer
<token>``. Parameters travel in the query string; a bad one is 400, a Kafka error is its code's name and
the broker's message, a cluster that cannot be reached is 503 saying which address was tried.

Routes: ``GET /`` (the page), ``/static/...`` (its scripts, styles and vendored libraries, from the
package), ``GET /api/session`` (whether actions are on), ``/api/cluster``, ``/api/topics``,
``/api/topic?topic=T``, ``/api/partition?topic=T&partition=P``, ``/api/groups``, ``/api/group?group=G``;
``POST /api/topic/create?topic=T[&partitions=N][&replication_factor=N][&configs=k=v,k=v]`` and
``POST /api/topic/delete?topic=T``; ``POST /api/topic/configs?topic=T[&set=k=v,k=v][&delete=k,k]``,
``GET`` (the preview, a dry run) and ``POST /api/group/reset-offsets?group=G&to=earliest|latest|offset|timestamp
[&value=N][&topic=T]``, ``POST /api/topic/disable-tiering?topic=T&delete_remote=true|false``. The message browser:
``GET /api/records?topic=T&partition=P[&offset=O | &timestamp=MS][&limit=N][&max_bytes=B]
[&isolation_level=read_committed|read_uncommitted]``; the metrics charts: ``GET /api/metrics``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from tierlog import errors
from tierlog.console import browse
from tierlog.console.snapshot import MAX_LIMIT, page_of
from tierlog.console.views import ConsoleViews
from tierlog.metrics import MetricsRegistry
from tierlog.server.http.http_endpoint import Body, HttpEndpoint, HttpError, Route, boolean, one_of, topic_name

log = logging.getLogger(__name__)

_TYPES = {".html": "text/html; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
          ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
          ".json": "application/json", ".svg": "image/svg+xml"}


def _assets() -> dict[str, Body]:
    """Every file under ``static/`` (package data), by the path it is served at."""
    root = resources.files("tierlog.console") / "static"
    out: dict[str, Body] = {}

    def walk(folder, prefix: str) -> None:
        for entry in folder.iterdir():
            if entry.is_dir():
                walk(entry, f"{prefix}{entry.name}/")
            else:
                suffix = entry.name[entry.name.rfind("."):] if "." in entry.name else ""
                if suffix in _TYPES:
                    out[f"/static/{prefix}{entry.name}"] = Body(entry.read_bytes(), _TYPES[suffix])
    walk(root, "")
    return out


def _int(low: int, high: int) -> Callable[[str], int]:
    def parse(value: str) -> int:
        if not value.lstrip("-").isdigit() or not low <= int(value) <= high:
            raise ValueError(f"must be a whole number from {low} to {high}")
        return int(value)
    return parse


def _group_id(value: str) -> str:
    if not value or len(value) > 255:
        raise ValueError("must be a group id of 1 to 255 characters")
    return value


def _configs(value: str) -> dict[str, str]:
    out = {}
    for item in filter(None, (v.strip() for v in value.split(","))):
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{item[:60]!r} is not KEY=VALUE (give settings as k=v,k=v)")
        out[key.strip()] = val.strip()
    return out


def _names(value: str) -> list[str]:
    return list(dict.fromkeys(filter(None, (v.strip() for v in value.split(",")))))


#: Where kafka-consumer-groups --reset-offsets can move a group (the ones the console offers).
RESET_TO = ("earliest", "latest", "offset", "timestamp")


def _required(name: str, value: Any) -> Any:
    if value is None:
        raise HttpError(400, f"parameter {name} is required")
    return value


def _kafka_answer(views: ConsoleViews, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """A route handler that turns the cluster's failures into answers a page can show."""

    @functools.wraps(fn)
    async def handler(**params: Any) -> Any:
        try:
            return await fn(**params)
        except (errors.UnknownTopicOrPartitionError, errors.GroupIdNotFoundError) as e:
            raise HttpError(404, f"{e.name}: {e.message}") from None
        except errors.KafkaError as e:
            if e.retriable or e.name in ("REQUEST_TIMED_OUT", "NETWORK_EXCEPTION"):
                raise HttpError(503, f"cannot reach the cluster at {views.bootstrap}: {e.name}: {e.message}") \
                    from None
            raise HttpError(400, f"{e.name}: {e.message}") from None
    return handler


def _text(value: str) -> str:
    if len(value) > 249:
        raise ValueError("must be at most 249 characters")
    return value


def _column(value: str) -> str:
    if not value.replace("_", "").isalpha() or len(value) > 40:
        raise ValueError("must be a column name")
    return value


#: A long list's page: ?offset=N&limit=N&filter=TEXT&sort=COLUMN&desc=true (docs/console.md "Long lists").
_LIST_PARAMS = {"offset": _int(0, 2**31 - 1), "limit": _int(1, MAX_LIMIT), "filter": _text, "sort": _column,
                "desc": boolean}


def _list_page(picture: dict, what: str, key: str, page: dict) -> dict:
    """One page of the picture's ``what`` rows, with the counts and the picture's time."""
    try:
        cut = page_of(picture[what], key, **page)
    except ValueError as e:
        raise HttpError(400, f"parameter sort: {e}") from None
    return {what: cut.pop("rows"), **cut, "brokers_unanswered": picture["brokers_unanswered"],
            "at_ms": picture["at_ms"], "took_ms": picture["took_ms"]}


def console_endpoint(views: ConsoleViews, admin_token: str | None = None) -> HttpEndpoint:
    """The console's server (not started): actions are on only when ``admin_token`` is given."""
    wrap = functools.partial(_kafka_answer, views)
    assets = _assets()
    index = assets.pop("/static/index.html")

    async def session() -> dict:
        return {"bootstrap": views.bootstrap, "actions": bool(admin_token)}

    async def topic(topic: str | None = None) -> dict:
        return await views.topic(_required("topic", topic))

    async def partition(topic: str | None = None, partition: int | None = None) -> dict:
        return await views.partition(_required("topic", topic), _required("partition", partition))

    async def group(group: str | None = None) -> dict:
        return await views.group(_required("group", group))

    async def delete(topic: str | None = None) -> dict:
        return await views.delete_topic(_required("topic", topic))

    async def create(topic: str | None = None, partitions: int = -1, replication_factor: int = -1,
                     configs: dict[str, str] | None = None) -> dict:
        return await views.create_topic(_required("topic", topic), partitions, replication_factor, configs or {})

    # The long lists come from one picture of the cluster shared by every tab (console/snapshot.py), a
    # page of rows at a time.
    async def shared_cluster() -> dict:
        return (await views.snapshot.get())["cluster"]

    async def shared_topics(**page: Any) -> dict:
        return _list_page(await views.snapshot.get(), "topics", "topic", page)

    async def shared_groups(**page: Any) -> dict:
        return _list_page(await views.snapshot.get(), "groups", "group", page)

    async def alter_configs(topic: str | None = None, set: dict[str, str] | None = None,  # noqa: A002
                            delete: list[str] | None = None) -> dict:
        return await views.alter_topic_configs(_required("topic", topic), set or {}, delete or [])

    def reset(execute: bool) -> Callable[..., Awaitable[dict]]:
        async def handler(group: str | None = None, to: str | None = None, value: int | None = None,
                          topic: str | None = None) -> dict:
            kind = _required("to", to)
            if kind in ("offset", "timestamp") and value is None:
                raise HttpError(400, f"parameter value is required with to={kind}")
            return await views.reset_group_offsets(_required("group", group), topic, (kind, value or 0), execute)
        return handler

    async def disable_tiering(topic: str | None = None, delete_remote: bool | None = None) -> dict:
        return await views.disable_tiering(_required("topic", topic), _required("delete_remote", delete_remote))

    reset_params = {"group": _group_id, "to": one_of(*RESET_TO), "value": _int(0, 2**63 - 1), "topic": topic_name}
    routes: dict[tuple[str, str], Route] = {
        # ?poll=MS: how often the page asks again (read by the page's script)
        ("GET", "/"): Route(lambda poll=None: index, {"poll": _int(100, 3_600_000)}),
        **{("GET", path): Route(lambda body=body: body) for path, body in assets.items()},
        ("GET", "/api/session"): Route(session),
        ("GET", "/api/cluster"): Route(wrap(shared_cluster)),
        ("GET", "/api/topics"): Route(wrap(shared_topics), _LIST_PARAMS),
        ("GET", "/api/topic"): Route(wrap(topic), {"topic": topic_name}),
        ("GET", "/api/partition"): Route(wrap(partition), {"topic": topic_name, "partition": _int(0, 2**31 - 1)}),
        ("GET", "/api/groups"): Route(wrap(shared_groups), _LIST_PARAMS),
        ("GET", "/api/group"): Route(wrap(group), {"group": _group_id}),
        ("POST", "/api/topic/create"): Route(wrap(create), {"topic": topic_name, "partitions": _int(-1, 100_000),
                                                            "replication_factor": _int(-1, 32767),
                                                            "configs": _configs}, admin=True),
        ("POST", "/api/topic/delete"): Route(wrap(delete), {"topic": topic_name}, admin=True),
        ("POST", "/api/topic/configs"): Route(wrap(alter_configs), {"topic": topic_name, "set": _configs,
                                                                     "delete": _names}, admin=True),
        # the preview (kafka-consumer-groups --dry-run) changes nothing: a GET, no token needed
        ("GET", "/api/group/reset-offsets"): Route(wrap(reset(False)), reset_params),
        ("POST", "/api/group/reset-offsets"): Route(wrap(reset(True)), reset_params, admin=True),
        ("POST", "/api/topic/disable-tiering"): Route(wrap(disable_tiering), {"topic": topic_name,
                                                                              "delete_remote": boolean}, admin=True),
    }
    routes.update(_browse_routes(views, wrap))
    return HttpEndpoint(MetricsRegistry(), routes, admin_enabled=bool(admin_token), admin_token=admin_token,
                        admin_off="this console is read-only; start tierlog console with --token (or "
                                  "$TIERLOG_ADMIN_TOKEN) to allow actions",
                        token_source="the --token tierlog console was started with")


def _browse_routes(views: ConsoleViews, wrap: Callable) -> dict[tuple[str, str], Route]:
    """The message browser (``GET /api/records``) and the metrics charts (``GET /api/metrics``)."""

    async def records(topic: str | None = None, partition: int | None = None, offset: int | None = None,
                      timestamp: int | None = None, limit: int = browse.PAGE_RECORDS,
                      max_bytes: int = browse.PAGE_BYTES, isolation_level: str = "read_committed") -> dict:
        if offset is not None and timestamp is not None:
            raise HttpError(400, "give offset or timestamp, not both")
        return await views.records(_required("topic", topic), _required("partition", partition), offset=offset,
                                   timestamp=timestamp, limit=limit, max_bytes=max_bytes,
                                   isolation_level=isolation_level)

    return {
        ("GET", "/api/records"): Route(wrap(records), {
            "topic": topic_name, "partition": _int(0, 2**31 - 1), "offset": _int(0, 2**63 - 1),
            "timestamp": _int(0, 2**63 - 1), "limit": _int(1, browse.MAX_RECORDS),
            "max_bytes": _int(1, browse.MAX_BYTES), "isolation_level": one_of(*browse.ISOLATION_LEVELS)}),
        ("GET", "/api/metrics"): Route(wrap(views.metrics)),
    }
