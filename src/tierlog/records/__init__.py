"""Kafka record batch v2 (magic 2) codec, sans-IO: bytes in, bytes out.

``batch`` reads, checks and patches batch headers in place (the broker's hot path, no per-record
work); ``record`` builds and decodes whole batches record by record; ``compression`` wraps Kafka's
codecs (gzip, snappy with xerial framing, lz4 frame, zstd) through cramjam.
"""

from tierlog.records.batch import (
    ATTRIBUTES_POS,
    BASE_OFFSET_POS,
    BASE_SEQUENCE_POS,
    BASE_TIMESTAMP_POS,
    CRC_POS,
    LAST_OFFSET_DELTA_POS,
    LENGTH_POS,
    LOG_OVERHEAD,
    MAGIC_POS,
    MAX_TIMESTAMP_POS,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    PARTITION_LEADER_EPOCH_POS,
    PRODUCER_EPOCH_POS,
    PRODUCER_ID_POS,
    RECORD_BATCH_OVERHEAD,
    RECORDS_COUNT_POS,
    RECORDS_POS,
    BatchHeader,
    TimestampType,
    is_transactional,
    iter_batches,
    patch_base_offset,
    patch_log_append_time,
    patch_partition_leader_epoch,
    read_header,
    transactional_producer,
    validate_batches,
    verify_crc,
    walk_batches,
)
from tierlog.records.compression import CompressionType, compress, decompress
from tierlog.records.record import (
    Header,
    Record,
    build_batch,
    decode_batch,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    iter_records,
    recompress_batches,
)

__all__ = [
    "ATTRIBUTES_POS", "BASE_OFFSET_POS", "BASE_SEQUENCE_POS", "BASE_TIMESTAMP_POS", "CRC_POS",
    "LAST_OFFSET_DELTA_POS", "LENGTH_POS", "LOG_OVERHEAD", "MAGIC_POS", "MAX_TIMESTAMP_POS",
    "NO_PARTITION_LEADER_EPOCH", "NO_PRODUCER_EPOCH", "NO_PRODUCER_ID", "NO_SEQUENCE", "NO_TIMESTAMP",
    "PARTITION_LEADER_EPOCH_POS", "PRODUCER_EPOCH_POS", "PRODUCER_ID_POS", "RECORD_BATCH_OVERHEAD",
    "RECORDS_COUNT_POS", "RECORDS_POS",
    "BatchHeader", "TimestampType", "iter_batches", "patch_base_offset", "patch_log_append_time",
    "patch_partition_leader_epoch", "read_header", "validate_batches", "verify_crc", "walk_batches",
    "is_transactional", "transactional_producer",
    "CompressionType", "compress", "decompress",
    "Header", "Record", "build_batch", "decode_batch", "iter_records", "recompress_batches",
    "decode_varint", "decode_varlong", "encode_varint", "encode_varlong",
]
