"""Probing a live broker's responsiveness while one connection sends a big request (used by
tests/server/test_big_requests.py and bench/big_requests.py).

:func:`while_probing` sends a big request frame on one connection and, on another, ApiVersions
requests one after another, until the big answer is complete. It reports the round trips of the probes
sent after the big frame was fully written (the window in which the broker holds it), and the largest
gap a canary thread of this process saw in its own 1 ms sleeps: a slow probe during such a gap says the
machine was starved, not that the broker stalled.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass, field

from kio.index import load_request_schema

from tierlog.protocol import ApiKey, build, encode_request

_API_VERSIONS = encode_request(build(load_request_schema(ApiKey.API_VERSIONS, 3),
                                     {"client_software_name": "probe", "client_software_version": "1"}), 1, "probe")


def _recv(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ConnectionError("connection closed by the broker")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    return _recv(sock, struct.unpack(">i", _recv(sock, 4))[0])


@dataclass
class Probe:
    sent: float
    rtt: float
    canary_gap: float  # the largest gap this process's canary saw while the probe was out


@dataclass
class Run:
    answer: bytes = b""
    sent_at: float = 0.0        # when the big frame was fully written
    answered_at: float = 0.0    # when its answer was fully read
    probes: list[Probe] = field(default_factory=list)

    @property
    def in_window(self) -> list[Probe]:
        return [p for p in self.probes if p.sent >= self.sent_at and p.sent + p.rtt <= self.answered_at]

    def max_rtt(self, starved_gap: float = 0.05) -> tuple[float, float]:
        """(largest round trip in the window, largest among probes the canary saw no starvation for)."""
        window = self.in_window
        fair = [p.rtt for p in window if p.canary_gap < starved_gap]
        return max((p.rtt for p in window), default=0.0), max(fair, default=0.0)

    def summary(self) -> str:
        worst, fair = self.max_rtt()
        return (f"answer {len(self.answer)} bytes in {self.answered_at - self.sent_at:.2f}s after the frame was "
                f"written; {len(self.in_window)} ApiVersions probes meanwhile, max RTT {worst * 1000:.1f} ms "
                f"({fair * 1000:.1f} ms without canary starvation)")


def while_probing(bootstrap: str, frame: bytes, timeout: float = 600) -> Run:
    """Send ``frame`` (a complete request frame, size prefix included) and probe until it is answered."""
    host, port = bootstrap.rsplit(":", 1)
    big = socket.create_connection((host, int(port)), timeout=timeout)
    probe = socket.create_connection((host, int(port)), timeout=timeout)
    probe.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    run = Run()
    done = threading.Event()
    canary: list[tuple[float, float]] = []  # (start, end) of each canary sleep longer than 10 ms

    def watch() -> None:
        last = time.monotonic()
        while not done.is_set():
            time.sleep(0.001)
            now = time.monotonic()
            if now - last > 0.01:
                canary.append((last, now))
            last = now

    def gap_during(start: float, end: float) -> float:
        return max((b - a for a, b in canary if a < end and b > start), default=0.0)

    def probe_loop() -> None:
        while not done.is_set():
            t0 = time.monotonic()
            probe.sendall(_API_VERSIONS)
            read_frame(probe)
            t1 = time.monotonic()
            run.probes.append(Probe(t0, t1 - t0, 0.0))
            time.sleep(0.002)

    threads = [threading.Thread(target=watch, daemon=True), threading.Thread(target=probe_loop, daemon=True)]
    try:
        for t in threads:
            t.start()
        time.sleep(0.2)  # probes before the big request: the broker answers them at once
        big.sendall(frame)
        run.sent_at = time.monotonic()
        run.answer = read_frame(big)
        run.answered_at = time.monotonic()
    finally:
        done.set()
        for t in threads:
            t.join(timeout)
        big.close()
        probe.close()
    for p in run.probes:
        p.canary_gap = gap_during(p.sent, p.sent + p.rtt)
    return run


def broker_rss_peak_mb(pid: int) -> float:
    """The broker's peak resident memory (VmHWM), in MB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0
