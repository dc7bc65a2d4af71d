"""What the Spark tests need besides the session: Spark's Kafka connector jars (scripts/spark_kafka_jars.py),
the rule for a missing prerequisite (skip locally, fail in CI), and the helpers of the tests against a tiered
broker (the ``cluster`` fixture of conftest.py): create, produce, wait until tiered, read with the source."""

from __future__ import annotations

from confluent_kafka import Producer
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.harness.prerequisites import load_script
from tests.harness.prerequisites import unavailable as unavailable_in_ci_or_skip
from tests.harness.tiered import tier_status
from tests.harness.waiting import not_yet, wait_until

jars_module = load_script("spark_kafka_jars.py", "tierlog_spark_kafka_jars")
SparkKafkaJarsError = jars_module.SparkKafkaJarsError


def unavailable(reason: str):
    """Spark's Kafka source cannot run: skip locally, fail in CI."""
    unavailable_in_ci_or_skip("Spark's Kafka source", reason)


TIERED_TOPIC = {"remote.storage.enable": "true", "segment.bytes": "40000", "local.retention.bytes": "1",
                "file.delete.delay.ms": "0"}
ROWS = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def create(b, topic: str, partitions: int = 3, configs: dict | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    configs = TIERED_TOPIC if configs is None else configs
    admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs)])
    admin.close()


def produce(b, topic: str, count: int, start: int = 0, codec: str = "none") -> None:
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5, "batch.size": 4000, "compression.type": codec})
    for i in range(start, start + count):
        p.produce(topic, b"value-%06d" % i + b"x" * 100, b"key-%d" % i, headers=[("n", b"%d" % i), ("empty", None)])
    assert p.flush(30) == 0


def tiered(b, topic: str, partitions: int = 3) -> list[dict]:
    """Until every partition's rolled segments are copied and its local log starts past 0."""

    def done():
        s = tier_status(b, topic)["partitions"]
        if len(s) == partitions and all(p["ready"] and p["copy_lag_segments"] == 0 and p["local_segments"] <= 2
                                        and p["local_log_start_offset"] > 0 for p in s):
            return s
        return not_yet(s)

    return wait_until(done, 120, interval=0.2, what=f"{topic} to be tiered (its partitions)")


def source(spark, b, topic: str, direct: bool = True, **options):
    reader = (spark.read.format("tierlog").option("kafka.bootstrap.servers", b.bootstrap).option("subscribe", topic)
              .option("includeHeaders", "true"))
    if direct:
        reader = reader.option("tierlog.rsm.dir", str(b.remote_dir))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()
