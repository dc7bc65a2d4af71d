"""A broker that cannot start says why in one line and exits non-zero, through real ``tierlog broker``
processes: a port taken (listeners, metrics.port), a log dir locked by another broker, a log dir that is
a file or cannot be created, a meta.properties that is unreadable or of another node or cluster. Never a
traceback (unless --debug), never "stopped cleanly" after a failed start. A brand-new log dir is
formatted, not recovered from an "unclean shutdown".

Tests run as root, where removing permissions stops nothing: the unusable log dir is a file where the
folder should be, or a folder in /sys (no folder can be made there)."""

from __future__ import annotations

import os
import socket

import pytest

from tests.harness.broker import BrokerProcess, log_lines
from tests.harness.start_failures import PREFIX, assert_failed_start, run_broker, said


@pytest.fixture
def taken_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    yield s.getsockname()[1]
    s.close()


def test_a_taken_port_names_the_address_and_what_to_do(tmp_path, taken_port):
    result = run_broker(tmp_path, **{"log.dirs": str(tmp_path / "logs"),
                                     "listeners": f"PLAINTEXT://127.0.0.1:{taken_port}"})
    assert_failed_start(result, f"cannot listen on 127.0.0.1:{taken_port} (listener PLAINTEXT): address already "
                                f"in use; stop the other process or change listeners")
    # Only with --debug does the traceback follow the line.
    debug = run_broker(tmp_path, "--debug", **{"log.dirs": str(tmp_path / "logs"),
                                               "listeners": f"PLAINTEXT://127.0.0.1:{taken_port}"})
    assert debug.returncode == 1 and debug.stdout == ""
    assert said(debug)[0].startswith(PREFIX + f"cannot listen on 127.0.0.1:{taken_port}")
    assert "Traceback (most recent call last)" in debug.stderr and "stopped cleanly" not in debug.stderr


def test_a_taken_metrics_port_names_metrics_port(tmp_path, taken_port):
    result = run_broker(tmp_path, **{"log.dirs": str(tmp_path / "logs"), "metrics.port": str(taken_port)})
    assert_failed_start(result, f"cannot listen on 127.0.0.1:{taken_port}: address already in use; stop the "
                                f"other process or change metrics.port")


def test_a_log_dir_locked_by_another_broker(tmp_path):
    running = BrokerProcess(tmp_path / "logs", {}).start()
    try:
        result = run_broker(tmp_path, **{"log.dirs": str(tmp_path / "logs")})
        assert_failed_start(result, f"log dir {tmp_path / 'logs'} is in use by another broker",
                            "stop that broker or give this one another log.dirs")
        assert running.proc.poll() is None  # the other broker is untouched
    finally:
        assert running.stop() == 0
    assert "stopped cleanly" in "".join(running.output)


def test_a_log_dir_that_is_a_file_or_cannot_be_made(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    assert_failed_start(run_broker(tmp_path, **{"log.dirs": str(tmp_path / "file")}),
                        f"cannot use log dir {tmp_path / 'file'}:", "give log.dirs a folder")
    assert_failed_start(run_broker(tmp_path, **{"log.dirs": str(tmp_path / "file" / "logs")}),
                        f"cannot use log dir {tmp_path / 'file' / 'logs'}: not a directory")
    no_folder = f"/sys/tierlog-test-{os.getpid()}"
    try:
        os.makedirs(no_folder)
    except OSError:
        pass
    else:
        os.rmdir(no_folder)
        pytest.skip("/sys accepts new folders here")
    assert_failed_start(run_broker(tmp_path, **{"log.dirs": no_folder}), f"cannot use log dir {no_folder}: ",
                        "change log.dirs")


def test_meta_properties_unreadable_or_of_another_node_or_cluster(tmp_path):
    logs, other = tmp_path / "logs", tmp_path / "other"
    b = BrokerProcess(logs, {}).start()
    assert b.stop() == 0
    b = BrokerProcess(other, {}).start()  # formats a second cluster
    assert b.stop() == 0
    assert_failed_start(run_broker(tmp_path, **{"log.dirs": str(logs), "node.id": "2"}),
                        f"log dir {logs} belongs to node 1, not node 2", "set node.id=1 or give log.dirs")
    assert_failed_start(run_broker(tmp_path, **{"log.dirs": f"{logs},{other}"}),
                        "log dirs belong to different clusters", "give log.dirs folders of one cluster")
    meta = logs / "meta.properties"
    kept = meta.read_bytes()
    meta.write_bytes(b"\xff\xfe not text \x00")
    assert_failed_start(run_broker(tmp_path, **{"log.dirs": str(logs)}), f"cannot read {meta}: ",
                        "restore the file from a backup")
    meta.write_text("version=1\nnode.id=1\n")
    assert_failed_start(run_broker(tmp_path, **{"log.dirs": str(logs)}), f"invalid {meta}: no cluster.id")
    meta.write_bytes(kept)  # and the broker starts again
    b = BrokerProcess(logs, {}).start()
    assert b.stop() == 0


def test_a_new_log_dir_is_formatted_not_recovered(tmp_path):
    b = BrokerProcess(tmp_path / "logs", {}).start()
    assert b.stop() == 0
    text = "".join(b.output)
    assert "unclean" not in text, text
    formatted = [m for m in log_lines(b.output, "INFO") if m["message"].startswith("Formatting new log dir")]
    assert len(formatted) == 1 and str(tmp_path / "logs") in formatted[0]["message"]
    # The next start is a clean one, and formats nothing.
    b = BrokerProcess(tmp_path / "logs", {}).start()
    assert b.stop() == 0
    assert "Formatting" not in "".join(b.output) and "(clean shutdown)" in "".join(b.output)
