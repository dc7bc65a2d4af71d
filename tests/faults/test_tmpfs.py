"""The disk-full tests skip only where they cannot mount, and never under CI=true as root."""

import os

import pytest

from tests.faults import tmpfs


def test_not_root_skips(monkeypatch, tmp_path):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.skip.Exception, match="needs root"):
        tmpfs.mount_tmpfs(tmp_path / "m", "1m")


def test_root_in_ci_fails_when_mount_fails(monkeypatch, tmp_path):
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(tmpfs.shutil, "which", lambda name: None)
    with pytest.raises(pytest.fail.Exception, match="must run the disk-full tests"):
        tmpfs.mount_tmpfs(tmp_path / "m", "1m")


def test_root_outside_ci_skips_when_mount_fails(monkeypatch, tmp_path):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(tmpfs.shutil, "which", lambda name: None)
    with pytest.raises(pytest.skip.Exception):
        tmpfs.mount_tmpfs(tmp_path / "m", "1m")
