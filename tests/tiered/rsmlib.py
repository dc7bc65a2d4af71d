"""The storage-manager backends the remote storage tests run against (``make_rsm(backend)`` in
conftest.py builds one)."""

BACKENDS = ["filesystem", "filesystem-zstd", "memory", "file", "s3", "s3-zstd"]
# Tiny chunks so ranges cross chunk boundaries.
ZSTD = {"compression.enable": "true", "compression.chunk.size": "1000"}
