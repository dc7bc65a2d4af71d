"""Client quota resolution and throttle times, against numbers computed with Kafka's formulas (ClientQuotaManager,
Rate, QuotaUtils.throttleTime), and the AlterClientQuotas/DescribeClientQuotas validation rules."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from tierlog.errors import InvalidRequestError, UnsupportedVersionError
from tierlog.security.principal import KafkaPrincipal
from tierlog.security.session import Session
from tierlog.server.apis.quotas import matches, parse_filter, validate_entity, validate_value
from tierlog.server.quotas.client_quota import (
    ClientQuotaManager,
    ClientQuotas,
    Rate,
    entity_path,
    parse_entity_path,
    quota_user,
    resolution_order,
    sanitize,
    throttle_time_ms,
)


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000.0

    def __call__(self) -> float:
        return self.ms


def test_throttle_formula():
    # (observed - bound) / bound * window, rounded, 0 within the bound
    assert throttle_time_ms(600, 500, 10_500) == 2100
    assert throttle_time_ms(500, 500, 10_000) == 0
    assert throttle_time_ms(400, 500, 10_000) == 0
    assert throttle_time_ms(16.5 * 2, 16.5, 1000) == 1000


def test_kafka_quota_violation_numbers():
    """Kafka's ClientQuotaManagerTest.testQuotaViolation: 400 B/s for 10 s under a 500 B/s quota, then a spike
    of 2300 bytes half a window later: (6300 / 10.5 - 500) / 500 * 10500 = 2100 ms."""
    clock = Clock()
    m = ClientQuotaManager("producer_byte_rate", 11, 1, clock=clock)
    m.update({"clients/<default>": {"producer_byte_rate": "500"}})
    for _ in range(10):
        assert m.record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 400) == 0
        clock.ms += 1000
    clock.ms += 500
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "unknown", 2300) == 2100


def test_rate_window_is_at_least_samples_minus_one_windows():
    r = Rate(11, 1000)
    r.record(1000, 0)
    assert r.window_size(0) == 10_000  # one burst counts against 10 full windows
    assert r.measure(0) == 100
    r.record(1000, 12_500)  # the first sample expired (older than 11 windows)
    assert r.window_size(12_500) == 10_000
    assert r.measure(12_500) == 100


def test_request_quota_throttle_is_bounded_by_one_window():
    clock = Clock()
    q = ClientQuotas(11, 1, clock=clock)
    q.update({"users/ANONYMOUS": {"request_percentage": "1.0"}})
    # 50 % of a thread in one burst: (5 - 1) / 1 * 10000 ms, bounded at the 1 s window
    assert q.request.record_and_get_throttle_time_ms("ANONYMOUS", "c", 50.0) == 1000
    assert q.produce.enabled is False and q.fetch.enabled is False and q.request.enabled is True


def test_resolution_precedence():
    order = [p for p, _ in resolution_order("alice", "app")]
    assert order == ["users/alice/clients/app", "users/alice/clients/<default>", "users/alice",
                     "users/<default>/clients/app", "users/<default>/clients/<default>", "users/<default>",
                     "clients/app", "clients/<default>"]
    m = ClientQuotaManager("producer_byte_rate", 11, 1)
    stored = {p: {"producer_byte_rate": str(1000 + i)} for i, p in enumerate(order)}
    for i, path in enumerate(order):
        m.update({p: v for p, v in stored.items() if order.index(p) >= i})
        bound, _ = m.quota("alice", "app")
        assert bound == 1000 + i, path
    m.update({})
    assert m.quota("alice", "app") is None and not m.enabled


def test_sensor_tags_follow_the_matched_level():
    m = ClientQuotaManager("producer_byte_rate", 11, 1)
    m.update({"users/alice": {"producer_byte_rate": "10"}, "clients/<default>": {"producer_byte_rate": "20"}})
    assert m.quota("alice", "a") == (10.0, ("alice", ""))  # one sensor for all of alice's clients
    assert m.quota("bob", "b") == (20.0, ("", "b"))  # one sensor per client id
    m.update({"users/alice/clients/a": {"consumer_byte_rate": "5"}})  # another key only: not this manager's
    assert m.quota("alice", "a") is None


def test_paths_and_names():
    assert sanitize("user with*star") == "user%20with%2Astar"
    assert entity_path("a/b", None) == "users/a%2Fb"
    assert entity_path(None, "c", default_user=True) == "users/<default>/clients/c"
    assert entity_path(None, None, default_client=True) == "clients/<default>"
    assert parse_entity_path("users/a%2Fb/clients/<default>") == {"user": "a/b", "client-id": None}
    assert quota_user(NS()) == "ANONYMOUS"  # no session: a connection without authentication
    assert quota_user(NS(session=None)) == "ANONYMOUS"  # a SASL connection still authenticating
    alice = Session(principal=KafkaPrincipal("User", "alice"), client_host="127.0.0.1", listener="SSL",
                    security_protocol="SSL", peer="127.0.0.1:5000")
    assert quota_user(NS(session=alice)) == "alice"  # the connection's principal, carried by the request
    # a forwarded request's own session (made from its Envelope) is the one its context carries
    assert quota_user(NS(session=Session(principal=KafkaPrincipal("User", "bob")))) == "bob"
    assert quota_user(NS(session=Session())) == "ANONYMOUS"


def test_entity_validation():
    assert validate_entity({"user": "u", "client-id": None}) == {"user": "u", "client-id": None}
    assert validate_entity({"ip": "::1"}) == {"ip": "::1"}
    for bad, message in [({}, "Invalid empty client quota entity"),
                         ({"group": "g"}, "Unhandled client quota entity type: group"),
                         ({"user": ""}, "Empty user not supported"),
                         ({"ip": "1.2.3.4", "user": "u"}, "Invalid entity combination"),
                         ({"ip": "not-an-ip"}, "Illegal IP address")]:
        with pytest.raises(InvalidRequestError, match=message):
            validate_entity(bad)


def test_value_validation():
    types = {"producer_byte_rate": "LONG", "request_percentage": "DOUBLE"}
    validate_value(types, "producer_byte_rate", 1024.0)
    validate_value(types, "request_percentage", 12.5)
    with pytest.raises(InvalidRequestError, match="Invalid configuration key x"):
        validate_value(types, "x", 1)
    with pytest.raises(InvalidRequestError, match="cannot be a fractional value"):
        validate_value(types, "producer_byte_rate", 1.5)
    for value in (0.0, -5.0):
        with pytest.raises(InvalidRequestError, match="Quota request_percentage must be greater than 0"):
            validate_value(types, "request_percentage", value)
    with pytest.raises(InvalidRequestError, match="is too large for a LONG"):
        validate_value(types, "producer_byte_rate", float("inf"))
    validate_value(types, "request_percentage", float("nan"))  # Kafka accepts it too


def test_nan_quota_never_throttles():
    # Kafka accepts a NaN quota; its throttle time rounds to 0 (Math.round(NaN))
    assert throttle_time_ms(100.0, float("nan"), 10_000) == 0
    m = ClientQuotaManager("consumer_byte_rate", 11, 1)
    m.update({"clients/c": {"consumer_byte_rate": "nan"}})
    assert m.record_and_get_throttle_time_ms("ANONYMOUS", "c", 1e9) == 0
    assert m.max_value_in_window("ANONYMOUS", "c") is None


def test_describe_filter():
    exact, specified = parse_filter([NS(entity_type="user", match_type=0, match="u"),
                                     NS(entity_type="client-id", match_type=2, match=None)], False)
    assert matches({"user": "u", "client-id": "c"}, exact, specified, False)
    assert not matches({"user": "u"}, exact, specified, False)
    assert not matches({"user": "v", "client-id": "c"}, exact, specified, False)
    exact, specified = parse_filter([NS(entity_type="user", match_type=1, match=None)], True)
    assert matches({"user": None}, exact, specified, True)
    assert not matches({"user": None, "client-id": "c"}, exact, specified, True)
    with pytest.raises(UnsupportedVersionError):
        parse_filter([NS(entity_type="group", match_type=0, match="g")], False)
    with pytest.raises(InvalidRequestError, match="MATCH_TYPE_EXACT"):
        parse_filter([NS(entity_type="user", match_type=0, match=None)], False)
    with pytest.raises(InvalidRequestError, match="more than once"):
        parse_filter([NS(entity_type="user", match_type=2, match=None)] * 2, False)
