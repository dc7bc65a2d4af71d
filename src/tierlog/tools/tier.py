"""``tierlog tier status`` and ``tierlog tier reconcile`` against a running broker.

The broker serves both as JSON on its metrics endpoint (``metrics.port``): ``/v1/tier/status`` (per
partition offsets, segments, copy lag, errors; per topic the tiering state) and
``/v1/tier/reconcile`` (orphaned objects and missing segments; ``delete=true`` removes the orphans).
This tool calls them and prints a table (or the JSON itself).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

COLUMNS = (
    ("topic", "TOPIC"), ("partition", "PART"), ("log_start_offset", "LOG-START"),
    ("local_log_start_offset", "LOCAL-START"), ("highest_offset_in_remote_storage", "REMOTE-END"),
    ("log_end_offset", "LOG-END"), ("local_segments", "LOCAL-SEGS"), ("local_bytes", "LOCAL-BYTES"),
    ("remote_segments", "REMOTE-SEGS"), ("remote_bytes", "REMOTE-BYTES"), ("copy_lag_segments", "LAG-SEGS"),
    ("copy_lag_bytes", "LAG-BYTES"), ("last_error", "LAST-ERROR"),
)


class StatusError(Exception):
    """The broker could not be asked (one line for the operator)."""


def endpoint_url(cfg: Any) -> str:
    """The status URL of the broker configured by ``cfg`` (a BrokerConfig)."""
    port = cfg["metrics.port"]
    if port is None or port == 0:
        raise StatusError("the broker serves tiering status on metrics.port; set metrics.port (not 0) in its "
                          "configuration, or pass --url http://host:port")
    return f"http://{cfg['metrics.host']}:{port}"


def _call(base_url: str, path: str, params: dict, method: str = "GET", timeout: float = 10) -> dict:
    url = base_url.rstrip("/") + path
    query = {k: v for k, v in params.items() if v is not None}
    if query:
        url += "?" + urllib.parse.urlencode(query)
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=timeout) as resp:
            return json.load(resp)
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise StatusError(f"cannot reach the broker's status endpoint {url}: {reason}") from None


def fetch_status(base_url: str, topic: str | None = None, timeout: float = 10) -> dict:
    return _call(base_url, "/v1/tier/status", {"topic": topic}, timeout=timeout)


def reconcile(base_url: str, delete: bool = False, timeout: float = 300) -> dict:
    return _call(base_url, "/v1/tier/reconcile", {"delete": "true" if delete else "false"}, "POST", timeout)


def format_reconcile(report: dict) -> str:
    if "error" in report:
        return report["error"]
    lines = [f"{report['objects']} remote object(s) checked"]
    orphans = report["orphans"]
    verb = "deleted" if report["orphans_deleted"] else "not referenced by any metadata"
    lines.append(f"{len(orphans)} orphaned segment(s) ({sum(o['bytes'] for o in orphans)} bytes) {verb}")
    for o in orphans:
        lines.append(f"  orphan {o['topic']}-{o['partition']} start {o['start_offset']} segment {o['segment_id']}: "
                     f"{', '.join(o['keys'])}")
    lines.append(f"{len(report['missing'])} segment(s) whose objects are missing")
    for m in report["missing"]:
        lines.append(f"  missing {m['topic']}-{m['partition']} offsets {m['start_offset']}-{m['end_offset']} "
                     f"segment {m['segment_id']}: {', '.join(m['missing_keys'])}")
    for key in report["unrecognized_keys"]:
        lines.append(f"  not a tierlog segment object (left alone): {key}")
    if report["not_ready"]:
        lines.append(f"skipped, metadata still loading: {', '.join(report['not_ready'])}")
    return "\n".join(lines)


def _cell(row: dict, key: str) -> str:
    value = row.get(key)
    if value is None:
        return "-" if key != "last_error" else ""
    return str(value)


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
    if not rows and not status.get("topics"):
        return "no tiered partitions" + (f" for topic {topic}" if topic else "")
    table = [[h for _, h in COLUMNS]] + [[_cell(r, k) for k, _ in COLUMNS] for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(COLUMNS))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    topics = [t for t in status.get("topics", []) if topic is None or t["topic"] == topic]
    if topics:
        lines.append("")
        for t in topics:
            line = f"topic {t['topic']}: tiering {t['state']} (policy {t['policy']}, epoch {t['epoch']})"
            if t["state"] == "DISABLING":
                line += (f", {t['remote_segments_to_delete']} remote segment(s) / {t['remote_bytes_to_delete']} "
                         f"bytes left to delete")
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
        lines.append(f"remote metadata still loading for: {', '.join(waiting)}")
    return "\n".join(lines)
