"""Kafka's control records: the COMMIT and ABORT transaction markers (``EndTransactionMarker``).

A marker is a batch of its own with the control and transactional attribute bits set, the producer id and
epoch of the transaction it ends, no sequence (-1), and one record:

- key: int16 version (0) + int16 control type (ABORT 0, COMMIT 1; Kafka's ``ControlRecordType``);
- value: int16 version (0) + int32 coordinator epoch (Kafka's ``EndTxnMarker`` message, version 0).

Kafka reads a key or value of a newer version as version 0, ignoring what follows; so does this module.
"""

from __future__ import annotations

import struct

from tierlog.errors import CorruptMessageError
from tierlog.records.batch import NO_SEQUENCE
from tierlog.records.record import Record, build_batch

ABORT = 0
COMMIT = 1
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


def end_txn_marker_batch(producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                         timestamp: int) -> bytes:
    """A marker batch at base offset 0 (the log assigns its offset and leader epoch), as Kafka's
    ``MemoryRecords.withEndTransactionMarker`` builds it."""
    key = _KEY.pack(CONTROL_KEY_VERSION, COMMIT if commit else ABORT)
    value = _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    return build_batch([Record(timestamp=timestamp, key=key, value=value)], producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=NO_SEQUENCE, is_transactional=True,
                       is_control=True)


def parse_end_txn_marker(record: Record) -> tuple[int, int]:
    """(control type, coordinator epoch) of a marker record; CorruptMessageError for anything else."""
    key, value = record.key, record.value
    if key is None or len(key) < _KEY.size or value is None or len(value) < _VALUE.size:
        raise CorruptMessageError("control record without a transaction marker key and value")
    key_version, control_type = _KEY.unpack_from(key)
    value_version, coordinator_epoch = _VALUE.unpack_from(value)
    if key_version < 0 or value_version < 0:
        raise CorruptMessageError(f"transaction marker of negative version (key {key_version}, "
                                  f"value {value_version})")
    if control_type not in (ABORT, COMMIT):
        raise CorruptMessageError(f"control record of type {control_type} is not a transaction marker")
    return control_type, coordinator_epoch
