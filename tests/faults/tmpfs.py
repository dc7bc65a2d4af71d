"""A real full disk for fault tests: a tmpfs the test mounts (root only) and fills with a space-holding file.

``mount_tmpfs`` skips, with the reason, when the test cannot mount (not root, no ``mount``, no permission in
a container), except under ``CI=true`` as root, where not being able to mount is a failure: CI must run
these tests. Everything mounted is unmounted at the end, after the brokers using it stopped.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest


def _cannot(reason: str) -> None:
    if os.environ.get("CI") == "true" and os.geteuid() == 0:
        pytest.fail(f"CI runs as root and must run the disk-full tests, but {reason}")
    pytest.skip(reason)


def mount_tmpfs(path: Path, size: str) -> Path:
    """Mount a tmpfs of ``size`` (``mount -o size=``, e.g. ``16m``) on ``path`` (created)."""
    if os.geteuid() != 0:
        _cannot("mounting a tmpfs needs root")
    if shutil.which("mount") is None:
        _cannot("there is no mount command")
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        _cannot(f"cannot mount a tmpfs on {path}: {(r.stderr or r.stdout).strip()}")
    return path


def unmount(path: Path) -> None:
    if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)  # still busy: detach it


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def hold_space(path: Path, leave: int) -> Path:
    """Fill the file system of ``path`` with a file ``holder`` until only about ``leave`` bytes are free (all
    of it when ``leave`` is 0: written until ENOSPC). Removing the file gives the space back."""
    holder = path / "holder"
    chunk = b"\0" * (1 << 20)
    with open(holder, "wb", buffering=0) as f:
        while (room := free_bytes(path) - leave) > 0:
            try:
                f.write(chunk[:min(room, len(chunk))])
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
    return holder
