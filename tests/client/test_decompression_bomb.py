"""A consumer fetching a decompression bomb (a 64 KiB-class zstd batch of 1 GiB of zeros after one record)
gets a clear error, DecompressedTooLargeError, after decoding at most the bound, never GBs of memory; so do
the record decoder and the Spark reader's columnar decoder."""

from __future__ import annotations

import resource
import time

import pytest

from tests.harness import poison
from tierlog.client.fetcher import CompletedFetch
from tierlog.client.types import TopicPartition
from tierlog.records import iter_records
from tierlog.records.compression import DecompressedTooLargeError, decompression_limit


def _max_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("kind", ["zstd bomb", "gzip bomb"])
def test_consumer_raises_on_a_bomb_instead_of_inflating_it(kind):
    bomb = poison.POISON[kind](int(time.time() * 1000))
    assert len(bomb) < 300 << 10
    before = _max_rss_mib()
    cf = CompletedFetch(TopicPartition("t", 0), 0, bomb, None, True)
    with pytest.raises(DecompressedTooLargeError, match="more than the limit"):
        cf.take(10, None, None)
    with pytest.raises(DecompressedTooLargeError):
        list(iter_records(bomb))
    assert _max_rss_mib() - before < 2 * decompression_limit(1) / (1 << 20)


def test_spark_columnar_reader_raises_on_a_bomb():
    columnar = pytest.importorskip("tierlog.spark.columnar")
    bomb = poison.POISON["zstd bomb"](int(time.time() * 1000))
    with pytest.raises(DecompressedTooLargeError):
        columnar._sections(memoryview(bomb), 0, 10)
