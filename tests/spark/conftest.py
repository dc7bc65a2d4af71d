"""Apache Spark against tierlog, through Spark's own Kafka source (spark-sql-kafka-0-10).

Fixtures (brokers come from the harness, tests/harness: ``start_broker``, ``broker``):

- ``spark_kafka_jars``: the connector jars for the installed PySpark, resolved by Maven into a
  cache folder outside the repository (scripts/spark_kafka_jars.py, loaded by tests/spark/sparklib.py).
- ``cluster``: one tiered tierlog broker per test module (remote folder ``cluster.remote_dir``), and
  ``tierlog_spark``: the session with the ``tierlog`` data source registered.
- ``spark``: ONE local SparkSession for the whole test session (``local[2,2]``: two threads, and a
  failed task is tried once more, as ``spark.task.maxFailures`` does on a cluster; no UI, bound to
  127.0.0.1, Python workers on ``sys.executable``, the connector on ``spark.jars``). A session
  costs about 1.6 GB, so tests never start their own (under pytest-xdist every test using it runs
  on the same worker: the ``spark`` group of tests/harness/plugin.py). Its JVM is stopped by PID at
  the end.

When PySpark, Java or Maven is missing (or Maven cannot resolve the connector) these tests are
skipped with the reason locally, and fail in CI (``CI`` set to true), so a CI run never passes
without them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.harness.broker import BrokerProcess
from tests.harness.tiered import tiered_settings
from tests.spark.sparklib import SparkKafkaJarsError, jars_module, unavailable

# Local mode ignores spark.task.maxFailures: "local[threads,maxFailures]" lets a failed task be retried,
# which the exactly-once sink's tests need (tests/spark/test_exactly_once_sink.py).
SPARK_MASTER = "local[2,2]"


@pytest.fixture(scope="session")
def spark_kafka_jars() -> list[Path]:
    missing = jars_module.missing_prerequisites()
    if missing:
        unavailable("missing " + ", ".join(missing))
    try:
        return jars_module.spark_jars()
    except SparkKafkaJarsError as e:
        unavailable(str(e))


@pytest.fixture(scope="session")
def spark(spark_kafka_jars, tmp_path_factory):
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:
        raise RuntimeError("a SparkContext is already running in this process; tests share the one from this fixture")
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP")}
    # Workers would otherwise run whatever `python3` is on PATH (no pyarrow, no tierlog), and Spark
    # would bind the machine's first interface instead of loopback.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    scratch = tmp_path_factory.mktemp("spark")
    started = time.monotonic()
    session = (
        SparkSession.builder.master(SPARK_MASTER)
        .appName("tierlog-tests")
        .config("spark.jars", ",".join(str(j) for j in spark_kafka_jars))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")  # no progress bars in test output
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(scratch / "local"))
        .config("spark.sql.warehouse.dir", str(scratch / "warehouse"))  # not ./spark-warehouse in the repo
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    gateway = SparkContext._gateway
    jvm = getattr(gateway, "proc", None)  # the spark-submit JVM pyspark launched (a Popen)
    print(f"\nSparkSession {session.version} ({SPARK_MASTER}) with {', '.join(j.name for j in spark_kafka_jars)} "
          f"ready in {time.monotonic() - started:.1f}s")
    try:
        yield session
    finally:
        session.stop()
        try:
            gateway.shutdown()
        except Exception:
            pass
        if jvm is not None and jvm.poll() is None:
            jvm.terminate()
            try:
                jvm.wait(20)
            except subprocess.TimeoutExpired:
                jvm.kill()
                jvm.wait()
        SparkContext._gateway = None
        SparkContext._jvm = None
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-tiered")
    # Transactions driven by hand (tests/harness/transactions.py): no KIP-890 verification.
    b = BrokerProcess(root / "logs", tiered_settings(
        root, **{"num.partitions": "3", "transaction.partition.verification.enable": "false"})).start()
    b.remote_dir = root / "remote"
    yield b
    b.kill()


@pytest.fixture(scope="module")
def tierlog_spark(spark):
    from tierlog.spark import register
    register(spark)
    return spark
