"""``tierlog tier status`` and ``tierlog tier reconcile`` against a running broker.

The broker serves both as JSON on its HTTP endpoint (``metrics.port``): ``GET /v1/tier/status`` (per
partition offsets, segments, copy lag, pending local deletion, errors; per topic the tiering state)
and ``/v1/tier/reconcile`` (orphaned objects, missing segments, foreign objects): a GET reports, a
``POST ...?delete=true`` with the admin bearer token also deletes the orphans. This tool calls them
and prints a table (or the JSON itself).
"""

from __future__ import annotations

import io
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

#: How long an endpoint may take to answer (the status of a broker with many partitions is not instant).
HTTP_TIMEOUT_S = 10.0

#: The admin token of ``tierlog tier reconcile --delete`` when --token is not given.
TOKEN_ENV = "TIERLOG_ADMIN_TOKEN"

#: (JSON key, header, kind): "bytes" cells are shown in KiB/MiB/GiB (raw bytes stay in --json).
COLUMNS = (
    ("topic", "TOPIC", None), ("partition", "PART", None), ("state", "STATE", None), ("role", "ROLE", None),
    ("leader", "LEADER", None),
    ("log_start_offset", "LOG-START", None), ("local_log_start_offset", "LOCAL-START", None),
    ("highest_offset_in_remote_storage", "REMOTE-END", None), ("log_end_offset", "LOG-END", None),
    ("local_segments", "LOCAL-SEGS", None), ("local_bytes", "LOCAL-SIZE", "bytes"),
    ("remote_segments", "REMOTE-SEGS", None), ("remote_bytes", "REMOTE-SIZE", "bytes"),
    ("copy_lag_segments", "LAG-SEGS", None), ("copy_lag_bytes", "LAG-SIZE", "bytes"),
    ("pending_local_deletion_segments", "PENDING-DELETE", "pending"), ("last_error", "LAST-ERROR", None),
)


class StatusError(Exception):
    """The broker could not be asked, or refused (one line for the operator)."""


def human_bytes(n: int | float | None) -> str:
    """1023 B, 1.5 KiB, 20.0 MiB, 3.2 GiB ... (binary units, one decimal)."""
    if n is None:
        return "-"
    value = float(n)
    if abs(value) < 1024:
        return f"{int(value)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "PiB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def human_duration(ms: int | float) -> str:
    """How long, roughly: 850 ms, 12 s, 4 min 5 s, 2 h 3 min."""
    if ms < 1000:
        return f"{max(0, int(ms))} ms"
    s = int(ms // 1000)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s" if s % 60 else f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def endpoint_url(cfg: Any) -> str:
    """The status URL of the broker configured by ``cfg`` (a BrokerConfig)."""
    port = cfg["metrics.port"]
    if port is None or port == 0:
        raise StatusError("the broker serves tiering status on metrics.port; set metrics.port (not 0) in its "
                          "configuration, or pass --url http://host:port")
    return f"http://{cfg['metrics.host']}:{port}"


def admin_token(given: str | None, cfg: Any = None) -> str | None:
    """The admin token: ``--token``, else $TIERLOG_ADMIN_TOKEN, else ``metrics.admin.token`` of ``cfg``."""
    if given:
        return given
    if os.environ.get(TOKEN_ENV):
        return os.environ[TOKEN_ENV]
    secret = cfg["metrics.admin.token"] if cfg is not None else None
    return secret.value if secret is not None else None


def _refusal(e: urllib.error.HTTPError, url: str) -> str:
    """One line for a refused request, from the broker's ``{"error": ...}`` answer."""
    try:
        message = json.loads(e.read().decode("utf-8", "replace"))["error"]
    except (ValueError, KeyError, TypeError, OSError):
        message = e.reason
    if e.code == 401:
        return (f"the broker refused the admin token (401): {message}; pass --token, set {TOKEN_ENV}, or give "
                f"-c with the broker's metrics.admin.token")
    if e.code == 403:
        return f"the broker does not allow this (403): {message}"
    if e.code == 404 and "UNKNOWN_TOPIC_OR_PARTITION" in str(message):
        return f"{message}; check the name with `tierlog topic list`"
    return f"the broker answered {e.code} to {url}: {message}"


def _call(base_url: str, path: str, params: dict, method: str = "GET", timeout: float = 10,
          token: str | None = None) -> dict:
    url = base_url.rstrip("/") + path
    query = {k: v for k, v in params.items() if v is not None}
    if query:
        url += "?" + urllib.parse.urlencode(query)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method, headers=headers),
                                    timeout=timeout) as resp:
            return json.load(resp)
    except urllib.error.HTTPError as e:
        raise StatusError(_refusal(e, url)) from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise StatusError(f"cannot reach the broker's status endpoint {url}: {reason}") from None
    except ValueError:
        raise StatusError(f"the broker's answer from {url} is not JSON; is --url the broker's metrics.port?") \
            from None


