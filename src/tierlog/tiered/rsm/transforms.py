"""Optional transform stages applied to a segment's ``.log`` bytes before upload.

A stage turns a byte stream into another (``encode``) and can give back any byte range of its input
by reading only part of its output (``decode_range``). Stages compose: the stored object is the
last stage's output, and each stage reads its encoded bytes through the stage after it, so a later
encryption stage slots in after compression without either knowing the other.

Each stage leaves a JSON-able record (its name and parameters, e.g. the chunk table) in the segment
manifest; reading needs only those records, never the writer's configuration.
"""

from __future__ import annotations

import abc
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import cramjam

#: read(start, length) -> exactly ``length`` bytes of a stage's input (or of the stored object).
RangeReader = Callable[[int, int], bytes]

ZSTD_DEFAULT_LEVEL = 3  # zstd's own default (ZSTD_CLEVEL_DEFAULT)


class TransformError(ValueError):
    """A stored object does not decode as its manifest says (corruption or a foreign writer)."""


class Stage(abc.ABC):
    """One transform. ``encode`` fills ``record`` while its output is consumed; a stage is rebuilt for
    reading from that record alone (:func:`stage_for_record`)."""

    name: ClassVar[str]

    @abc.abstractmethod
    def encode(self, chunks: Iterable[bytes], record: dict[str, Any]) -> Iterator[bytes]:
        """Yield the encoded form of the concatenated ``chunks``; complete ``record`` by the end."""

    @classmethod
    @abc.abstractmethod
    def decode_range(cls, record: Mapping[str, Any], read: RangeReader, start: int, length: int) -> bytes:
        """Bytes ``[start, start + length)`` of this stage's input, reading its output through ``read``.
        The caller clips the range to the input size."""


class ZstdChunks(Stage):
    """Fixed-size chunks of the input, each compressed on its own with zstd and concatenated.

    Record: ``{"name": "zstd-chunks", "chunk_size", "level", "chunks": [[input offset, output offset,
    input size, output size], ...]}``. A ranged read fetches the compressed chunks covering the range
    in one read and decompresses only those."""

    name = "zstd-chunks"

    def __init__(self, chunk_size: int, level: int = ZSTD_DEFAULT_LEVEL):
        if chunk_size < 1:
            raise ValueError(f"chunk size must be positive, got {chunk_size}")
        self.chunk_size = chunk_size
        self.level = level

    def encode(self, chunks: Iterable[bytes], record: dict[str, Any]) -> Iterator[bytes]:
        table: list[list[int]] = []
        record.update(name=self.name, chunk_size=self.chunk_size, level=self.level, chunks=table)
        in_pos = out_pos = 0
        for piece in rechunk(chunks, self.chunk_size):
            packed = bytes(cramjam.zstd.compress(piece, level=self.level))
            table.append([in_pos, out_pos, len(piece), len(packed)])
            in_pos += len(piece)
            out_pos += len(packed)
            yield packed

    @classmethod
    def decode_range(cls, record: Mapping[str, Any], read: RangeReader, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        table = record["chunks"]
        starts = [c[0] for c in table]
        first = bisect_right(starts, start) - 1
        last = bisect_right(starts, start + length - 1) - 1
        if first < 0 or last >= len(table) or start + length > table[last][0] + table[last][2]:
            raise TransformError(f"range {start}+{length} is outside the chunk table")
        base = table[first][1]
        packed = read(base, table[last][1] + table[last][3] - base)
        out = bytearray()
        for in_pos, out_pos, in_size, out_size in table[first:last + 1]:
            try:
                plain = cramjam.zstd.decompress(packed[out_pos - base:out_pos - base + out_size])
            except cramjam.DecompressionError as e:
                raise TransformError(f"chunk at stored offset {out_pos} does not decompress: {e}") from None
            if len(plain) != in_size:
                raise TransformError(f"chunk at stored offset {out_pos} holds {len(plain)} bytes, "
                                     f"expected {in_size}")
            lo = max(start - in_pos, 0)
            hi = min(start + length - in_pos, in_size)
            out += memoryview(plain)[lo:hi]
        return bytes(out)


_STAGES: dict[str, type[Stage]] = {ZstdChunks.name: ZstdChunks}


def register_stage(stage: type[Stage]) -> None:
    """Make a stage known to readers (a plugin's own stage, e.g. encryption)."""
    _STAGES[stage.name] = stage


def stage_for_record(record: Mapping[str, Any]) -> type[Stage]:
    try:
        return _STAGES[record["name"]]
    except KeyError:
        raise TransformError(f"unknown transform {record.get('name')!r} in manifest") from None


def encode(stages: Sequence[Stage], chunks: Iterable[bytes], records: list[dict[str, Any]]) -> Iterator[bytes]:
    """Chain ``stages`` over ``chunks``; ``records`` receives one record per stage, in order."""
    out: Iterable[bytes] = chunks
    for stage in stages:
        record: dict[str, Any] = {}
        records.append(record)
        out = stage.encode(out, record)
    return iter(out)


def original_reader(records: Sequence[Mapping[str, Any]], stored: RangeReader) -> RangeReader:
    """A reader of the original bytes, given a reader of the stored object and the stage records."""
    read = stored
    for record in reversed(records):  # the last stage wrote the stored bytes, so it decodes first
        stage = stage_for_record(record)
        read = _bind(stage, record, read)
    return read


def _bind(stage: type[Stage], record: Mapping[str, Any], below: RangeReader) -> RangeReader:
    return lambda start, length: stage.decode_range(record, below, start, length)


def rechunk(chunks: Iterable[bytes], size: int) -> Iterator[bytes]:
    """Re-cut a byte stream into pieces of exactly ``size`` bytes (the last one may be shorter)."""
    pending = bytearray()
    for chunk in chunks:
        pending += chunk
        while len(pending) >= size:
            yield bytes(pending[:size])
            del pending[:size]
    if pending:
        yield bytes(pending)


def file_chunks(path: str, size: int = 1024 * 1024) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(size):
            yield chunk
