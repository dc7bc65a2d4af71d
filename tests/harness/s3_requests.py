"""A moto S3 server that counts the requests it serves by S3 operation, as the store's bill would: the
reference the storage manager's own counts (tierlog.tiered.rsm.requests) are checked against."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from urllib.parse import parse_qs

from tests.harness.prerequisites import unavailable


class ServedRequests:
    """Requests and bytes per operation (the names of tierlog.tiered.rsm.requests.OPERATIONS), as served."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, list[int]] = {}

    def add(self, operation: str, nbytes: int) -> None:
        with self._lock:
            row = self.counts.setdefault(operation, [0, 0])
            row[0] += 1
            row[1] += nbytes

    def snapshot(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {op: {"requests": r, "bytes": b} for op, (r, b) in sorted(self.counts.items())}

    def reset(self) -> None:
        with self._lock:
            self.counts.clear()


def operation(method: str, path: str, query: str, headers: dict[str, str]) -> str:
    """The S3 operation of a path-style request (``/bucket/key``)."""
    q = parse_qs(query, keep_blank_values=True)
    has_key = "/" in path.strip("/")
    if method == "PUT":
        if "partNumber" in q:
            return "UPLOAD_PART"
        return "COPY" if "x-amz-copy-source" in headers else ("PUT" if has_key else "CREATE_BUCKET")
    if method == "POST":
        if "uploads" in q:
            return "CREATE_MULTIPART"
        if "uploadId" in q:
            return "COMPLETE_MULTIPART"
        return "DELETE" if "delete" in q else "POST"
    if method == "DELETE":
        return "ABORT_MULTIPART" if "uploadId" in q else "DELETE"
    if method == "GET":
        if not has_key:
            return "LIST"
        return "GET_RANGE" if "range" in headers else "GET"
    return method  # HEAD


class _Counting:
    """WSGI middleware: counts each request before moto answers it (bytes: the body sent for uploads, the
    body answered for reads)."""

    def __init__(self, app, served: ServedRequests) -> None:
        self.app = app
        self.served = served

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path.startswith("/moto-api"):
            return self.app(environ, start_response)
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
        op = operation(environ["REQUEST_METHOD"], path, environ.get("QUERY_STRING", ""), headers)
        sent = int(environ.get("CONTENT_LENGTH") or 0) if op in ("PUT", "UPLOAD_PART") else 0
        body = self.app(environ, start_response)
        if op in ("GET", "GET_RANGE"):
            chunks = list(body)
            self.served.add(op, sum(len(c) for c in chunks))
            return chunks
        self.served.add(op, sent)
        return body


@contextlib.contextmanager
def counting_moto_server(bucket: str = "tiered") -> Iterator[tuple[str, ServedRequests]]:
    """A moto S3 server on a free port of 127.0.0.1 with ``bucket`` created; yields its endpoint URL and
    the counts of what it served since (the bucket's creation not included)."""
    try:
        import boto3
        from moto.server import DomainDispatcherApplication, ThreadedMotoServer, create_backend_app
        from werkzeug.serving import make_server
    except ImportError as e:
        unavailable("moto S3 server", f"{e} (pip install 'moto[server]' boto3)")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    served = ServedRequests()

    class Server(ThreadedMotoServer):
        def _server_entry(self) -> None:
            app = _Counting(DomainDispatcherApplication(create_backend_app), served)
            self._server = make_server(self._ip_address, self._port, app, True)
            self._server_ready_event.set()
            self._server.serve_forever()

    server = Server(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="test", aws_secret_access_key="test",
                     region_name="us-east-1").create_bucket(Bucket=bucket)
        served.reset()
        yield endpoint, served
    finally:
        server.stop()
