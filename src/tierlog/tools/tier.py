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


def fetch_status(base_url: str, topic: str | None = None, timeout: float = 10) -> dict:
    return _call(base_url, "/v1/tier/status", {"topic": topic}, timeout=timeout)


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
    if topics:
        lines.append("")
        for t in topics:
            line = f"topic {t['topic']}: tiering {t['state']} (policy {t['policy']}, epoch {t['epoch']})"
            if t["state"] == "DISABLING":
                line += (f", {t['remote_segments_to_delete']} remote segment(s) / "
                         f"{human_bytes(t['remote_bytes_to_delete'])} left to delete")
            if t.get("last_error"):
                line += f"; last error: {t['last_error']}"
            lines.append(line)
    failing = [r for r in rows if r.get("last_error") and r.get("last_error_ms", -1) > 0]
    for r in failing:
        since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(r["last_error_ms"] / 1000))
        lines.append(f"{r['topic']}-{r['partition']}: failing since {since} (first error shown; clears once "
                     f"every task works again)")
    unclean = [f"{r['topic']}-{r['partition']} ({r['remote_segments_to_clean']})" for r in rows
               if r.get("remote_segments_to_clean")]
    if unclean:
        lines.append(f"failed uploads or deletions whose remote objects are still to delete (retried every run): "
                     f"{', '.join(unclean)}")
    waiting = [f"{r['topic']}-{r['partition']}" for r in rows if not r.get("ready", True)]
    if waiting:
        lines.append(f"remote metadata still loading for: {', '.join(waiting)} (remote figures shown once loaded)")
    pending = [r for r in rows if r.get("pending_local_deletion_segments")]
    if pending and "next_retention_check_ms" in status:
        count = sum(r["pending_local_deletion_segments"] for r in pending)
        size = human_bytes(sum(r.get("pending_local_deletion_bytes") or 0 for r in pending))
        lines.append(f"{count} local segment(s) ({size}) copied and past local retention, deleted by the next "
                     f"retention check{_next_check(status)}")
    return "\n".join(lines + _store_requests_line(status))


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
