"""A process's resident memory, as the kernel reports it (VmRSS in /proc/<pid>/status)."""

from __future__ import annotations

import os


def rss_mib(pid: int | None = None) -> float:
    """Resident set size of ``pid`` (this process by default) in MiB."""
    with open(f"/proc/{pid or os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for process {pid}")