def fetch_cleaner_status(base_url: str, topic: str | None = None, timeout: float = 10) -> dict:
    """The log cleaner's state of the compacted partitions the broker hosts (``/v1/cleaner/status``)."""
    return _call(base_url, "/v1/cleaner/status", {"topic": topic}, timeout=timeout)


def fetch_status(base_url: str, topic: str | None = None, timeout: float = HTTP_TIMEOUT_S,
                 summary: str | None = None) -> dict:
    """The broker's ``/v1/tier/status``; ``summary="topics"``: one row per topic led there (``topic_totals``)
    instead of the partition rows."""
    return _call(base_url, "/v1/tier/status", {"topic": topic, "summary": summary}, timeout=timeout)


# ------------------------------------------------------------------------------------ the whole cluster


#: The broker settings that say where a broker serves its HTTP endpoint (read with DescribeConfigs).
ENDPOINT_SETTINGS = ("metrics.host", "metrics.port", "metrics.ssl.enable")


async def cluster_endpoints(admin: Any) -> list[dict]:
    """Every live broker (DescribeCluster) with the URL of its HTTP endpoint, from its own ``metrics.host``,
    ``metrics.port`` and ``metrics.ssl.enable`` (DescribeConfigs of the broker, answered by that broker):
    ``{"node_id", "url"}``, or ``{"node_id", "url": None, "error"}`` when it serves none the command can
    find (metrics.port unset, or 0: a port picked at start-up that no setting names)."""
    from tierlog import errors

    cluster = await admin.describe_cluster()
    resources = [("broker", str(b.node_id)) for b in cluster.brokers]
    try:
        configs = await admin.describe_configs(resources, config_names=ENDPOINT_SETTINGS)
        failed: dict = {}
    except errors.KafkaError as e:  # a broker that died since DescribeCluster: the others are still asked
        configs, failed = getattr(e, "results", {}), getattr(e, "errors", {})
    out = []
    for b, resource in zip(cluster.brokers, resources, strict=True):
        entry = {"node_id": b.node_id, "url": None}
        if resource not in configs:
            entry["error"] = f"cannot read its settings: {failed.get(resource, 'no answer')}"
        else:
            values = {name: e.value for name, e in configs[resource].items()}
            port = values.get("metrics.port")
            if not port or port == "0":
                entry["error"] = ("serves no HTTP endpoint (metrics.port is not set)" if not port else
                                  "its HTTP endpoint has a port picked at start-up (metrics.port=0): ask it with "
                                  "--url http://host:port")
            else:
                host = values.get("metrics.host") or b.host
                host = b.host if host in ("0.0.0.0", "::", "") else host  # a wildcard: the broker's own address
                scheme = "https" if str(values.get("metrics.ssl.enable")).lower() == "true" else "http"
                entry["url"] = f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"
        out.append(entry)
    return out


