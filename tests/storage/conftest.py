"""``make_log``: logs in a temp folder, closed after the test (helpers in tests/storage/storagelib.py)."""

import os

import pytest

from tierlog.storage import Log, LogConfig


@pytest.fixture
def make_log(tmp_path):
    """Open (or reopen) a log in a temp folder: make_log(**LogConfig fields, clean_shutdown=True)."""
    opened = []

    def _make(name="t-0", clean_shutdown=True, recovery_point=0, log_start_offset=0, **cfg):
        d = os.path.join(tmp_path, name)
        topic, _, part = name.rpartition("-")
        lg = Log.open(d, topic, int(part), LogConfig(**cfg), clean_shutdown=clean_shutdown,
                      recovery_point=recovery_point, log_start_offset=log_start_offset)
        opened.append(lg)
        return lg

    yield _make
    for lg in opened:
        for seg in lg.segments:
            if seg.fd >= 0:
                seg.close()
