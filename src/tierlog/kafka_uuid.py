"""Kafka's 128-bit ids (topic ids, cluster ids, directory ids) and their text form."""

from __future__ import annotations

import base64
import uuid

ZERO_UUID = uuid.UUID(int=0)
METADATA_TOPIC_ID = uuid.UUID(int=1)


def new_kafka_uuid() -> uuid.UUID:
    """A random id as Kafka makes them: never the reserved zero or metadata-topic ids, never a
    text form starting with '-' (it would read as a command-line flag)."""
    while True:
        u = uuid.uuid4()
        if u.int > 1 and not uuid_to_str(u).startswith("-"):
            return u


def uuid_to_str(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString(): URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def uuid_from_str(text: str) -> uuid.UUID:
    """Inverse of :func:`uuid_to_str`; raises ValueError for anything that is not 16 bytes."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Kafka id: {text!r}")
    return uuid.UUID(bytes=raw)
