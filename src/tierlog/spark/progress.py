"""Progress of a long job on standard error: rows, MB, rate and, when the total is known, ETA.

On a terminal it is a live bar drawn by ``rich``; anywhere else (a log file, a pipe, CI) one plain line
at most every :data:`PLAIN_INTERVAL` seconds, and only when something moved, so a job's log says how it
went without repeating itself.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

#: Seconds between two plain lines (when standard error is not a terminal).
PLAIN_INTERVAL = 5.0


def size(n: float) -> str:
    """Bytes as people read them: ``240.5 kB``, ``51.2 MB`` (decimal units, as rich's transfer columns)."""
    from rich.filesize import decimal
    return decimal(int(n))


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Progress:
    """``with Progress("export", unit="rows") as p: p.update(done, size_bytes, total=...)``."""

    def __init__(self, label: str, unit: str = "rows", total: int | None = None, stream: TextIO | None = None,
                 interval: float = PLAIN_INTERVAL) -> None:
        self.label = label
        self.unit = unit
        self.total = total
        self.stream = stream if stream is not None else sys.stderr
        self.interval = interval
        self.done = 0
        self.bytes = 0
        self.started = time.monotonic()
        self._printed: tuple | None = None
        self._last_line = self.started  # a job shorter than the interval prints its last line only
        self._rich = None
        self._task = None
        isatty = getattr(self.stream, "isatty", None)
        self.live = bool(isatty and isatty())

    # ------------------------------------------------------------------------------------ figures

    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return self.done / elapsed if elapsed > 0 else 0.0

    def eta(self) -> float | None:
        rate = self.rate()
        if not self.total or rate <= 0 or self.done >= self.total:
            return None
        return (self.total - self.done) / rate

    def text(self) -> str:
        """The figures as one line: ``12,000 of 51,200 rows (23%), 4.1 MB, 3,900 rows/s, ETA 10 s``."""
        if self.total:
            head = f"{self.done:,} of {self.total:,} {self.unit} ({100 * min(self.done, self.total) // self.total}%)"
        else:
            head = f"{self.done:,} {self.unit}"
        parts = [head, size(self.bytes), f"{self.rate():,.0f} {self.unit}/s"]
        eta = self.eta()
        if eta is not None:
            parts.append(f"ETA {_duration(eta)}")
        return ", ".join(parts)

    # ---------------------------------------------------------------------------------- rendering

    def __enter__(self) -> Progress:
        if self.live:
            from rich.console import Console
            from rich.progress import BarColumn, TextColumn
            from rich.progress import Progress as RichProgress
            self._rich = RichProgress(TextColumn("[bold]{task.description}"), BarColumn(),
                                      TextColumn("{task.fields[figures]}"),
                                      console=Console(file=self.stream), transient=False)
            self._rich.start()
            self._task = self._rich.add_task(self.label, total=self.total, figures=self.text())
        return self

    def update(self, done: int, size_bytes: int = 0, total: int | None = None) -> None:
        self.done = max(0, int(done))
        self.bytes = max(0, int(size_bytes))
        if total is not None:
            self.total = total
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done, total=self.total, figures=self.text())
            return
        now = time.monotonic()
        state = (self.done, size(self.bytes), self.total)  # as printed: no line that looks like the last
        if state != self._printed and now - self._last_line >= self.interval:
            self._line(self.text())
            self._printed, self._last_line = state, now

    def finish(self, summary: str | None = None, always: bool = True) -> None:
        """The last line: the figures (or ``summary``) and how long it took; off a terminal, with
        ``always`` false, only for a step that took long enough to have printed a line."""
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done, total=self.total or self.done or 1,
                              figures=self.text())
            self._rich.stop()
            self._rich = None
            return
        elapsed = time.monotonic() - self.started
        if not always and self._printed is None and elapsed < self.interval:
            return
        took = _duration(elapsed)
        self._line(f"{summary or f'{self.done:,} {self.unit}, {size(self.bytes)}'} in {took}")

    def __exit__(self, *exc: object) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None

    def _line(self, text: str) -> None:
        self.stream.write(f"{self.label}: {text}\n")
        self.stream.flush()
