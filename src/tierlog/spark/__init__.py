"""Apache Spark pipelines on tierlog, through PySpark: the ``tierlog`` data source and the jobs.

    from tierlog.spark import session
    spark = session()                      # local[*] unless a master is given; registers "tierlog"
    df = (spark.read.format("tierlog")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("subscribe", "orders")
          .option("tierlog.rsm.dir", "./data/remote")   # read remote segments straight from the store
          .load())

See docs/spark.md.
"""

from __future__ import annotations

import os
import sys


def prepare_environment() -> None:
    """Spark's Python workers run ``python3`` from PATH unless PYSPARK_PYTHON says otherwise (and then
    lack tierlog and pyarrow), and Spark binds the machine's first interface unless SPARK_LOCAL_IP is set:
    set both for the user when unset."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark) -> None:
    """Make ``format("tierlog")`` available in a SparkSession, with filter pushdown on: Spark leaves
    Python data sources without it by default, and refuses a reader taking filters then (unless the
    session turned it off on purpose; then read with ``tierlog.filterPushdown=false``)."""
    from tierlog.spark.source import TierlogDataSource
    spark.dataSource.register(TierlogDataSource)
    if spark.conf.get(PUSHDOWN_CONF, None) is None:
        spark.conf.set(PUSHDOWN_CONF, "true")


def session(master: str | None = None, app_name: str = "tierlog", **configs):
    """A SparkSession with the ``tierlog`` data source registered (``local[*]`` by default)."""
    prepare_environment()
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.master(master or "local[*]").appName(app_name)
    for key, value in {"spark.sql.session.timeZone": "UTC", **configs}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


__all__ = ["prepare_environment", "register", "session"]
