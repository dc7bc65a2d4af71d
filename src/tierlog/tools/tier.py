"""``tierlog tier status``: per-partition tiering state of a running broker.

The broker serves the status as JSON on its metrics endpoint (``metrics.port``,
``/v1/tier/status``); this tool fetches it and prints a table (or the JSON itself).
"""

from __future__ import annotations

import json
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


def fetch_status(base_url: str, topic: str | None = None, timeout: float = 10) -> dict:
    url = base_url.rstrip("/") + "/v1/tier/status"
    if topic:
        url += "?" + urllib.parse.urlencode({"topic": topic})
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.load(resp)
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise StatusError(f"cannot reach the broker's status endpoint {url}: {reason}") from None


def _cell(row: dict, key: str) -> str:
    value = row.get(key)
    if value is None:
        return "-" if key != "last_error" else ""
    return str(value)


def format_table(status: dict, topic: str | None = None) -> str:
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
    waiting = [f"{r['topic']}-{r['partition']}" for r in rows if not r.get("ready", True)]
    if waiting:
        lines.append(f"remote metadata still loading for: {', '.join(waiting)}")
    return "\n".join(lines)
