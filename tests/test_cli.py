"""The tierlog command line, run as a separate process the way users run it."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.harness.broker import log_lines
from tierlog.errors import InvalidConfigError

ROOT = Path(__file__).resolve().parents[1]


def tierlog(*args, cwd=ROOT):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "tierlog", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


def assert_one_line_error(result, *fragments):
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tierlog: error: ")
    for fragment in fragments:
        assert fragment in lines[0]
    assert result.stdout == ""


def run_broker(*args, cwd=ROOT, timeout=60):
    """Start ``tierlog broker``, wait until it says what it serves, stop it with SIGTERM.

    Returns (exit code, stdout, stderr)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "tierlog", "broker", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("tierlog broker ready on"):
                break
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, "".join(lines) + out, err


def test_broker_with_defaults(tmp_path):
    # Defaults apart from the log dir (default /tmp/tierlog-logs) and the port (default 9092, which
    # may be taken on a shared machine): the test leaves nothing behind.
    code, out, err = run_broker("-o", f"log.dir={tmp_path}/logs", "-o", "listeners=PLAINTEXT://127.0.0.1:0")
    assert code == 0, err
    assert "tierlog broker ready on PLAINTEXT://127.0.0.1:" in out
    assert "stopped cleanly" in out
    assert os.path.exists(tmp_path / "logs" / ".kafka_cleanshutdown")


def test_a_broker_that_cannot_start_says_why_and_never_stopped_cleanly(tmp_path):
    (tmp_path / "file").write_text("a file where the log dir's parent should be")
    result = tierlog("broker", "-o", f"log.dirs={tmp_path}/file/logs", "-o", "listeners=PLAINTEXT://127.0.0.1:0",
                     cwd=tmp_path)
    assert result.returncode == 1, result
    assert "stopped cleanly" not in result.stdout and result.stdout == ""
    assert result.stderr.splitlines() == [f"tierlog: error: broker failed to start: cannot use log dir "
                                          f"{tmp_path}/file/logs: not a directory; a file is in the way; give "
                                          f"log.dirs a folder"]


def test_broker_with_example_config(tmp_path):
    code, out, err = run_broker("-c", str(ROOT / "config/server.properties"), "-o",
                                "listeners=PLAINTEXT://127.0.0.1:0", "-o", "metrics.port=0", cwd=tmp_path)
    assert code == 0, err
    assert "tierlog broker ready on" in out
    assert "WARNING" not in err  # the example has no unknown keys
    assert os.path.exists(tmp_path / "data" / "logs" / ".kafka_cleanshutdown")


def test_broker_overrides_on_top_of_file(tmp_path):
    code, out, err = run_broker("-c", str(ROOT / "config/server.properties"), "-o",
                                f"log.dirs={tmp_path}/a,{tmp_path}/b", "--override",
                                "listeners=PLAINTEXT://127.0.0.1:19092", "-o", "metrics.port=0", cwd=tmp_path)
    assert code == 0, err
    assert "ready on PLAINTEXT://127.0.0.1:19092" in out
    assert (tmp_path / "a" / "meta.properties").exists() and (tmp_path / "b" / "meta.properties").exists()


def test_broker_start_after_a_kill_recovers_storage(tmp_path):
    from tierlog.records import build_batch
    from tierlog.storage import LogManager
    logs = tmp_path / "logs"
    m = LogManager([str(logs)])
    m.startup()
    lg = m.get_or_create_log("orders", 0)
    lg.append_as_leader(build_batch([(b"k", b"v")] * 3))
    m.checkpoint()
    for fd in m._locks:  # simulate a killed process: no clean shutdown marker
        os.close(fd)
    code, out, err = run_broker("-o", f"log.dir={logs}", "-o", "listeners=PLAINTEXT://127.0.0.1:0")
    assert code == 0, err
    assert "unclean shutdown" in err
    # The partition is not in the cluster metadata (written by hand above), so the broker drops it.
    assert "not in the cluster metadata" in err


def test_invalid_value_exits_2_with_one_line():
    result = tierlog("broker", "-o", "log.segment.bytes=-5")
    assert_one_line_error(
        result, "Invalid value -5 for configuration log.segment.bytes", "Value must be at least 14"
    )


def test_invalid_file(tmp_path):
    bad = tmp_path / "bad.properties"
    bad.write_text("remote.log.storage.system.enable=true\n")  # filesystem storage without rsm.config.dir
    assert_one_line_error(tierlog("broker", "-c", str(bad)), "rsm.config.dir")
    bad.write_text("k=\\uXYZW\n")
    assert_one_line_error(tierlog("broker", "-c", str(bad)), "Malformed")