def cluster_status(endpoints: list[dict], topic: str | None = None, timeout: float = HTTP_TIMEOUT_S,
                   summary: str | None = None) -> dict:
    """Every broker's status asked at once and merged: ``brokers`` (each broker's own lines: state, log dirs,
    retention check, or why it could not be asked), ``topics`` (the tiering state of each topic, the same
    cluster metadata on every broker: taken once; what a disablement has left to delete summed over the
    brokers, each counting the partitions it leads) and ``partitions`` (every broker's rows, each with
    ``broker``: leaders and followers of a partition side by side). With ``summary="topics"``,
    ``topic_totals`` (every broker's rows of the topics it leads partitions of, each with ``broker``)
    instead of ``partitions``."""
    from concurrent.futures import ThreadPoolExecutor

    def ask(endpoint: dict) -> dict:
        if endpoint["url"] is None:
            return {"node_id": endpoint["node_id"], "url": None, "error": endpoint["error"]}
        try:
            asked = fetch_status(endpoint["url"], topic, timeout, **({"summary": summary} if summary else {}))
            return {**asked, "url": endpoint["url"], "error": None}
        except StatusError as e:
            return {"node_id": endpoint["node_id"], "url": endpoint["url"], "error": str(e)}

    with ThreadPoolExecutor(max_workers=max(1, min(16, len(endpoints)))) as pool:
        answers = list(pool.map(ask, endpoints))
    topics: dict[str, dict] = {}
    partitions = []
    totals = []
    for a in answers:
        for t in a.pop("topics", None) or []:
            merged = topics.get(t["topic"])
            if merged is None:
                topics[t["topic"]] = dict(t)
            elif merged.get("remote_segments_to_delete") is not None:
                # each broker counts what is left of the partitions it leads: the topic's is their sum
                merged["remote_segments_to_delete"] += t.get("remote_segments_to_delete") or 0
                merged["remote_bytes_to_delete"] += t.get("remote_bytes_to_delete") or 0
                merged["last_error"] = merged.get("last_error") or t.get("last_error")
        partitions += [{**row, "broker": a["node_id"]} for row in a.pop("partitions", None) or []]
        totals += [{**row, "broker": a["node_id"]} for row in a.pop("topic_totals", None) or []]
    partitions.sort(key=lambda r: (r["topic"], r["partition"], r["role"] != "leader", r["broker"]))
    out = {"brokers": answers, "topics": [topics[n] for n in sorted(topics)], "partitions": partitions}
    if summary == "topics":
        out["topic_totals"] = sorted(totals, key=lambda r: (r["topic"], r["broker"]))
    return out


def reconcile(base_url: str, delete: bool = False, timeout: float = 300, token: str | None = None) -> dict:
    """The reconciler's report (a GET, which changes nothing); with ``delete`` a POST carrying the admin
    token, which also deletes the orphans."""
    if not delete:
        return _call(base_url, "/v1/tier/reconcile", {}, "GET", timeout)
    return _call(base_url, "/v1/tier/reconcile", {"delete": "true"}, "POST", timeout, token)


def format_reconcile(report: dict) -> str:
    if "error" in report:
        return report["error"]
    lines = [f"{report['objects']} remote object(s) checked"]
    orphans = report["orphans"]
    size = human_bytes(sum(o["bytes"] for o in orphans))
    if report["orphans_deleted"]:
        lines.append(f"{len(orphans)} orphaned segment(s) ({size}) not referenced by any metadata, "
                     f"{report['orphans_deleted']} deleted")
    else:
        lines.append(f"{len(orphans)} orphaned segment(s) ({size}) not referenced by any metadata")
    for o in orphans:
        kept = "" if o.get("deletable", True) else " (kept: ask the partition's leader to delete it)"
        lines.append(f"  orphan {o['topic']}-{o['partition']} start {o['start_offset']} segment {o['segment_id']}"
                     f"{kept}: {', '.join(o['keys'])}")
    lines.append(f"{len(report['missing'])} segment(s) whose objects are missing")
    for m in report["missing"]:
        lines.append(f"  missing {m['topic']}-{m['partition']} offsets {m['start_offset']}-{m['end_offset']} "
                     f"segment {m['segment_id']}: {', '.join(m['missing_keys'])}")
    foreign = report.get("foreign", [])
    if foreign:
        count = sum(f["objects"] for f in foreign)
        lines.append(f"{count} foreign object(s) ({human_bytes(sum(f['bytes'] for f in foreign))}) of other "
                     f"clusters or of topic ids this cluster never had: never deleted")
        for f in foreign:
            where = f"cluster {f['cluster_id']} " if f.get("cluster_id") else ""
            lines.append(f"  foreign {where}topic {f['topic']} (id {f['topic_id']}): {f['objects']} object(s), "
                         f"{human_bytes(f['bytes'])}, {f['reason']}")
    for key in report["unrecognized_keys"]:
        lines.append(f"  not a tierlog segment object (left alone): {key}")
    if report["not_ready"]:
        lines.append(f"skipped, metadata still loading: {', '.join(report['not_ready'])}")
    return "\n".join(lines)


