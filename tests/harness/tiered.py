"""Tiered brokers in tests: their settings, the broker's status endpoint, polling."""

from __future__ import annotations

import json
import urllib.request

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from tests.harness.broker import BrokerProcess
from tests.harness.waiting import wait_until
from tierlog.tiered.rsm.layout import SegmentManifest


def tiered_settings(root, **extra) -> dict:
    """A broker tiering to ``root/remote`` with the topic-based metadata manager on a single node, tasks
    and retention checked often, and the metrics endpoint on a free port."""
    return {
        "remote.log.storage.system.enable": "true", "rsm.config.dir": str(root / "remote"),
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "3",
        "remote.log.manager.task.interval.ms": "100", "log.retention.check.interval.ms": "100",
        "metrics.port": "0", "num.partitions": "1", **extra,
    }


def metrics_url(b: BrokerProcess) -> str:
    """http://host:port of the broker's metrics endpoint, from its start-up log."""
    for line in reversed(b.output):  # the latest start's (a restarted broker binds a new free port)
        if "Metrics on " in line:
            return line.split("Metrics on ", 1)[1].strip().rsplit("/", 1)[0]
    raise AssertionError("no 'Metrics on' line in the broker's output:\n" + "".join(b.output))


def scrape(target: BrokerProcess | str) -> list[Sample]:
    """Every sample of a broker's ``/metrics`` (a broker, or its metrics URL), parsed as Prometheus does."""
    url = target if isinstance(target, str) else metrics_url(target)
    text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def sample_value(samples: list[Sample], name: str, **labels) -> float | None:
    """The value of the sample ``name`` with exactly these labels, or None."""
    want = {k: str(v) for k, v in labels.items()}
    return next((s.value for s in samples if s.name == name and s.labels == want), None)


def call(b: BrokerProcess, path: str, method: str = "GET") -> dict:
    req = urllib.request.Request(metrics_url(b) + path, method=method)
    return json.load(urllib.request.urlopen(req, timeout=60))


def tier_status(b: BrokerProcess, topic: str | None = None) -> dict:
    return call(b, "/v1/tier/status" + (f"?topic={topic}" if topic else ""))


def wait_for(predicate, what: str, timeout: float = 60, every: float = 0.1):
    """Poll ``predicate`` until it returns something true (returned), or fail naming ``what``
    (``waiting.wait_until``, what before the timeout as the tiered tests write it)."""
    return wait_until(predicate, timeout, what=what, interval=every)


def remote_manifests(root, topic: str) -> list[SegmentManifest]:
    """The manifests of ``topic``'s segments in the filesystem store under ``root/remote``, by start offset."""
    found = [SegmentManifest.from_json(p.read_bytes()) for p in (root / "remote").rglob("*.manifest")]
    return sorted((m for m in found if m.topic == topic), key=lambda m: m.start_offset)


def assert_read_back_once(got: list, acked: list[bytes]) -> None:
    """Consumed records (``.offset``, ``.value``) in offset order, none twice, every acknowledged value there."""
    values = [m.value for m in got]
    assert [m.offset for m in got] == sorted(m.offset for m in got)
    assert len(values) == len(set(values)), "a record read twice"
    missing = set(acked) - set(values)
    assert not missing, f"{len(missing)} acknowledged records not read back, e.g. {sorted(missing)[:3]}"


def assert_uploaded_once(manifests: list[SegmentManifest]) -> None:
    """In upload order each segment starts at or below the end of what is remote + 1 and ends past it (a
    new leader's first may overlap the old leader's last: replicas roll at different offsets), and no
    segment id appears twice: nothing uploaded twice, nothing skipped."""
    end = -1
    for m in sorted(manifests, key=lambda m: m.written_ms):
        assert m.start_offset <= end + 1, f"gap before {m.start_offset}: remote ended at {end}"
        assert m.end_offset > end, f"{m.start_offset}-{m.end_offset} uploaded again (remote already to {end})"
        end = m.end_offset
    assert len({m.segment_id for m in manifests}) == len(manifests)
