#!/usr/bin/env python3
"""Real S3 API servers for tests and benchmarks: SeaweedFS and S3Proxy, installed outside the repository.

- S3Proxy (``org.gaul:s3proxy``, a jar with its dependencies) is copied by Maven from Maven Central into
  ``~/.cache/tierlog/s3proxy-<version>`` (or ``$TIERLOG_S3PROXY_CACHE``) and run with Java, with the jclouds
  ``filesystem`` backend and v2-or-v4 signatures.
- SeaweedFS (``weed``) is built from its Go module, fetched through the Go module proxy (``go mod download``)
  into ``~/.cache/tierlog/seaweedfs-<version>`` (or ``$TIERLOG_SEAWEEDFS_CACHE``); a ``weed`` named by
  ``$TIERLOG_WEED`` or found on PATH or in ``~/go/bin`` is used instead when there is one. It runs as one
  ``weed server`` process (master, volume server, filer and S3 gateway) with an S3 identity of its own.

Command line::

    scripts/s3_servers.py install [s3proxy|seaweedfs ...]   # what is missing (CI runs this)
    scripts/s3_servers.py where                             # the jar and the binary, or why not
    scripts/s3_servers.py serve s3proxy|seaweedfs [--dir D] # one server on 127.0.0.1 until Ctrl-C

From Python (tests/harness/s3_servers.py loads this file)::

    with start("seaweedfs", tmp_dir, buckets=["tiered"]) as server:
        server.endpoint, server.access_key, server.secret_key

Every server listens on 127.0.0.1 only, phones nowhere, and is stopped by its PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

S3PROXY_VERSION = "2.6.0"
SEAWEEDFS_MODULE = "github.com/seaweedfs/seaweedfs"
SEAWEEDFS_VERSION = "v0.0.0-20261109003541-7506e5f91cd6"
KINDS = ("seaweedfs", "s3proxy")
ACCESS_KEY = "tierlog-test-access"
SECRET_KEY = "tierlog-test-secret-key"
REGION = "us-east-1"


class S3ServerError(RuntimeError):
    """A server cannot be installed, found or started; the message says why in one line or a log tail."""


# ------------------------------------------------------------------------------------------ install


def _cache(env: str, name: str) -> Path:
    value = os.environ.get(env)
    path = Path(value).expanduser() if value else Path.home() / ".cache" / "tierlog" / name
    repo = Path(__file__).resolve().parent.parent
    if path.resolve().is_relative_to(repo):
        raise S3ServerError(f"the cache {path} is inside the repository; nothing of the servers is committed")
    return path


def s3proxy_dir() -> Path:
    return _cache("TIERLOG_S3PROXY_CACHE", f"s3proxy-{S3PROXY_VERSION}")


def seaweedfs_dir() -> Path:
    return _cache("TIERLOG_SEAWEEDFS_CACHE", f"seaweedfs-{SEAWEEDFS_VERSION.rsplit('-', 1)[-1]}")


def s3proxy_jar() -> Path | None:
    jar = s3proxy_dir() / f"s3proxy-{S3PROXY_VERSION}-jar-with-dependencies.jar"
    return jar if jar.exists() else None


def weed_binary() -> Path | None:
    """The ``weed`` to run: ``$TIERLOG_WEED``, the cache's build, PATH, then ``~/go/bin``."""
    named = os.environ.get("TIERLOG_WEED")
    if named:
        return Path(named) if Path(named).exists() else None
    for candidate in (seaweedfs_dir() / "bin" / "weed", shutil.which("weed"), Path.home() / "go" / "bin" / "weed"):
        if candidate and Path(candidate).exists():
            return Path(candidate)
    return None


def missing(kind: str) -> str | None:
    """Why ``kind`` cannot run here (None when it can)."""
    if kind == "s3proxy":
        if shutil.which("java") is None:
            return "java not found (a JRE 17 runs S3Proxy)"
        if s3proxy_jar() is None:
            return f"S3Proxy {S3PROXY_VERSION} not installed in {s3proxy_dir()} (scripts/s3_servers.py install)"
    elif kind == "seaweedfs":
        if os.environ.get("TIERLOG_WEED") and weed_binary() is None:
            return f"TIERLOG_WEED={os.environ['TIERLOG_WEED']} does not exist"
        if weed_binary() is None:
            return f"SeaweedFS's weed not built in {seaweedfs_dir() / 'bin'} (scripts/s3_servers.py install)"
    else:
        raise S3ServerError(f"unknown S3 server {kind!r} (one of {', '.join(KINDS)})")
    return None


