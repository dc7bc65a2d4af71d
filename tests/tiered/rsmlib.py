"""The storage-manager backends the remote storage tests run against (``make_rsm(backend)`` in
conftest.py builds one)."""

import pytest

# The S3 ones are real servers (tests/harness/s3_servers.py), one of each per test module.
BACKENDS = ["filesystem", "filesystem-zstd", "memory", "file", "seaweedfs", "seaweedfs-zstd", "s3proxy",
            "s3proxy-zstd"]
#: The real S3 servers among them.
S3_KINDS = ("seaweedfs", "s3proxy")
# Tiny chunks so ranges cross chunk boundaries.
ZSTD = {"compression.enable": "true", "compression.chunk.size": "1000"}


def backend_params(backends: list[str], module: str) -> list:
    """``backends`` as parameters; those on a real S3 server carry the xdist group of ``module`` (its path,
    as the harness names a module's group), so one worker runs them and starts each server once. make_rsm
    reaches the server fixtures by name, which the harness's grouping cannot see."""
    return [pytest.param(b, marks=pytest.mark.xdist_group(module)) if b.partition("-")[0] in S3_KINDS else b
            for b in backends]
