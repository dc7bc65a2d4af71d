"""The storage-manager backends the remote storage tests run against (``make_rsm(backend)`` in
conftest.py builds one)."""

# The S3 ones are real servers (tests/harness/s3_servers.py), one of each per test module.
BACKENDS = ["filesystem", "filesystem-zstd", "memory", "file", "seaweedfs", "seaweedfs-zstd", "s3proxy",
            "s3proxy-zstd"]
#: The real S3 servers among them.
S3_KINDS = ("seaweedfs", "s3proxy")
# Tiny chunks so ranges cross chunk boundaries.
ZSTD = {"compression.enable": "true", "compression.chunk.size": "1000"}
