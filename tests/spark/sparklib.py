"""What the Spark tests need besides the session: Spark's Kafka connector jars (scripts/spark_kafka_jars.py)
and the rule for a missing prerequisite (skip locally, fail in CI)."""

from __future__ import annotations

from tests.harness.prerequisites import load_script
from tests.harness.prerequisites import unavailable as unavailable_in_ci_or_skip

jars_module = load_script("spark_kafka_jars.py", "tierlog_spark_kafka_jars")
SparkKafkaJarsError = jars_module.SparkKafkaJarsError


def unavailable(reason: str):
    """Spark's Kafka source cannot run: skip locally, fail in CI."""
    unavailable_in_ci_or_skip("Spark's Kafka source", reason)
