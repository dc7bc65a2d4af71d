"""What a test captured from tierlog's own loggers.

pytest's ``caplog`` handler sits on the root logger, so it also takes what other loggers say meanwhile:
a client thread an earlier test in the same xdist worker left running (kafka-python's "No node
available for metadata refresh" was seen in CI) lands in ``caplog.records``. Tests that count lines
read them through these functions instead."""

from __future__ import annotations

import logging


def records(caplog, logger: str = "tierlog") -> list[logging.LogRecord]:
    """The captured records of ``logger`` and its children, in order."""
    return [r for r in caplog.records if r.name == logger or r.name.startswith(logger + ".")]


def messages(caplog, logger: str = "tierlog") -> list[str]:
    return [r.getMessage() for r in records(caplog, logger)]