@contextlib.contextmanager
def _locked(folder: Path):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be installing right now
        yield


def _run(cmd: list[str], cwd: Path | None = None, env: dict | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise S3ServerError(f"{' '.join(cmd[:3])} ... failed ({proc.returncode}):\n"
                            f"{(proc.stdout + proc.stderr)[-4000:]}")
    return proc.stdout


def install_s3proxy() -> Path:
    """S3Proxy's jar from Maven Central (through Maven and its local repository) into its cache folder."""
    folder = s3proxy_dir()
    with _locked(folder):
        if (jar := s3proxy_jar()) is not None:
            return jar
        if shutil.which("mvn") is None:
            raise S3ServerError("mvn (Apache Maven) is needed to fetch S3Proxy from Maven Central")
        _run(["mvn", "-B", "-q", "dependency:copy",
              f"-Dartifact=org.gaul:s3proxy:{S3PROXY_VERSION}:jar:jar-with-dependencies",
              f"-DoutputDirectory={folder}"], cwd=folder)
        jar = s3proxy_jar()
        if jar is None:
            raise S3ServerError(f"mvn copied no S3Proxy jar into {folder}")
        return jar


def install_seaweedfs() -> Path:
    """``weed`` built from SeaweedFS's module (pinned, from the Go module proxy) into the cache's ``bin``.
    The module is copied out of Go's read-only module cache first: ``go install ...@version`` refuses a
    module with replace directives."""
    folder = seaweedfs_dir()
    target = folder / "bin" / "weed"
    with _locked(folder):
        if target.exists():
            return target
        go = shutil.which("go") or next((p for p in ("/usr/local/go/bin/go",) if Path(p).exists()), None)
        if go is None:
            raise S3ServerError("go (1.21 or later, which fetches the toolchain SeaweedFS asks for) is needed to "
                                "build SeaweedFS")
        # The module asks for a newer Go than may be installed: GOTOOLCHAIN=auto fetches that toolchain
        # through the module proxy, as any Go module.
        env = {**os.environ, "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "auto"),
               "CGO_ENABLED": os.environ.get("CGO_ENABLED", "0")}
        info = json.loads(_run([go, "mod", "download", "-json", f"{SEAWEEDFS_MODULE}@{SEAWEEDFS_VERSION}"],
                               env=env))
        if info.get("Error") or not info.get("Dir"):
            raise S3ServerError(f"go mod download {SEAWEEDFS_MODULE}: {info.get('Error') or 'no folder'}")
        src = folder / "src"
        shutil.rmtree(src, ignore_errors=True)
        shutil.copytree(info["Dir"], src)
        for path in src.rglob("*"):  # the module cache's files are read-only; the build writes beside them
            path.chmod(path.stat().st_mode | 0o200)
        staging = folder / "bin" / "weed.partial"
        staging.parent.mkdir(exist_ok=True)
        _run([go, "build", "-o", str(staging), "./weed"], cwd=src, env=env)  # long: a large program
        staging.rename(target)
        shutil.rmtree(src, ignore_errors=True)
        return target


def install(kinds: list[str]) -> dict[str, Path]:
    done = {}
    for kind in kinds:
        if kind == "s3proxy":
            done[kind] = install_s3proxy()
        elif kind == "seaweedfs":
            done[kind] = weed_binary() or install_seaweedfs()
        else:
            raise S3ServerError(f"unknown S3 server {kind!r}")
    return done


# ------------------------------------------------------------------------------------------ servers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """One started server; ``endpoint`` is ``http://127.0.0.1:<port>``. ``stop()`` ends it by its PID."""

    kind = ""

    def __init__(self, work: Path, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY):
        self.work = Path(work)
        self.work.mkdir(parents=True, exist_ok=True)
        self.port = 0
        self.access_key, self.secret_key, self.region = access_key, secret_key, REGION
        self.proc: subprocess.Popen | None = None
        self.log_path = self.work / f"{self.kind}.out"
        self.start_seconds = 0.0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 90) -> S3Server:
        began = time.monotonic()
        for attempt in range(3):  # a port picked free may be taken before the server binds it
            self.port = free_port()
            cmd = self.command()
            with open(self.log_path, "ab") as out:
                self.proc = subprocess.Popen(cmd, cwd=self.work, stdout=out, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                self._wait_ready(began + timeout)
                break
            except S3ServerError:
                self.stop()
                if attempt == 2 or "address already in use" not in self.tail().lower():
                    raise
        self.start_seconds = time.monotonic() - began
        return self

    def _wait_ready(self, deadline: float) -> None:
        """Ready once an unsigned request gets an S3 answer (403 or 200) from the S3 port."""
        while True:
            if self.proc.poll() is not None:
                raise S3ServerError(f"{self.kind} exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.endpoint + "/", timeout=2):
                    return
            except urllib.error.HTTPError as e:
                if e.code in (400, 403, 405):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise S3ServerError(f"{self.kind} did not answer on {self.endpoint}:\n{self.tail()}")
            time.sleep(0.2)

    def create_bucket(self, bucket: str) -> None:
        """An empty bucket, through a v4-signed PUT (boto3, configured for servers without its checksums)."""
        client = self.boto3_client()
        deadline = time.monotonic() + 60
        while True:
            try:
                client.create_bucket(Bucket=bucket)
                return
            except Exception as e:  # noqa: BLE001 - SeaweedFS answers 5xx until its filer is up
                if "BucketAlreadyOwnedByYou" in str(e) or "BucketAlreadyExists" in str(e):
                    return
                if time.monotonic() > deadline:
                    raise S3ServerError(f"cannot create bucket {bucket} on {self.kind}: {e}") from None
                time.sleep(0.3)

    def boto3_client(self):
        """A boto3 S3 client for this server; checksums only when an operation requires them (S3Proxy
        refuses the CRC headers recent boto3 sends by default)."""
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name=self.region,
                            config=Config(request_checksum_calculation="when_required",
                                          response_checksum_validation="when_required",
                                          s3={"addressing_style": "path"}, retries={"max_attempts": 2}))

    def objectstore_configs(self, url: str) -> dict[str, str]:
        """The objectstore storage manager's settings for ``url`` (``s3://bucket/prefix``) on this server."""
        return {"url": url, "aws_endpoint": self.endpoint, "aws_access_key_id": self.access_key,
                "aws_secret_access_key": self.secret_key, "aws_region": self.region, "aws_allow_http": "true",
                "aws_virtual_hosted_style_request": "false"}

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    #: Seconds a server gets between SIGTERM and SIGKILL.
    stop_grace = 20.0

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM by PID, SIGKILL after ``timeout`` (``stop_grace`` by default)."""
        timeout = self.stop_grace if timeout is None else timeout
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def __enter__(self) -> S3Server:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class S3ProxyServer(S3Server):
    """S3Proxy with the jclouds filesystem backend (buckets are folders under ``work/data``)."""

    kind = "s3proxy"

    def command(self) -> list[str]:
        jar = s3proxy_jar()
        if jar is None:
            raise S3ServerError(missing("s3proxy"))
        data = self.work / "data"
        data.mkdir(exist_ok=True)
        props = self.work / "s3proxy.conf"
        props.write_text("\n".join([
            f"s3proxy.endpoint=http://127.0.0.1:{self.port}", "s3proxy.authorization=aws-v2-or-v4",
            f"s3proxy.identity={self.access_key}", f"s3proxy.credential={self.secret_key}",
            "jclouds.provider=filesystem", f"jclouds.filesystem.basedir={data}", ""]))
        # A small heap: a test machine runs many of these beside brokers and JVMs.
        return ["java", "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-jar", str(jar),
                "--properties", str(props)]


class SeaweedFSServer(S3Server):
    """``weed server``: master, volume server, filer and the S3 gateway in one process, every port on
    127.0.0.1 (gRPC ports given too: weed's default is the HTTP port plus 10000)."""

    kind = "seaweedfs"
    stop_grace = 3.0  # it spends 15 s flushing metadata logs on SIGTERM; test data need not survive

    def command(self) -> list[str]:
        weed = weed_binary()
        if weed is None:
            raise S3ServerError(missing("seaweedfs"))
        data = self.work / "data"
        data.mkdir(exist_ok=True)
        identities = {"identities": [{"name": "tierlog", "credentials": [
            {"accessKey": self.access_key, "secretKey": self.secret_key}], "actions": ["Admin", "Read", "List",
                                                                                       "Tagging", "Write"]}]}
        s3_config = self.work / "s3.json"
        s3_config.write_text(json.dumps(identities))
        ports = {name: free_port() for name in ("master", "master.grpc", "volume", "volume.grpc", "filer",
                                                  "filer.grpc", "s3.grpc")}
        # No telemetry; the Iceberg and Lance catalogs (fixed ports) off; sockets in the work folder; a
        # volume server that stops at once (it waits 10 s by default).
        return [str(weed), "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
                "-master.telemetry=false", f"-master.port={ports['master']}",
                f"-master.port.grpc={ports['master.grpc']}", "-master.volumeSizeLimitMB=64",
                "-master.volumePreallocate=false", f"-volume.port={ports['volume']}",
                f"-volume.port.grpc={ports['volume.grpc']}", "-volume.max=64", "-volume.preStopSeconds=0",
                "-filer", f"-filer.port={ports['filer']}", f"-filer.port.grpc={ports['filer.grpc']}",
                f"-filer.localSocket={self.work / 'filer.sock'}", "-s3", f"-s3.port={self.port}",
                f"-s3.port.grpc={ports['s3.grpc']}", f"-s3.config={s3_config}", "-s3.port.iceberg=0",
                "-s3.port.lance=0", f"-s3.localSocket={self.work / 's3.sock'}"]


SERVERS = {"s3proxy": S3ProxyServer, "seaweedfs": SeaweedFSServer}


def start(kind: str, work: Path, buckets: list[str] = ("tiered",), timeout: float = 90, **credentials: str
          ) -> S3Server:
    """A started ``kind`` server with ``buckets`` created (S3ServerError when it cannot run); ``credentials``
    (``access_key``, ``secret_key``) replace the default identity."""
    reason = missing(kind)
    if reason:
        raise S3ServerError(reason)
    server = SERVERS[kind](work, **credentials).start(timeout)
    try:
        for bucket in buckets:
            server.create_bucket(bucket)
    except BaseException:
        server.stop()
        raise
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install", help="install the servers that are missing")
    inst.add_argument("kinds", nargs="*", metavar="KIND", help=f"{' and '.join(KINDS)} by default")
    sub.add_parser("where", help="say where each server is, or why it cannot run")
    serve = sub.add_parser("serve", help="run one server on 127.0.0.1 until Ctrl-C")
    serve.add_argument("kind", choices=KINDS)
    serve.add_argument("--dir", help="work folder (default: a new temporary folder)")
    serve.add_argument("--bucket", action="append", default=[])
    opts = parser.parse_args(argv)
    try:
        if opts.command == "install":
            for kind, path in install(opts.kinds or list(KINDS)).items():
                print(f"{kind}: {path}")
        elif opts.command == "where":
            for kind in KINDS:
                print(f"{kind}: {missing(kind) or (s3proxy_jar() if kind == 's3proxy' else weed_binary())}")
        else:
            work = Path(opts.dir or tempfile.mkdtemp(prefix=f"tierlog-{opts.kind}-"))
            with start(opts.kind, work, opts.bucket or ["tiered"]) as server:
                print(f"{opts.kind} on {server.endpoint} (access key {server.access_key}, secret key "
                      f"{server.secret_key}), data in {work}; Ctrl-C stops it", flush=True)
                with contextlib.suppress(KeyboardInterrupt):
                    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
                    while server.running():
                        time.sleep(1)
    except S3ServerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