def _cell(row: dict, key: str, kind: str | None) -> str:
    value = row.get(key)
    if kind == "pending":
        if value is None:
            return "-"
        return f"{value} ({human_bytes(row.get('pending_local_deletion_bytes'))})" if value else "0"
    if value is None:
        return "-" if key != "last_error" else ""
    if kind == "bytes":
        return human_bytes(value)
    return str(value)


def _render(rows: list[list[str]], headers: list[str]) -> list[str]:
    """An aligned plain-text table (rich), as wide as its content."""
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 2, 0, 0), header_style="")
    for h in headers:
        table.add_column(h, no_wrap=True, overflow="ignore")
    for row in rows:
        table.add_row(*row)
    out = io.StringIO()
    Console(file=out, width=100_000, color_system=None, highlight=False, markup=False, emoji=False,
            force_terminal=False).print(table)
    return [line.rstrip() for line in out.getvalue().splitlines()]


def format_log_dirs(status: dict) -> list[str]:
    """One line per offline log dir (and per log offline in an online dir): what failed, which partitions."""
    lines = []
    for d in status.get("log_dirs", []):
        parts = d.get("offline_partitions") or []
        shown = ", ".join(parts[:10]) + (f" and {len(parts) - 10} more" if len(parts) > 10 else "")
        if not d["online"]:
            lines.append(f"log dir {d['log_dir']} OFFLINE: {d['error']} ({len(parts)} partition(s) offline"
                         + (f": {shown})" if parts else ")"))
        elif parts:
            lines.append(f"log dir {d['log_dir']}: {len(parts)} log(s) offline: {shown}")
    return lines


def format_table(status: dict, topic: str | None = None) -> str:
    """One broker's status (``--url``): its offline log dirs, then its tiered partitions."""
    dirs = format_log_dirs(status)
    table = _format_tiering(status, topic)
    return "\n".join([*dirs, *([""] if dirs else []), table]) if dirs else table


def _format_tiering(status: dict, topic: str | None) -> str:
    rows = [r for r in status.get("partitions", []) if topic is None or r["topic"] == topic]
    if not status.get("remote_storage_enabled"):
        return "tiered storage is off on this broker (remote.log.storage.system.enable=false)"
    lines = [_broker_line(status)]
    if not rows and not status.get("topics"):
        lines.append("no tiered partitions" + (f" for topic {topic}" if topic else ""))
        return "\n".join(lines + _store_requests_line(status))
    lines += _render([[_cell(r, k, kind) for k, _, kind in COLUMNS] for r in rows], [h for _, h, _ in COLUMNS])
    topics = [t for t in status.get("topics", []) if topic is None or t["topic"] == topic]
    lines += _notes(topics, rows, lambda r: f"{r['topic']}-{r['partition']}", lambda r: status)
    return "\n".join(lines + _store_requests_line(status))


def format_cluster(merged: dict, topic: str | None = None) -> str:
    """The merged status of every broker (:func:`cluster_status`): a line per broker (its state, or why it
    could not be asked, and its offline log dirs), then every broker's partitions in one table (BROKER and
    ROLE tell a partition's leader and followers apart)."""
    lines = []
    by_id = {b["node_id"]: b for b in merged["brokers"]}
    for b in merged["brokers"]:
        if b["error"]:
            lines.append(f"broker {b['node_id']}: {b['error']}")
        elif not b.get("remote_storage_enabled"):
            lines.append(f"broker {b['node_id']}: tiered storage is off (remote.log.storage.system.enable=false)")
        else:
            lines.append(_broker_line(b))
        lines += [f"broker {b['node_id']}: {line}" for line in format_log_dirs(b)]
    rows = merged["partitions"]
    if not rows and not merged["topics"]:
        lines.append("no tiered partitions" + (f" for topic {topic}" if topic else ""))
        return "\n".join(lines)
    columns = [*COLUMNS[:2], ("broker", "BROKER", None), *COLUMNS[2:]]
    lines += _render([[_cell(r, k, kind) for k, _, kind in columns] for r in rows], [h for _, h, _ in columns])
    lines += _notes(merged["topics"], rows, lambda r: f"{r['topic']}-{r['partition']} on broker {r['broker']}",
                    lambda r: by_id[r["broker"]])
    for b in merged["brokers"]:
        lines += [f"broker {b['node_id']}: {line}" for line in _store_requests_line(b)]
    return "\n".join(lines)


