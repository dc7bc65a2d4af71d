"""What tiered storage needs of a partition (Kafka's ``TopicPartitionLog``).

The remote log manager and the remote reader work on partitions the broker's replica manager owns.
They see them through this protocol, so tiered storage does not depend on the server layer and tests
can hand it any object with these attributes.
"""

from __future__ import annotations

import uuid
from typing import Protocol

from tierlog.storage import Log


class TopicPartitionLog(Protocol):
    """A partition hosted by this broker: its identity, its local log and its current leader epoch."""

    @property
    def topic(self) -> str: ...

    @property
    def index(self) -> int: ...

    @property
    def topic_id(self) -> uuid.UUID: ...

    @property
    def log(self) -> Log: ...

    @property
    def leader_epoch(self) -> int: ...
