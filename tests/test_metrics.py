"""tierlog.metrics against prometheus_client itself: the counters and histograms that count in plain Python
numbers must expose exactly what ``prometheus_client.Counter``/``Histogram`` expose after the same updates."""

from __future__ import annotations

import random
import threading

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tierlog.metrics import MS_BUCKETS, MetricsRegistry


def reference_registry():
    reg = CollectorRegistry()
    return reg, {
        "c": prometheus_client.Counter("t_requests_total", "Requests.", ("request",), registry=reg),
        "u": prometheus_client.Counter("t_plain_total", "No labels.", registry=reg),
        "h": prometheus_client.Histogram("t_time_ms", "Times.", ("request",), buckets=MS_BUCKETS, registry=reg),
        "hu": prometheus_client.Histogram("t_size", "Sizes.", buckets=(1, 10, 100), registry=reg),
    }


def our_registry():
    reg = MetricsRegistry()
    return reg, {
        "c": reg.counter("t_requests_total", "Requests.", ("request",)),
        "u": reg.counter("t_plain_total", "No labels."),
        "h": reg.histogram("t_time_ms", "Times.", ("request",)),
        "hu": reg.histogram("t_size", "Sizes.", buckets=(1, 10, 100)),
    }


def test_the_exposition_is_the_one_prometheus_client_gives():
    ref_reg, ref = reference_registry()
    reg, ours = our_registry()
    assert reg.render() == generate_latest(ref_reg).decode()  # nothing counted yet: only HELP/TYPE, 0 unlabelled
    rnd = random.Random(7)
    # Values on the bucket bounds, between them, above the last and zero.
    values = [0, *MS_BUCKETS, 0.3, 7.5, 40000.0] + [rnd.uniform(0, 50) for _ in range(300)]
    for i, v in enumerate(values):
        name = ("Produce", "Fetch", "Metadata")[i % 3]
        ref["c"].labels(name).inc()
        ours["c"].labels(name).inc()
        ref["c"].labels(name).inc(i)
        ours["c"].inc(i, request=name)
        ref["h"].labels(name).observe(v)
        ours["h"].labels(name).observe(v)
        ref["u"].inc(2.5)
        ours["u"].inc(2.5)
        ref["hu"].observe(v)
        ours["hu"].observe(v)
    assert reg.render() == generate_latest(ref_reg).decode()
    ref["c"].remove("Fetch")
    ref["h"].remove("Fetch")
    ours["c"].remove(request="Fetch")
    ours["h"].remove_matching(request="Fetch")
    assert reg.render() == generate_latest(ref_reg).decode()
    assert ours["c"].value(request="Produce") == ref["c"].labels("Produce")._value.get()
    assert ours["h"].value(request="Metadata") == sum(1 for i in range(len(values)) if i % 3 == 2)
    assert ours["u"].total() == 2.5 * len(values)


def test_counts_from_several_threads_are_all_kept():
    reg, ours = our_registry()
    child = ours["c"].labels("Produce")
    hist = ours["h"].labels("Produce")
    per_thread = 20000

    def work():
        for _ in range(per_thread):
            child.inc()
            hist.observe(1.0)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ours["c"].value(request="Produce") == 4 * per_thread
    assert ours["h"].value(request="Produce") == 4 * per_thread
    assert f't_time_ms_sum{{request="Produce"}} {float(4 * per_thread)}' in reg.render()


def test_bad_updates_are_refused_as_prometheus_client_refuses_them():
    reg, ours = our_registry()
    with pytest.raises(ValueError):
        ours["c"].labels("Produce").inc(-1)
    with pytest.raises(ValueError):
        ours["c"].labels("Produce", "extra")
    with pytest.raises(ValueError):
        ours["u"].labels()
    with pytest.raises(ValueError):
        ours["u"].inc(request="Produce")
    with pytest.raises(ValueError):
        reg.histogram("t_bad", "Unsorted.", buckets=(10, 1))
    with pytest.raises(ValueError):
        reg.counter("t_time_ms", "Already a histogram.")
