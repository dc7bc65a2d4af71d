"""Spark's direct read of a tiered compacted topic (issue 23, part 3; docs/tiered-storage.md, "Compacted
topics"), on the shared session: keys produced, overwritten and deleted, cleaned and tiered, a later
cleaning replacing uploaded segments. The direct read (remote segments from the store, sparse offsets)
returns exactly the compacted view, also while a replacement and the segment it replaces are both
COPY_SEGMENT_FINISHED (the metadata manager holds the replaced one's DELETE_SEGMENT_STARTED), and equals
the read through the broker once everything settled."""

from __future__ import annotations

import pytest

from tests.harness.broker import BrokerProcess
from tests.harness.tiered import tiered_settings
from tests.spark.sparklib import source
from tests.tiered.compactlib import (
    CLEANER_SETTINGS,
    cleaned_and_tiered,
    create,
    fill,
    produce,
    rewrite_with_replacement_held,
    wait_until,
)
from tests.tiered.holds import delete_held_rlmm_settings


@pytest.fixture(scope="module")
def compacting_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-compacted")
    b = BrokerProcess(root / "logs", tiered_settings(
        root, **CLEANER_SETTINGS, **delete_held_rlmm_settings(root / "hold", root / "reached"))).start()
    b.remote_dir = root / "remote"
    b.hold, b.reached = root / "hold", root / "reached"
    yield b
    b.kill()


def spark_records(df) -> list[tuple]:
    rows = df.select("offset", "key", "value").collect()
    return sorted((r["offset"], bytes(r["key"]), None if r["value"] is None else bytes(r["value"])) for r in rows)


def test_direct_read_is_the_compacted_view(tierlog_spark, compacting_broker):
    spark, b = tierlog_spark, compacting_broker
    topic = "compacted-spark"
    create(b, topic)
    records = produce(b, topic, [(b"k%03d" % i, b"v1-%03d-" % i + b"x" * 80) for i in range(200)])
    last1 = records[-1][0]
    records += fill(b, topic, "a")
    wait_until(lambda: cleaned_and_tiered(b, topic, last1), "phase 1 cleaned and tiered")

    last2, expected = rewrite_with_replacement_held(b, topic, records)
    # The first range is remote only, held by its replacement and the replaced segment alike.
    assert spark_records(source(spark, b, topic)) == expected

    b.hold.unlink()
    wait_until(lambda: (st := cleaned_and_tiered(b, topic, last2)) and st["local_log_start_offset"] > last2,
               "phase 2 cleaned, tiered and deleted locally")
    direct = spark_records(source(spark, b, topic))
    assert direct == expected
    assert any(v is None for _, _, v in direct)
    assert spark_records(source(spark, b, topic, direct=False)) == expected
