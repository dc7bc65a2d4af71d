"""``tierlog zookeeper start``: a development ZooKeeper that clients can use, stopped by SIGTERM with its
server; one line when Java or ZooKeeper is missing."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient

from tests.cli.clilib import env, one_error_line, tierlog
from tests.harness import zookeeper as zk
from tests.harness.waiting import wait_until
from tierlog.tools import zookeeper


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def installed():
    zk.require()


def test_start_serves_clients_until_sigterm(tmp_path, installed):
    port, data = zk.free_port(), tmp_path / "zk"
    proc = subprocess.Popen([sys.executable, "-m", "tierlog", "zookeeper", "start", "--port", str(port),
                             "--data-dir", str(data)], env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()), daemon=True)
        started = time.monotonic()
        reader.start()
        reader.join(90)
        assert lines and lines[0].startswith(f"ZooKeeper ready on 127.0.0.1:{port} "), (lines, proc.poll())
        print(f"\ntierlog zookeeper start ready in {time.monotonic() - started:.1f}s")
        server_pid = int(re.search(r"\(pid (\d+),", lines[0]).group(1))
        assert (data / "zoo.cfg").is_file() and (data / "zookeeper.log").is_file()

        client = KazooClient(f"127.0.0.1:{port}", timeout=10)
        client.start(timeout=15)
        try:
            path = f"/cli-{uuid.uuid4().hex[:8]}"
            client.create(path, b"hello")
            assert client.get(path)[0] == b"hello"
        finally:
            client.stop()
            client.close()

        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0, proc.stderr.read()
        assert "ZooKeeper stopped" in proc.stderr.read()
        # the server is the command's child: it went with it
        wait_until(lambda: not _alive(server_pid), 10, what=f"ZooKeeper pid {server_pid} gone with the command")
        assert not zookeeper.is_ok("127.0.0.1", port)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def test_missing_jar_is_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = subprocess.run([sys.executable, "-m", "tierlog", "zookeeper", "start", "--data-dir", str(tmp_path / "d")],
                            env={**env(), "ZOOKEEPER_HOME": str(empty)}, capture_output=True, text=True, timeout=60)
    one_error_line(result, "holds no zookeeper-*.jar", "apt-get install zookeeper")
    assert result.returncode == 1 and not (tmp_path / "d").exists()


def test_missing_debian_jar_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.delenv("ZOOKEEPER_HOME", raising=False)
    monkeypatch.setattr(zookeeper, "DEBIAN_JAR", tmp_path / "zookeeper.jar")
    with pytest.raises(zookeeper.ZooKeeperError, match=r"is missing\); install Debian's zookeeper package: "
                                                       r"apt-get install zookeeper"):
        zookeeper.find_classpath()


def test_missing_java_is_one_line(tmp_path):
    environment = {k: v for k, v in env().items() if k != "JAVA_HOME"}
    environment["PATH"] = str(tmp_path)  # nothing there: no java
    result = subprocess.run([sys.executable, "-m", "tierlog", "zookeeper", "start", "--data-dir", str(tmp_path / "d")],
                            env=environment, capture_output=True, text=True, timeout=60)
    one_error_line(result, "java is not installed", "apt-get install zookeeper")


def test_port_in_use_is_one_line(tmp_path, installed):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = tierlog("zookeeper", "start", "--port", port, "--data-dir", tmp_path / "d", timeout=120)
    one_error_line(result, f"127.0.0.1:{port} is already in use", "choose another port")
