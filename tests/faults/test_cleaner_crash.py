"""The log cleaner under SIGKILL, four cycles (one per kill point: while a round maps, while it copies, between
two groups' swaps, inside a swap): after each restart no left-over ``.cleaned``/``.swap`` file, the segments
on disk in increasing offsets without overlap, every key's latest acknowledged value read back and no deleted
key's older value (tests/harness/cleaner_faults.py; scripts/cleaner_faults.py runs twenty and more cycles)."""

from __future__ import annotations

import random

import pytest

from tests.harness import cleaner_faults as cf


@pytest.mark.slow
def test_kills_during_cleaning_lose_no_live_key_and_resurrect_no_deleted_one(tmp_path):
    rng = random.Random(23)
    run = cf.Run(keys=2000)
    b = cf.start_broker(tmp_path, throttle_bytes=1048576)
    try:
        for n in range(len(cf.KILL_POINTS)):
            report = cf.cycle(b, run, n, rng, timeout=120, min_acked=1500)
            assert report["problems"] == [], report
            assert report["violation_count"] == 0, report
    finally:
        b.stop()
    result = cf.summary(run, b)
    assert result["ok"], result
    assert result["records_acked"] > 6000 and result["tombstones_acked"] > 0, result
    assert result["cleaner_rounds_completed"] > 0, result
    # the cleaner did compact: after the last round, about one record per key is left
    assert run.cycles[-1]["records_read_after_round"] < result["records_acked"] // 2, result