def _notes(topics: list[dict], rows: list[dict], where, status_of) -> list[str]:
    """The lines under the table: each topic's tiering state, then what the rows need explained (failing
    tasks, uploads to clean up, metadata still loading, segments waiting for local retention). ``where(row)``
    names a row's partition, ``status_of(row)`` is the status of the broker it came from."""
    lines = [""] if topics else []
    for t in topics:
        line = f"topic {t['topic']}: tiering {t['state']} (policy {t['policy']}, epoch {t['epoch']})"
        if t["state"] == "DISABLING":
            line += (f", {t['remote_segments_to_delete']} remote segment(s) / "
                     f"{human_bytes(t['remote_bytes_to_delete'])} left to delete")
        if t.get("last_error"):
            line += f"; last error: {t['last_error']}"
        lines.append(line)
    for r in rows:
        if r.get("last_error") and r.get("last_error_ms", -1) > 0:
            since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(r["last_error_ms"] / 1000))
            lines.append(f"{where(r)}: failing since {since} (first error shown; clears once every task works "
                         f"again)")
    unclean = [f"{where(r)} ({r['remote_segments_to_clean']})" for r in rows if r.get("remote_segments_to_clean")]
    if unclean:
        lines.append(f"failed uploads or deletions whose remote objects are still to delete (retried every run): "
                     f"{', '.join(unclean)}")
    waiting = [where(r) for r in rows if not r.get("ready", True)]
    if waiting:
        lines.append(f"remote metadata still loading for: {', '.join(waiting)} (remote figures shown once loaded)")
    pending: dict[int, list[dict]] = {}  # by the broker (its status) that holds the segments
    for r in rows:
        if r.get("pending_local_deletion_segments"):
            pending.setdefault(id(status_of(r)), []).append(r)
    for group in pending.values():
        status = status_of(group[0])
        if "next_retention_check_ms" not in status:
            continue
        count = sum(r["pending_local_deletion_segments"] for r in group)
        size = human_bytes(sum(r.get("pending_local_deletion_bytes") or 0 for r in group))
        on = f" on broker {group[0]['broker']}" if "broker" in group[0] else ""
        lines.append(f"{count} local segment(s) ({size}){on} copied and past local retention, deleted by the next "
                     f"retention check{_next_check(status)}")
    return lines


def _store_requests_line(status: dict) -> list[str]:
    """What this broker asked the remote store since it started, by operation (what the store bills)."""
    counts = status.get("store_requests")
    if not counts:
        return []
    used = [f"{op} {c['requests']}" + (f" ({human_bytes(c['bytes'])})" if c["bytes"] else "")
            for op, c in counts.items() if c["requests"]]
    return [f"remote store requests since start: {', '.join(used) if used else 'none'}"]


def _next_check(status: dict) -> str:
    due = status.get("next_retention_check_ms")
    if due is None:
        return ""
    wait = due - status.get("now_ms", time.time() * 1000)
    interval = human_duration(status.get("retention_check_interval_ms", 0))
    return (f" (due now; every {interval}, log.retention.check.interval.ms)" if wait <= 0
            else f" in {human_duration(wait)} (every {interval}, log.retention.check.interval.ms)")


def _broker_line(status: dict) -> str:
    """The broker's state: "ready", or what is still loading (then remote figures show "-")."""
    line = f"broker {status.get('node_id')}: "
    if status.get("state") == "loading":
        return line + f"loading ({status.get('loading')})"
    line += "ready"
    if "next_retention_check_ms" in status:
        line += f"; next local retention check{_next_check(status)}"
    return line
