"""Apache Kafka as a reference peer for tierlog, from ``scripts/kafka_peer.py``.

``kafka_peer_module`` is that script (``KafkaServer``, ``ToolRunner``, ``run_tool``, ``resolve``...);
``resolve_jars()`` returns Kafka's jars (resolved by Maven into a cache folder outside the repository
the first time) or, when Java or Maven is missing or Maven cannot reach Maven Central, skips locally
and fails in CI. ``start_kafka`` starts a single-node KRaft broker with ``SHARED_SETTINGS``, the
static settings the session's tierlog peer starts with too, so configs and their sources compare.
"""

from __future__ import annotations

from pathlib import Path

from tests.harness.prerequisites import load_script
from tests.harness.prerequisites import unavailable as _unavailable

kafka_peer_module = load_script("kafka_peer.py", "tierlog_kafka_peer")
run_tool = kafka_peer_module.run_tool
KafkaPeerError = kafka_peer_module.KafkaPeerError

# Static settings both peers start with (what Kafka's own single-node test clusters set).
SHARED_SETTINGS = {
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
}


def unavailable(reason: str):
    """The peer cannot run: skip locally, fail in CI."""
    _unavailable("Apache Kafka peer", reason)


def resolve_jars() -> list[Path]:
    missing = kafka_peer_module.missing_prerequisites()
    if missing:
        unavailable("missing " + ", ".join(missing))
    try:
        return kafka_peer_module.resolve()
    except KafkaPeerError as e:
        unavailable(str(e))


def start_kafka(work_dir: Path, name: str, tiered: bool = False, settings: dict | None = None):
    """A started ``KafkaServer`` in ``work_dir`` (tiered through Kafka's LocalTieredStorage if asked)."""
    kafka = kafka_peer_module.KafkaServer(work_dir, tiered=tiered, overrides={**SHARED_SETTINGS, **(settings or {})})
    kafka.start()
    print(f"\nApache Kafka {kafka_peer_module.KAFKA_VERSION} ({name}) ready on {kafka.bootstrap} "
          f"in {kafka.start_seconds:.1f}s (format + JVM start)")
    return kafka
