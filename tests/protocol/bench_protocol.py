"""Micro-benchmarks for the protocol layer (not collected by pytest).

    PYTHONPATH=src python tests/protocol/bench_protocol.py
"""

from __future__ import annotations

import datetime
import io
import os
import resource
import time

from kio.index import load_request_schema
from kio.serial import entity_reader, entity_writer

from tierlog.protocol._guard import guard_for
from tierlog.protocol.framing import FrameDecoder, encode_frame
from tierlog.protocol.messages import encode_request, parse_request


def _best(fn, n: int, repeat: int = 5) -> float:
    """Best seconds per call over ``repeat`` runs of ``n`` calls."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best


def produce_v9_frame(batch_bytes: int = 16384, partitions: int = 1) -> bytes:
    cls = load_request_schema(0, 9)
    topic_cls = cls.__dataclass_fields__["topic_data"].type.__args__[0]
    part_cls = topic_cls.__dataclass_fields__["partition_data"].type.__args__[0]
    batch = os.urandom(batch_bytes)
    request = cls(transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30), topic_data=(
        topic_cls(name="bench-topic", partition_data=tuple(
            part_cls(index=i, records=batch) for i in range(partitions))),))
    return encode_request(request, correlation_id=1, client_id="bench")[4:]


def bench_parse() -> None:
    frame = produce_v9_frame()
    cls = load_request_schema(0, 9)
    read_header, read_body, guard = entity_reader(cls.__header_schema__), entity_reader(cls), guard_for(cls)

    def raw_kio():
        _, n = read_header(frame, 0)
        read_body(frame, n)

    parse_request(frame)
    _, header_size = read_header(frame, 0)
    t_parse = _best(lambda: parse_request(frame), 100_000)
    t_kio = _best(raw_kio, 100_000)
    t_guard = _best(lambda: guard(frame, header_size), 100_000)
    print(f"Produce v9, 1 x 16 KiB batch ({len(frame)} B frame):")
    print(f"  parse_request   {1 / t_parse:>10,.0f} ops/s  ({t_parse * 1e6:.2f} us)")
    print(f"  raw kio reads   {1 / t_kio:>10,.0f} ops/s  ({t_kio * 1e6:.2f} us)")
    print(f"  guard alone     {1 / t_guard:>10,.0f} ops/s  ({t_guard * 1e6:.2f} us)")
    frame20 = produce_v9_frame(partitions=20)
    t20 = _best(lambda: parse_request(frame20), 20_000)
    print(f"Produce v9, 20 partitions x 16 KiB: parse_request {1 / t20:,.0f} ops/s ({t20 * 1e6:.1f} us)")


def bench_frames(frame_size: int = 1 << 20, chunk: int = 65536, frames: int = 64) -> None:
    payload = os.urandom(frame_size)
    stream = encode_frame(payload) * frames
    chunks = [stream[i:i + chunk] for i in range(0, len(stream), chunk)]
    for label, kind in (("bytearray chunks", bytearray), ("bytes chunks", bytes)):
        data = [kind(c) for c in chunks]
        times = []
        for _ in range(7):
            dec = FrameDecoder()
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t0 = time.perf_counter()
            got = 0
            for c in data:
                got += len(dec.feed(c))
            times.append(time.perf_counter() - t0)
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
            assert got == frames
        times.sort()
        print(f"FrameDecoder 1 MiB frames in 64 KiB {label}: best {len(stream) / times[0] / 1e6:,.0f} MB/s, "
              f"median {len(stream) / times[3] / 1e6:,.0f} MB/s (page faults in last run: {faults})")
    small = encode_frame(b"x" * 100) * 10_000
    best = min(_timed(lambda: FrameDecoder().feed(small)) for _ in range(5))
    print(f"FrameDecoder 100 B frames, 10k per chunk: {10_000 / best:,.0f} frames/s")


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bench_encode() -> None:
    from tierlog.protocol.builder import build
    from tierlog.protocol.messages import encode_response_frame
    from tierlog.protocol.registry import HandlerRegistry, build_api_versions_response

    reg = HandlerRegistry()

    async def h(ctx):
        return None

    for key, lo, hi in [(0, 3, 11), (1, 4, 16), (2, 1, 8), (3, 0, 13), (18, 0, 4)]:
        reg.register(key, lo, hi, h)
    av = build_api_versions_response(3, reg)
    t = _best(lambda: encode_response_frame(1, av), 20_000)
    print(f"ApiVersions v3 response encode: {1 / t:,.0f} ops/s")
    cls = load_request_schema(3, 12)
    from kio.index import load_response_from_request

    resp_cls = load_response_from_request(cls)
    desc = {"brokers": [{"node_id": 1, "host": "localhost", "port": 9092}], "controller_id": 1,
            "topics": [{"name": f"t{i}", "partitions": [{"partition_index": p, "leader_id": 1,
                                                         "replica_nodes": [1], "isr_nodes": [1]}
                                                        for p in range(6)]} for i in range(10)]}
    t_build = _best(lambda: build(resp_cls, desc), 2_000)
    resp = build(resp_cls, desc)
    t_enc = _best(lambda: encode_response_frame(1, resp), 2_000)
    print(f"Metadata v12 10 topics x 6 partitions: build {1 / t_build:,.0f}/s, encode {1 / t_enc:,.0f}/s")
    out = io.BytesIO()
    entity_writer(resp_cls)(out, resp)


if __name__ == "__main__":
    bench_parse()
    bench_frames()
    bench_encode()
