"""A broker's registration in ZooKeeper (``/brokers/ids/<id>``) against a real ZooKeeper: the registration a
previous process of the same broker left is waited out, and one that expires at the worst moment is taken."""

from __future__ import annotations

import pytest

from tierlog.cluster.zookeeper import BROKER_IDS, ZkClient
from tierlog.errors import StartupError


def _client(connect: str) -> ZkClient:
    c = ZkClient(connect, 6000, None)
    c.start()
    return c


def test_a_registration_expiring_between_the_create_and_the_read_is_taken(zookeeper_connect):
    """CI saw a restarted broker stop with "unexpected NoNodeError": its create met the previous session's
    node, which expired before the read that was to tell whose it was."""
    previous, restarted = _client(zookeeper_connect), _client(zookeeper_connect)
    path = f"{BROKER_IDS}/2"
    try:
        previous.register_broker(2, b"previous")
        real_get = restarted.kazoo.get

        def get_after_expiry(p, *args, **kwargs):
            if p == path and previous.session_id is not None:
                previous.close()  # its session ends, and its ephemeral registration with it
            return real_get(p, *args, **kwargs)

        restarted.kazoo.get = get_after_expiry
        restarted.register_broker(2, b"restarted")
        restarted.kazoo.get = real_get
        data, stat = restarted.kazoo.get(path)
        assert data == b"restarted" and stat.ephemeralOwner == restarted.session_id
        restarted.register_broker(2, b"restarted")  # its own registration: nothing to do

        other = _client(zookeeper_connect)
        try:
            with pytest.raises(StartupError, match="already registered in ZooKeeper by another live broker"):
                other.register_broker(2, b"other")
        finally:
            other.close()
    finally:
        previous.close()
        restarted.close()
