"""The live-process harness every test suite shares: real ``tierlog broker`` processes, Apache Kafka as
a reference peer, a local S3 server, and the raw Kafka client that talks to any of them.

Modules (import them by name; this package imports none of them):

- ``broker``: :class:`BrokerProcess`, one ``python -m tierlog broker`` on 127.0.0.1, and the registry of
  the processes still running (so a failing test cannot leave one behind).
- ``tiered``: settings of a tiered broker, its metrics/status endpoint (``call``, ``tier_status``) and
  ``wait_for`` (poll a predicate or fail naming what did not happen).
- ``rawclient``: :class:`RawClient`, any API at any version with raw answers; ``create_topic`` and
  ``wait_for_leaders`` over it; ``unique`` topic names.
- ``prerequisites``: outside tools (``load_script`` for ``scripts/``, ``unavailable``: skip locally,
  fail in CI).
- ``apache_kafka``: the reference peer from ``scripts/kafka_peer.py`` (settings both peers share,
  starting a KRaft broker, resolving its jars).
- ``java_clients``: Kafka's Java producer, consumer and admin client in one JVM driven line by line
  (``java/RebootstrapClient.java``), for the rebootstrap tests.
- ``s3``: a moto S3 server and the object-store settings that reach it (faults a real server cannot make);
  ``s3_requests``: one that counts the requests it serves by S3 operation (the reference for the storage
  manager's own counts).
- ``s3_servers``: real S3 servers, SeaweedFS and S3Proxy, from ``scripts/s3_servers.py`` (``s3_server``).
- ``delay_line``: a TCP forwarder that delays each direction (a distant store where ``tc netem`` is missing).
- ``threads``: ``in_parallel`` (one step on several brokers at once) and ``start_together`` (clusters
  started side by side, the others stopped if one fails).
- ``waiting``: ``wait_until`` (and ``wait_until_async``), the one wait of every test: poll a predicate until
  it is truthy, or fail naming what was awaited and what was last seen.
- ``zookeeper``: ZooKeeper for cluster tests through the product's launcher (short ticks, a free
  port, ``unique_chroot`` per test), and ``start_ensemble``: three servers as one quorum.
- ``plugin``: the pytest plugin with the shared fixtures (``start_broker``, ``broker``, ``kafka_jars``,
  ``kafka_peer``, ``kafka_peer_tiered``, ``tierlog_peer``, ``peer``, ``kafka_tool``, ``moto_s3``, ``seaweedfs_s3``,
  ``s3proxy_s3``, ``real_s3``,
  ``zookeeper``, ``zookeeper_connect``, ``java_client_command``, ``java``), the
  stray-process guard, the rule that a run collecting nothing fails, and the pytest-xdist groups.
  tests/conftest.py registers it once (``pytest_plugins``), for every suite.

Every process the harness starts listens on 127.0.0.1 and is stopped by its PID.
"""

from pathlib import Path

#: The repository's root folder.
ROOT = Path(__file__).resolve().parents[2]
