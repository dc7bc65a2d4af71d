"""Share sessions (Kafka's ``ShareSessionCache``): the partitions a member fetches from this broker, kept between
its ShareFetch requests so each request names only what changed.

A session is keyed by (group id, member id). Epoch 0 opens one (replacing any earlier one), -1 closes it
(the request may only acknowledge), any other epoch must be the session's next one, which then increments
(after ``2**31 - 1`` it wraps to 1). At most ``group.share.max.share.sessions`` sessions live on a broker.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

INITIAL_EPOCH, FINAL_EPOCH = 0, -1

TopicPartition = tuple[uuid.UUID, int]


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the next request must carry
    partitions: dict[TopicPartition, None] = field(default_factory=dict)  # ordered set


class ShareSessionCache:
    def __init__(self, max_sessions: int):
        self.max_sessions = max_sessions
        self.sessions: dict[tuple[str, str], ShareSession] = {}

    def open(self, group_id: str, member_id: str, partitions: list[TopicPartition]) -> ShareSession | int:
        key = (group_id, member_id)
        if key not in self.sessions and len(self.sessions) >= self.max_sessions:
            return ErrorCode.share_session_limit_reached
        session = self.sessions[key] = ShareSession(group_id, member_id, 1, dict.fromkeys(partitions))
        return session

    def check(self, group_id: str, member_id: str, epoch: int) -> ShareSession | int:
        """The session a request of ``epoch`` (not 0) continues, or the error to answer."""
        session = self.sessions.get((group_id, member_id))
        if session is None:
            return ErrorCode.share_session_not_found
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            return ErrorCode.invalid_share_session_epoch
        return session

    def advance(self, session: ShareSession) -> None:
        session.epoch = next_epoch(session.epoch)

    def close(self, group_id: str, member_id: str) -> ShareSession | None:
        return self.sessions.pop((group_id, member_id), None)

    def has_group(self, group_id: str) -> bool:
        """Whether a member of the group still has a session here (Kafka counts members per group)."""
        return any(g == group_id for g, _m in self.sessions)
