"""Kafka's error codes as a typed exception hierarchy.

One exception class per Kafka error code, generated from kio's ``ErrorCode`` table so the codes,
names and retriable flags match Kafka's ``Errors`` enum exactly. The broker raises these inside
request handlers and turns them into the error code a client understands; tierlog's client raises
them to its users. ``error_for_code(3)`` is ``UnknownTopicOrPartitionError``.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class KafkaError(Exception):
    """Base of every error that maps to a Kafka wire error code."""

    code: int = -1
    name: str = "UNKNOWN_SERVER_ERROR"
    retriable: bool = False

    def __init__(self, message: str | None = None):
        super().__init__(message or self.name)
        self.message = message or self.name

    @property
    def error_code(self) -> ErrorCode:
        return ErrorCode(self.code)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class RetriableError(KafkaError):
    """Errors a client may retry (Kafka's ``RetriableException``)."""

    retriable = True


def _class_name(code_name: str) -> str:
    base = "".join(part.capitalize() for part in code_name.split("_"))
    return base if base.endswith(("Error", "Exception")) else base + "Error"


_BY_CODE: dict[int, type[KafkaError]] = {}


def _build() -> None:
    for ec in ErrorCode:
        if ec.value == 0:
            continue
        base = RetriableError if ec.retriable else KafkaError
        cls = type(_class_name(ec.name), (base,),
                   {"code": ec.value, "name": ec.name.upper(), "retriable": bool(ec.retriable),
                    "__doc__": f"Kafka error {ec.value} {ec.name.upper()}."})
        cls.__module__ = __name__
        globals()[cls.__name__] = cls
        _BY_CODE[ec.value] = cls


_build()


def error_for_code(code: int) -> type[KafkaError]:
    """The exception class for a Kafka error code; unknown codes map to UNKNOWN_SERVER_ERROR."""
    return _BY_CODE.get(code, _BY_CODE[-1])


def describe_error(error: KafkaError | int, message: str | None = None) -> str:
    """A Kafka error as a log line shows it: ``INVALID_REPLICATION_FACTOR (38): <message>`` (name and code,
    so nobody has to look a bare number up); ``error`` is an exception or a code, ``message`` overrides
    the exception's."""
    if isinstance(error, KafkaError):
        name, code = error.name, error.code
        message = message if message is not None else error.message
    else:
        cls = _BY_CODE.get(error)
        name, code = (cls.name if cls is not None else "UNKNOWN_SERVER_ERROR"), error
    text = f"{name} ({code})"
    return f"{text}: {message}" if message and message != name else text


class StartupError(Exception):
    """A broker start that cannot go on, for a reason the operator can fix (a port taken, a log dir locked
    by another broker or unusable, a log dir of another cluster). Its text says what is wrong and what to
    do, in one line; ``tierlog broker`` prints it without a traceback and exits non-zero."""


#: Kafka's ``Errors.NONE``: the code of an answer without an error (no exception stands for it).
NO_ERROR: int = 0

# Names used throughout tierlog, spelled out so linters and readers can see them.
UnknownServerError: type[KafkaError] = _BY_CODE[-1]
OffsetOutOfRangeError: type[KafkaError] = _BY_CODE[1]
CorruptMessageError: type[KafkaError] = _BY_CODE[2]  # Kafka's CorruptRecordException
UnknownTopicOrPartitionError: type[KafkaError] = _BY_CODE[3]
NotLeaderOrFollowerError: type[KafkaError] = _BY_CODE[6]
RequestTimedOutError: type[KafkaError] = _BY_CODE[7]
ReplicaNotAvailableError: type[KafkaError] = _BY_CODE[9]
StaleControllerEpochError: type[KafkaError] = _BY_CODE[11]
BrokerNotAvailableError: type[KafkaError] = _BY_CODE[8]
MessageTooLargeError: type[KafkaError] = _BY_CODE[10]
RecordListTooLargeError: type[KafkaError] = _BY_CODE[18]
InvalidTopicError: type[KafkaError] = _BY_CODE[17]  # Kafka's InvalidTopicException
NotEnoughReplicasError: type[KafkaError] = _BY_CODE[19]
NotEnoughReplicasAfterAppendError: type[KafkaError] = _BY_CODE[20]
InvalidUpdateVersionError: type[KafkaError] = _BY_CODE[95]
RebootstrapRequiredError: type[KafkaError] = _BY_CODE[129]  # KIP-1102, KIP-1242
IneligibleReplicaError: type[KafkaError] = _BY_CODE[107]
StaleBrokerEpochError: type[KafkaError] = _BY_CODE[77]
InvalidTimestampError: type[KafkaError] = _BY_CODE[32]
TopicAlreadyExistsError: type[KafkaError] = _BY_CODE[36]
InvalidPartitionsError: type[KafkaError] = _BY_CODE[37]
InvalidReplicationFactorError: type[KafkaError] = _BY_CODE[38]
InvalidReplicaAssignmentError: type[KafkaError] = _BY_CODE[39]
UnsupportedVersionError: type[KafkaError] = _BY_CODE[35]
InvalidConfigError: type[KafkaError] = _BY_CODE[40]
NotControllerError: type[KafkaError] = _BY_CODE[41]
InvalidRequestError: type[KafkaError] = _BY_CODE[42]
InvalidRequiredAcksError: type[KafkaError] = _BY_CODE[21]
UnsupportedForMessageFormatError: type[KafkaError] = _BY_CODE[43]
PolicyViolationError: type[KafkaError] = _BY_CODE[44]
OutOfOrderSequenceNumberError: type[KafkaError] = _BY_CODE[45]
DuplicateSequenceNumberError: type[KafkaError] = _BY_CODE[46]
InvalidProducerEpochError: type[KafkaError] = _BY_CODE[47]
InvalidTxnStateError: type[KafkaError] = _BY_CODE[48]
TransactionCoordinatorFencedError: type[KafkaError] = _BY_CODE[52]
TransactionalIdAuthorizationFailedError: type[KafkaError] = _BY_CODE[53]
KafkaStorageError: type[KafkaError] = _BY_CODE[56]
TopicDeletionDisabledError: type[KafkaError] = _BY_CODE[73]
FencedLeaderEpochError: type[KafkaError] = _BY_CODE[74]
UnknownLeaderEpochError: type[KafkaError] = _BY_CODE[75]
UnknownProducerIdError: type[KafkaError] = _BY_CODE[59]
UnsupportedCompressionTypeError: type[KafkaError] = _BY_CODE[76]
InvalidRecordError: type[KafkaError] = _BY_CODE[87]
UnstableOffsetCommitError: type[KafkaError] = _BY_CODE[88]
ThrottlingQuotaExceededError: type[KafkaError] = _BY_CODE[89]
UnknownTopicIdError: type[KafkaError] = _BY_CODE[100]
OffsetMovedToTieredStorageError: type[KafkaError] = _BY_CODE[109]
MismatchedEndpointTypeError: type[KafkaError] = _BY_CODE[114]
UnsupportedEndpointTypeError: type[KafkaError] = _BY_CODE[115]
# The group coordinator's errors (Kafka's ``Errors`` names).
InvalidFetchSizeError: type[KafkaError] = _BY_CODE[4]
LeaderNotAvailableError: type[KafkaError] = _BY_CODE[5]
OffsetMetadataTooLargeError: type[KafkaError] = _BY_CODE[12]
NetworkException: type[KafkaError] = _BY_CODE[13]
CoordinatorLoadInProgressError: type[KafkaError] = _BY_CODE[14]
CoordinatorNotAvailableError: type[KafkaError] = _BY_CODE[15]
NotCoordinatorError: type[KafkaError] = _BY_CODE[16]
IllegalGenerationError: type[KafkaError] = _BY_CODE[22]
InconsistentGroupProtocolError: type[KafkaError] = _BY_CODE[23]
InvalidGroupIdError: type[KafkaError] = _BY_CODE[24]
UnknownMemberIdError: type[KafkaError] = _BY_CODE[25]
InvalidSessionTimeoutError: type[KafkaError] = _BY_CODE[26]
RebalanceInProgressError: type[KafkaError] = _BY_CODE[27]
TopicAuthorizationFailedError: type[KafkaError] = _BY_CODE[29]
GroupAuthorizationFailedError: type[KafkaError] = _BY_CODE[30]
ClusterAuthorizationFailedError: type[KafkaError] = _BY_CODE[31]
SecurityDisabledError: type[KafkaError] = _BY_CODE[54]
NonEmptyGroupError: type[KafkaError] = _BY_CODE[68]
GroupIdNotFoundError: type[KafkaError] = _BY_CODE[69]
MemberIdRequiredError: type[KafkaError] = _BY_CODE[79]
GroupMaxSizeReachedError: type[KafkaError] = _BY_CODE[81]
# The transaction coordinator's errors.
InvalidProducerIdMappingError: type[KafkaError] = _BY_CODE[49]
InvalidTransactionTimeoutError: type[KafkaError] = _BY_CODE[50]
ConcurrentTransactionsError: type[KafkaError] = _BY_CODE[51]
OperationNotAttemptedError: type[KafkaError] = _BY_CODE[55]
ProducerFencedError: type[KafkaError] = _BY_CODE[90]
TransactionalIdNotFoundError: type[KafkaError] = _BY_CODE[105]
FencedInstanceIdError: type[KafkaError] = _BY_CODE[82]
GroupSubscribedToTopicError: type[KafkaError] = _BY_CODE[86]