def test_missing_file():
    assert_one_line_error(tierlog("broker", "-c", "no/such/file.properties"), "no/such/file.properties")


def test_bad_override_syntax():
    result = tierlog("broker", "-o", "novalue")
    assert result.returncode == 2 and "key=value" in result.stderr and "Traceback" not in result.stderr


def test_unknown_key_is_a_warning(tmp_path):
    code, _, err = run_broker("-o", "num.io.threads=8", "-o", f"log.dir={tmp_path}", "-o",
                              "listeners=PLAINTEXT://127.0.0.1:0")
    assert code == 0
    assert "num.io.threads" in err and "Traceback" not in err


def test_config_docs_matches_committed_file():
    result = tierlog("config", "docs")
    assert result.returncode == 0
    assert result.stdout == (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")


def test_config_docs_output_file(tmp_path):
    out = tmp_path / "configuration.md"
    assert tierlog("config", "docs", "--output", str(out)).returncode == 0
    assert out.read_text(encoding="utf-8").startswith("# Configuration")


def test_config_describe_text():
    result = tierlog("config", "describe", "-c", "config/server.properties")
    assert result.returncode == 0, result.stderr
    assert "# broker" in result.stdout and "# topic" in result.stdout
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("log.retention.hours "))
    assert "168" in line and "STATIC_BROKER_CONFIG" in line


def test_config_describe_json_with_topic_overrides():
    result = tierlog(
        "config",
        "describe",
        "-c",
        "config/server.properties",
        "--json",
        "--topic-overrides",
        "remote.storage.enable=true,cleanup.policy=delete,retention.ms=172800000",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    topic = {e["name"]: e for e in data["topic"]}
    assert topic["remote.storage.enable"]["value"] == "true"
    assert topic["remote.storage.enable"]["source"] == "DYNAMIC_TOPIC_CONFIG"
    assert topic["local.retention.ms"] == {
        "name": "local.retention.ms",
        "value": "86400000",
        "source": "STATIC_BROKER_CONFIG",
        "sensitive": False,
        "read_only": False,
        "type": "long",
        "synonyms": [
            {"name": "log.local.retention.ms", "value": "86400000", "source": "STATIC_BROKER_CONFIG"},
            {"name": "log.local.retention.ms", "value": "-2", "source": "DEFAULT_CONFIG"},
        ],
    }
    broker = {e["name"]: e for e in data["broker"]}
    assert broker["rsm.config.dir"]["value"] == "./data/remote"


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ("retention.ms=3600000,remote.storage.enable=true", "local.retention.ms"),
        ("no.such.setting=1", "Unknown topic config name: no.such.setting"),
    ],
)
def test_config_describe_invalid_topic_overrides(overrides, fragment):
    result = tierlog("config", "describe", "-c", "config/server.properties", "--topic-overrides", overrides)
    assert_one_line_error(result, fragment)


def test_usage_errors_exit_2():
    assert tierlog().returncode == 2
    assert tierlog("config").returncode == 2
    assert tierlog("frobnicate").returncode == 2


def test_topic_overrides_parsing():
    from tierlog.cli import parse_topic_overrides

    assert parse_topic_overrides("a=1,cleanup.policy=compact,delete,b=2") == {
        "a": "1",
        "cleanup.policy": "compact,delete",
        "b": "2",
    }


def test_invalid_config_with_unknown_key_prints_only_the_error():
    result = tierlog("broker", "-o", "num.io.threads=8", "-o", "num.partitions=0")
    assert_one_line_error(result, "num.partitions")


def test_the_broker_runs_on_uvloop_unless_asked_for_asyncios_loop(monkeypatch):
    import asyncio

    import uvloop

    from tierlog import broker_main
    monkeypatch.delenv(broker_main.EVENT_LOOP_ENV, raising=False)
    assert broker_main.event_loop_runner() is uvloop.run
    monkeypatch.setenv(broker_main.EVENT_LOOP_ENV, "asyncio")
    assert broker_main.event_loop_runner() is asyncio.run
    monkeypatch.setenv(broker_main.EVENT_LOOP_ENV, "libev")
    with pytest.raises(InvalidConfigError, match="TIERLOG_EVENT_LOOP must be uvloop or asyncio"):
        broker_main.event_loop_runner()


def test_a_broker_says_which_event_loop_it_runs_on(broker):
    import uvloop
    lines = [m["message"] for m in log_lines(broker.output, "INFO", "tierlog.broker_main")]
    assert f"Event loop: uvloop {uvloop.__version__}" in lines, lines
