"""What a person gets wrong with the Spark source and jobs, and what they are told: a remote store that
is not the broker's (a wrong folder, an empty one, a relative path used from another folder) is one
configuration error naming the path, never data loss, and no folder is created; an unreachable broker
fails in bounded time with one line; a missing ``spark`` extra names the pip command; progress on a
non-terminal is a few plain lines.

The in-process cases use the shared Spark session; the command-line cases run ``python -m tierlog
spark ...`` as subprocesses, and only one of them starts a JVM (the others fail before Spark starts).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.spark.sparklib import create, produce, source, tiered

SRC = Path(__file__).resolve().parents[2] / "src"


def cli(*args: str, cwd: Path | None = None, extra_path: Path | None = None, timeout: float = 300):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (extra_path, SRC) if p),
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "tierlog", "spark", *args], capture_output=True, text=True,
                         env=env, cwd=cwd, timeout=timeout)
    return out, time.monotonic() - started


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("tierlog: error: ")
    return lines[0]


@pytest.fixture(scope="module")
def wrong_topic(cluster):
    """A topic of 2 partitions with most of its records in remote storage."""
    topic = "misplaced"
    create(cluster, topic, partitions=2)
    produce(cluster, topic, 2000)
    tiered(cluster, topic, partitions=2)
    return topic, 2000


def test_a_wrong_remote_folder_is_one_configuration_error_and_is_not_created(tierlog_spark, cluster,
                                                                              wrong_topic, tmp_path):
    from tierlog.spark.jobs import ours
    from tierlog.spark.options import RemoteStoreConfigError
    topic, count = wrong_topic
    missing = tmp_path / "typo" / "remote"
    for fail_on_data_loss in ("true", "false"):
        df = source(tierlog_spark, cluster, topic, **{"tierlog.rsm.dir": str(missing),
                                                      "failOnDataLoss": fail_on_data_loss})
        with pytest.raises(Exception) as caught:
            df.count()
        error = ours(caught.value)
        assert isinstance(error, RemoteStoreConfigError), str(caught.value)[-2000:]
        assert str(missing) in str(error) and "does not exist" in str(error) and "tierlog.rsm.dir" in str(error)
        assert "set failOnDataLoss=false" not in str(caught.value)
    assert not (tmp_path / "typo").exists()

    # An existing folder that is not the broker's store: the metadata's segments are in none of it.
    empty = tmp_path / "empty"
    empty.mkdir()
    df = source(tierlog_spark, cluster, topic, **{"tierlog.rsm.dir": str(empty), "failOnDataLoss": "false"})
    with pytest.raises(Exception) as caught:
        df.count()
    error = ours(caught.value)
    assert isinstance(error, RemoteStoreConfigError), str(caught.value)[-2000:]
    assert re.search(rf"remote store {re.escape(str(empty))} holds none of the \d+ remote segment\(s\) the "
                     rf"metadata lists for topic {topic}", str(error)), str(error)
    assert list(empty.iterdir()) == []
    # The right store reads everything.
    assert source(tierlog_spark, cluster, topic).count() == count


def test_an_unreachable_broker_fails_the_read_in_bounded_time(tierlog_spark):
    from tierlog.spark.jobs import ours
    from tierlog.spark.options import BrokerUnreachableError
    started = time.monotonic()
    df = (tierlog_spark.read.format("tierlog").option("kafka.bootstrap.servers", "127.0.0.1:1")
          .option("subscribe", "t").option("tierlog.bootstrapTimeoutMs", "2000").load())
    with pytest.raises(Exception) as caught:
        df.count()
    assert time.monotonic() - started < 60
    error = ours(caught.value)
    assert isinstance(error, BrokerUnreachableError), str(caught.value)[-2000:]
    assert "127.0.0.1:1" in str(error) and "tierlog.bootstrapTimeoutMs" in str(error)


def test_relative_store_folder_in_a_config_file_used_from_another_folder(cluster, wrong_topic, tmp_path):
    """``tierlog spark export -c`` run elsewhere: the relative rsm.config.dir is found beside the file, every
    row is exported, and the progress on a non-terminal is a few plain lines (this one starts a JVM)."""
    import pyarrow.dataset as ds
    topic, count = wrong_topic
    conf = tmp_path / "conf"
    conf.mkdir()
    elsewhere = tmp_path / "a" / "b" / "elsewhere"  # where the path, taken as relative to it, leads nowhere
    elsewhere.mkdir(parents=True)
    config = conf / "server.properties"
    config.write_text("\n".join([
        f"listeners=PLAINTEXT://{cluster.bootstrap}",
        "log.dirs=logs",
        "remote.log.storage.system.enable=true",
        f"rsm.config.dir={os.path.relpath(cluster.remote_dir, conf)}",
        "rlmm.config.remote.log.metadata.topic.num.partitions=3",
    ]) + "\n")
    assert not (elsewhere / os.path.relpath(cluster.remote_dir, conf)).exists()
    out, took = cli("export", "-c", str(config), "--topic", topic, "--output", "export", "--master", "local[1]",
                    cwd=elsewhere)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == f"exported {count} record(s) to export"
    table = ds.dataset(str(elsewhere / "export"), format="parquet", partitioning="hive").to_table()
    assert table.num_rows == count
    assert not (elsewhere / os.path.relpath(cluster.remote_dir, conf)).exists()
    progress = [ln for ln in out.stderr.splitlines() if ln.startswith("export")]
    assert progress and len(progress) == len(set(progress)), out.stderr
    assert len(progress) <= took / 5 + 2, progress
    assert re.fullmatch(rf"export: {count:,} rows, [\d.,]+ [kM]B of Parquet written in .+", progress[-1]), progress
    assert "[Stage " not in out.stderr  # Spark's own bars are off: they garble a log
    assert not [ln for ln in out.stderr.splitlines() if re.fullmatch(r"\s*export 0\s*", ln)]


def test_audit_of_a_wrong_store_says_so_and_creates_nothing(cluster, wrong_topic, tmp_path):
    topic, _ = wrong_topic
    missing = tmp_path / "nowhere" / "remote"
    out, _ = cli("audit", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
                 "--option", f"tierlog.rsm.dir={missing}")
    assert out.returncode == 2, out.stderr[-3000:]
    line = one_error_line(out.stderr)
    assert str(missing) in line and "does not exist" in line and "tierlog.rsm.dir" in line
    assert "missing objects" not in out.stdout + out.stderr
    assert not (tmp_path / "nowhere").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    out, _ = cli("audit", "--bootstrap-server", cluster.bootstrap, "--topic", topic,
                 "--option", f"tierlog.rsm.dir={empty}")
    assert out.returncode == 2, out.stderr[-3000:]
    assert "holds none of the" in one_error_line(out.stderr)
    assert list(empty.iterdir()) == []


def test_unreachable_bootstrap_and_missing_extra_are_one_line(tmp_path):
    out, took = cli("export", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--output", str(tmp_path / "x"))
    assert took < 60
    assert out.returncode == 1
    line = one_error_line(out.stderr)
    assert "127.0.0.1:1" in line and "tierlog.bootstrapTimeoutMs" in line
    stub = tmp_path / "stub" / "pyspark"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'pyspark'\", name='pyspark')\n")
    out, _ = cli("storage-report", "--bootstrap-server", "127.0.0.1:1", extra_path=stub.parent)
    assert out.returncode != 0
    assert one_error_line(out.stderr) == ("tierlog: error: Spark jobs need the spark extra (pyspark is not installed); "
                                          "pip install 'tierlog[spark]'")


def test_relative_store_paths_resolve_beside_the_config_file_then_here(tmp_path, monkeypatch):
    from tierlog.spark.options import RemoteStoreConfigError, resolve_config_path
    (tmp_path / "conf" / "remote").mkdir(parents=True)
    (tmp_path / "here" / "data").mkdir(parents=True)
    config = str(tmp_path / "conf" / "server.properties")
    monkeypatch.chdir(tmp_path / "here")
    assert resolve_config_path("remote", config, "rsm.config.dir") == str(tmp_path / "conf" / "remote")
    assert resolve_config_path("./data", config, "rsm.config.dir") == str(tmp_path / "here" / "data")
    assert resolve_config_path("/abs/x/../y", config, "rsm.config.dir") == "/abs/y"
    with pytest.raises(RemoteStoreConfigError) as caught:
        resolve_config_path("data/remote", config, "rsm.config.dir")
    assert str(tmp_path / "conf" / "data" / "remote") in str(caught.value)
    assert str(tmp_path / "here" / "data" / "remote") in str(caught.value)


def test_progress_is_a_few_plain_lines_off_a_terminal_and_a_bar_on_one():
    from tierlog.spark.progress import Progress
    plain = io.StringIO()
    with Progress("export", "rows", total=1000, stream=plain, interval=3600) as p:
        for i in range(0, 1001, 10):
            p.update(i, i * 100)
        p.finish("1,000 rows")
    assert plain.getvalue().splitlines() == [plain.getvalue().splitlines()[-1]]
    assert re.fullmatch(r"export: 1,000 rows in \d+ s", plain.getvalue().strip())
    lines = io.StringIO()
    p = Progress("export", "rows", total=1000, stream=lines, interval=0)
    p.update(250, 5_000_000)
    assert p.text().startswith("250 of 1,000 rows (25%), 5.0 MB, ")
    p.update(251, 5_000_001)
    p.update(251, 5_000_002)  # looks the same as the line before: not printed again
    assert [ln.split(", ")[0] for ln in lines.getvalue().splitlines()] == [
        "export: 250 of 1,000 rows (25%)", "export: 251 of 1,000 rows (25%)"]

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True
    tty = Terminal()
    with Progress("export", "rows", total=1000, stream=tty) as p:
        p.update(500, 1_000_000)
        p.finish()
    assert "500 of 1,000 rows (50%)" in tty.getvalue()


def test_the_store_check_tells_retention_from_a_wrong_store(cluster, wrong_topic, tmp_path):
    """The rule of tierlog.spark.store.verify, on the driver alone (no Spark): one planned segment of a topic
    present is enough; none present is a wrong store, unless every planned segment is now below its
    partition's log start (retention deleted them after the metadata was read)."""
    import shutil

    from tierlog.spark.options import RemoteStoreConfigError, parse
    from tierlog.spark.plan import Planner, RemoteSlice
    from tierlog.spark.store import verify
    topic, _ = wrong_topic

    def planned(store: Path):
        opts = parse({"kafka.bootstrap.servers": cluster.bootstrap, "subscribe": topic, "tierlog.rsm.dir": str(store)})
        planner = Planner(opts)
        return opts, planner, {k: (0, v[1]) for k, v in planner.bounds(planner.partitions()).items()}

    opts, planner, ranges = planned(Path(cluster.remote_dir))
    try:
        tasks = planner.plan(ranges)
    finally:
        planner.close()
    segments: dict = {}
    for t in tasks:
        if isinstance(t, RemoteSlice):
            segments.setdefault((t.topic, t.partition), []).append(t.segment)
    assert sum(map(len, segments.values())) >= 4

    # Only the oldest segment of partition 0 in the store: retention at work, not a wrong store.
    partial = tmp_path / "partial"
    oldest = min(segments[(topic, 0)], key=lambda m: m.start_offset)
    for f in Path(cluster.remote_dir).glob(f"**/{topic}-*/0/{oldest.start_offset:020d}-*"):
        target = partial / f.relative_to(cluster.remote_dir)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(f, target)
    opts, planner, ranges = planned(partial)
    try:
        planner.plan(ranges)
    finally:
        planner.close()

    # None of them: a wrong store, unless the log start has moved past every one of them.
    empty = tmp_path / "empty"
    empty.mkdir()
    opts, planner, ranges = planned(empty)
    try:
        with pytest.raises(RemoteStoreConfigError, match=f"remote store {re.escape(str(empty))} holds none"):
            planner.plan(ranges)
    finally:
        planner.close()
    from tierlog.client.types import TopicPartition
    by_tp = {TopicPartition(t, p): mds for (t, p), mds in segments.items()}
    past = {tp: max(m.end_offset for m in mds) + 1 for tp, mds in by_tp.items()}
    verify(opts, by_tp, lambda tps: past)  # retention deleted them all: data loss, for failOnDataLoss
    with pytest.raises(RemoteStoreConfigError):
        verify(opts, by_tp, lambda tps: {tp: 0 for tp in tps})
