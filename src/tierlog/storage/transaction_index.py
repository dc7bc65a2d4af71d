"""A segment's aborted-transaction index, ``<20-digit base offset>.txnindex`` (Kafka's TransactionIndex).

One 34-byte entry per transaction aborted by a marker in the segment (Kafka's ``AbortedTxn``, version 0):
int16 version, int64 producer id, int64 first offset, int64 last offset (the ABORT marker's offset), int64
last stable offset (where the LSO stood once the marker was written: the first offset of the oldest other
transaction still open, else the marker's offset + 1). Entries are in marker order; a read_committed fetch
collects those overlapping the offsets it returns (``collect``), so the consumer can drop aborted batches.

As in Kafka the file is created only when a first entry is appended: most segments never have one. The
entries are small and few, so they are kept in memory once read; the file is the durable copy.
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from tierlog.storage.index import CorruptIndexError

SUFFIX = ".txnindex"
VERSION = 0
ENTRY = struct.Struct(">hqqqq")  # 34 bytes


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return ENTRY.pack(VERSION, *self)


def parse_entries(data: bytes, where: str) -> list[AbortedTxn]:
    """The entries of a ``.txnindex`` file's bytes; a torn last entry (a crash mid-append) is dropped."""
    out = []
    for i in range(len(data) // ENTRY.size):
        version, *fields = ENTRY.unpack_from(data, i * ENTRY.size)
        if version > VERSION:
            raise CorruptIndexError(f"unexpected aborted transaction version {version} in transaction index {where}, "
                                    f"current version is {VERSION}")
        out.append(AbortedTxn(*fields))
    return out


class TransactionIndex:
    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None  # None: not read yet
        self._unsynced = False

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            try:
                with open(self.path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                data = b""
            self._entries = parse_entries(data, self.path)
            if len(data) % ENTRY.size:  # a torn entry: cut it off so the next append lines up
                os.truncate(self.path, len(self._entries) * ENTRY.size)
        return self._entries

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise ValueError(f"the last offset of appended transactions must increase: {txn.last_offset} is not "
                             f"greater than the last offset {entries[-1].last_offset} of index {self.path}")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            data = txn.to_bytes()
            if os.write(fd, data) != len(data):
                raise OSError(f"short write to {self.path}")
        finally:
            os.close(fd)
        entries.append(txn)
        self._unsynced = True

    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[tuple[int, int]], bool]:
        """(producer id, first offset) of the aborted transactions overlapping ``[fetch_offset,
        upper_bound_offset)``, and whether the search may stop here: an entry's last stable offset reached the
        upper bound, so no later segment holds an abort of a transaction that started below it (Kafka's
        ``collectAbortedTxns``)."""
        found = []
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append((txn.producer_id, txn.first_offset))
            if txn.last_stable_offset >= upper_bound_offset:
                return found, True
        return found, False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or after ``offset`` (the log is truncated there)."""
        entries = self.entries
        keep = next((i for i, t in enumerate(entries) if t.last_offset >= offset), len(entries))
        if keep < len(entries):
            del entries[keep:]
            os.truncate(self.path, keep * ENTRY.size)

    def reset(self) -> None:
        """Empty the index (recovery rebuilds it from the batches)."""
        self._entries = []
        if os.path.exists(self.path):
            os.truncate(self.path, 0)

    def sanity_check(self) -> None:
        try:
            size = os.path.getsize(self.path)
        except FileNotFoundError:
            return
        if size % ENTRY.size:
            raise CorruptIndexError(f"transaction index {self.path} has {size} bytes, not a multiple of {ENTRY.size}")
        for txn in self.entries:
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(f"last offset of aborted transaction {txn} in index {self.path} is less "
                                        f"than start offset {self.base_offset}")

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def fsync(self) -> None:
        if self._unsynced and os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._unsynced = False

    def rename(self, path: str) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        self._entries = []
