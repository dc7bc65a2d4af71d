"""What a fetch or offset lookup asks of the replica manager and what it gets back, free of wire versions.

The Fetch and ListOffsets handlers translate Kafka's requests of every version into these and the
answers back into responses; the replica manager reads both tiers to fill them (Kafka's ``FetchParams``,
``FetchPartitionData`` and ``ListOffsetsPartitionStatus``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tierlog.protocol.offload import BIG_ITEMS
from tierlog.storage import FileRegion

#: A fetch naming at least this many partitions is read, waited on and answered a slice at a time, yielding
#: to the event loop every few ms (a 16 MB Fetch request names some 500,000); below it, the consume path
#: takes no extra step per partition.
BIG_FETCH = BIG_ITEMS


class FetchIsolation(enum.Enum):
    """How far a read may go (Kafka's FetchIsolation)."""

    LOG_END = "log_end"  # followers: everything appended
    HIGH_WATERMARK = "high_watermark"  # consumers, read_uncommitted: what every in-sync replica has
    TXN_COMMITTED = "committed"  # consumers, read_committed: up to the last stable offset


@dataclass(frozen=True, slots=True)
class FetchParams:
    replica_id: int  # -1 for consumers
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation: FetchIsolation
    # A consumer's rack from Fetch v11 (KIP-392), "" when it named none; None for older versions and followers,
    # which may read from leaders only.
    client_rack: str | None = None

    @property
    def is_from_follower(self) -> bool:
        return self.replica_id >= 0

    @property
    def fetch_only_from_leader(self) -> bool:
        """Kafka's fetchOnlyLeader: followers and consumers older than Fetch v11 read from the leader only."""
        return self.client_rack is None


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """One partition of a fetch. ``topic`` None: the request named a topic id this broker does not know,
    answered with ``unknown_topic_error`` (the handler picks the code its version uses)."""

    topic: str | None
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    unknown_topic_error: int = 0


@dataclass(slots=True)
class FetchPartitionData:
    """The answer for one partition: an error code, or its offsets and the whole batches read.
    ``records`` is bytes, a memoryview, or a file region the socket server sends with sendfile."""

    error_code: int = 0
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes | memoryview | FileRegion = b""
    aborted_transactions: list[tuple[int, int]] | None = None
    preferred_read_replica: int = -1  # KIP-392: the replica the consumer should fetch from instead

    @property
    def size(self) -> int:
        return len(self.records)


@dataclass(frozen=True, slots=True)
class OffsetLookup:
    """One partition of a ListOffsets request."""

    topic: str
    partition: int
    timestamp: int
    current_leader_epoch: int = -1


@dataclass(slots=True)
class OffsetLookupResult:
    error_code: int = 0
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1
