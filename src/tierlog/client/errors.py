"""Errors tierlog's client raises besides the broker's own codes (:mod:`tierlog.errors`).

Every error is a :class:`tierlog.errors.KafkaError`; ``exc.retriable`` says whether trying again
can help. The client retries retriable errors itself within ``delivery.timeout.ms`` (producer) or
``default.api.timeout.ms`` (consumer and admin) and raises the last one, or
:class:`KafkaTimeoutError`, when the time is up.
"""

from __future__ import annotations

from tierlog import errors

# Kafka's TimeoutException maps to REQUEST_TIMED_OUT; NetworkException is NETWORK_EXCEPTION.
_RequestTimedOut = errors.RequestTimedOutError
_NetworkException = errors.NetworkException


class KafkaTimeoutError(_RequestTimedOut):
    """An operation did not complete in time (Kafka's ``TimeoutException``); retriable."""


class KafkaConnectionError(_NetworkException):
    """A connection failed or closed (Kafka's ``NetworkException`` / disconnect); retriable."""


class BrokersUnavailableError(KafkaTimeoutError):
    """No known broker could be reached and ``metadata.recovery.strategy=none`` forbids going back to
    ``bootstrap.servers`` (KIP-899). The message lists the brokers tried."""


class RemoteStorageNotReadyError(errors.ReplicaNotAvailableError):
    """The remote tier of a partition cannot be read yet: after a broker restart its remote log metadata
    is still being loaded (the discarded KIP-1007's error, carried by REPLICA_NOT_AVAILABLE, 9, the code
    every client already retries). Retriable: the consumer waits and fetches again; timed lookups raise
    it when the time is up before the partition became ready."""


class IllegalStateError(errors.KafkaError):
    """The client was used wrongly (closed, not assigned, no group); not retriable."""


class TransactionAbortedError(errors.KafkaError):
    """The record was not sent because its transaction is being aborted (Kafka's
    ``TransactionAbortedException``)."""


class RecordTooLargeError(errors.RecordListTooLargeError):
    """A record larger than ``max.request.size`` or ``buffer.memory``, refused before sending."""


class NoOffsetForPartitionError(errors.OffsetOutOfRangeError):
    """No committed offset and ``auto.offset.reset=none`` (or an out-of-range position with it)."""


class CommitFailedError(errors.KafkaError):
    """The group rebalanced before the commit: the partitions may now belong to another member."""


RetriableError = errors.RetriableError
KafkaError = errors.KafkaError
