"""The remote copy and fetch quotas' rate (KIP-956): Kafka's SimpleRate over sampled windows."""

from __future__ import annotations

from tierlog.tiered.quota import RateQuota


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000.0

    def __call__(self) -> float:
        return self.ms


def test_within_the_bound_nothing_is_throttled():
    clock = Clock()
    q = RateQuota(lambda: 1000, samples=11, window_s=1, clock=clock)
    assert q.throttle_time_ms() == 0
    q.record(1000)  # exactly the bound over the minimum window of 1 s
    assert q.throttle_time_ms() == 0


def test_a_burst_is_throttled_until_its_rate_falls_to_the_bound():
    clock = Clock()
    q = RateQuota(lambda: 100, samples=11, window_s=1, clock=clock)
    q.record(1000)
    # 1000 bytes over the minimum window of 1 s: 10x the bound, hold off (1000-100)/100 * 1 s.
    assert q.rate() == 1000
    assert q.throttle_time_ms() == 9000
    clock.ms += 5000
    # 1000 bytes over 5 s = 200 B/s: still twice the bound; (200-100)/100 * 5 s more.
    assert q.throttle_time_ms() == 5000
    clock.ms += 5000
    assert q.throttle_time_ms() == 0  # 100 B/s over 10 s
    clock.ms += 1000
    assert q.rate() == 0  # the sample is older than 11 windows: forgotten


def test_the_bound_is_read_on_every_check():
    bound = {"v": 10}
    q = RateQuota(lambda: bound["v"], samples=2, window_s=1, clock=Clock())
    q.record(500)
    assert q.throttle_time_ms() > 0
    bound["v"] = 10_000  # a dynamic config change
    assert q.throttle_time_ms() == 0


def test_samples_roll_over_so_old_bytes_stop_counting():
    clock = Clock()
    q = RateQuota(lambda: 1e9, samples=3, window_s=1, clock=clock)
    for _ in range(6):
        q.record(300)
        clock.ms += 1000
    # samples older than three windows are forgotten: 600 bytes over the 2 s since the oldest live one
    assert q.rate() == 300
