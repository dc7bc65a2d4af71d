"""Client quotas on a real broker: Kafka's kafka-configs sets and describes them, a greedy producer and a greedy
consumer (confluent-kafka) are held to their byte rates and told their throttle times, and the
DescribeClientQuotas/AlterClientQuotas answers are the same as Apache Kafka 4.1's (``peer`` runs each test
against both).

Why the rate bound holds (Kafka's rules, which tierlog follows): the quota is checked over 11 samples of 1 s,
never over less than 10 full windows, each sample kept 11 s from its start. So the bytes recorded in the
first 10 s after a client's first request are at most 10 windows of quota, those of the next 11 s at most 11
windows, each time plus the requests already on their way when the throttle came (overshoot, paid back by
the throttle but acknowledged meanwhile). Measured over 21 s from before the client's first request, the rate
is at most the quota plus twice the overshoot over 21 s; small requests (8 KB batches, 64 KB fetches) keep that
under 3 %. Kafka allows bursts (10 windows at once, then again when a sample expires), so a shorter interval or
one not starting before the first request could see more than the quota, on Kafka too.
"""

from __future__ import annotations

import contextlib
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer

from tests.harness.rawclient import RawClient, create_topic, unique
from tests.harness.waiting import TimedOut, not_yet, wait_until
from tierlog.protocol import ApiKey

MEASURE_S = 21.0  # 10 windows, then one whole horizon of 11 (see above)
QUOTA = 300_000.0  # bytes per second
VALUE = b"v" * 1000


@pytest.fixture(autouse=True)
def _tierlog_started_first(tierlog_peer):
    """The session's tierlog broker is set up before the stray-broker guard looks (``peer`` asks for it only
    while the test is set up, which the guard would take for a broker the test left running)."""
    return tierlog_peer


def _configs(kafka_tool, bootstrap: str, *args: str, check: bool = True):
    return kafka_tool("ConfigCommand", "--bootstrap-server", bootstrap, *args, check=check)


def _wait_described(kafka_tool, bootstrap: str, entity: list[str], expected: str, timeout: float = 30) -> str:
    """Kafka applies quota changes through its metadata log: describe until the change shows (both peers)."""
    outs = []

    def described():
        outs.append(_configs(kafka_tool, bootstrap, *entity, "--describe").stdout.strip())
        return expected in outs[-1]

    with contextlib.suppress(TimedOut):  # the caller compares the last description
        wait_until(described, timeout, interval=0.3, what=f"{expected!r} described")
    return outs[-1]


# ---------------------------------------------------------------------------------- kafka-configs, both peers


def test_kafka_configs_clients_users_and_defaults(peer, kafka_tool):
    b = peer.bootstrap
    client, user = unique("quota-client"), unique("quota-user")
    out = _configs(kafka_tool, b, "--alter", "--entity-type", "clients", "--entity-name", client,
                   "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048").stdout
    assert f"Completed updating config for client {client}." in out
    got = _wait_described(kafka_tool, b, ["--entity-type", "clients", "--entity-name", client], "producer_byte_rate")
    assert got == f"Quota configs for client-id '{client}' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0"

    # user and client together, and the user's default client
    _configs(kafka_tool, b, "--alter", "--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
             "--entity-name", client, "--add-config", "request_percentage=50")
    got = _wait_described(kafka_tool, b, ["--entity-type", "users", "--entity-name", user, "--entity-type",
                                          "clients", "--entity-name", client], "request_percentage")
    assert got == f"Quota configs for user-principal '{user}', client-id '{client}' are request_percentage=50.0"
    _configs(kafka_tool, b, "--alter", "--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
             "--entity-default", "--add-config", "producer_byte_rate=4096")
    got = _wait_described(kafka_tool, b, ["--entity-type", "users", "--entity-name", user, "--entity-type",
                                          "clients", "--entity-default"], "producer_byte_rate")
    assert got == f"Quota configs for user-principal '{user}', the default client-id are producer_byte_rate=4096.0"

    # every client entity of that user
    listed = _configs(kafka_tool, b, "--entity-type", "users", "--entity-name", user, "--entity-type", "clients",
                      "--describe").stdout
    assert f"Quota configs for user-principal '{user}', client-id '{client}' are request_percentage=50.0" in listed
    assert f"user-principal '{user}', the default client-id are producer_byte_rate=4096.0" in listed

    # removal: one key, then the last one (the entity is no longer described)
    _configs(kafka_tool, b, "--alter", "--entity-type", "clients", "--entity-name", client, "--delete-config",
             "consumer_byte_rate")
    got = _wait_described(kafka_tool, b, ["--entity-type", "clients", "--entity-name", client],
                          "are producer_byte_rate=1024.0")
    assert got == f"Quota configs for client-id '{client}' are producer_byte_rate=1024.0"
    _configs(kafka_tool, b, "--alter", "--entity-type", "clients", "--entity-name", client, "--delete-config",
             "producer_byte_rate")
    wait_until(lambda: client not in _configs(kafka_tool, b, "--entity-type", "clients", "--describe").stdout, 30,
               interval=0.3, what="the removed quota no longer described")

    bad = _configs(kafka_tool, b, "--alter", "--entity-type", "clients", "--entity-name", client, "--add-config",
                   "producer_byte_rate=1.5", check=False)
    assert bad.returncode != 0 and "producer_byte_rate cannot be a fractional value." in bad.stdout + bad.stderr


def _entity(**kw):
    return [{"entity_type": k.replace("_", "-"), "entity_name": v} for k, v in kw.items()]


def _alter(raw: RawClient, entries, validate_only=False, version=1) -> dict:
    """{entity as sorted (type, name) pairs: (code, message)}: Kafka answers once per distinct entity, in no
    particular order."""
    resp = raw.request(ApiKey.ALTER_CLIENT_QUOTAS, version, {"entries": entries, "validate_only": validate_only})
    return {tuple(sorted((c.entity_type, c.entity_name) for c in e.entity)): (e.error_code, e.error_message)
            for e in resp.entries}


def _describe(raw: RawClient, components, strict=False, version=1):
    resp = raw.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, {"components": components, "strict": strict})
    entries = None if resp.entries is None else sorted(
        (tuple(sorted((c.entity_type, c.entity_name or "") for c in e.entity)),
         tuple(sorted((v.key, v.value) for v in e.values))) for e in resp.entries)
    return resp.error_code, resp.error_message, entries


def test_alter_and_describe_client_quotas_answers(peer):
    """Raw AlterClientQuotas/DescribeClientQuotas: codes and messages, validate_only, filters."""
    raw = RawClient(peer.bootstrap)
    try:
        user, client = unique("raw-user"), unique("raw-client")
        op = [{"key": "producer_byte_rate", "value": 1000.0, "remove": False}]
        answers = _alter(raw, [
            {"entity": _entity(user=user, client_id=client), "ops": op},
            {"entity": [], "ops": op},
            {"entity": _entity(group="g"), "ops": op},
            {"entity": _entity(user=""), "ops": op},
            {"entity": _entity(user=user), "ops": [{"key": "no_such_quota", "value": 1.0, "remove": False}]},
            {"entity": _entity(user=user), "ops": [{"key": "producer_byte_rate", "value": 10.5, "remove": False}]},
            {"entity": _entity(client_id=client), "ops": op + op},
            {"entity": _entity(user=None), "ops": [{"key": "consumer_byte_rate", "value": 1.5, "remove": False}]},
        ])
        assert answers == {
            (("client-id", client), ("user", user)): (0, None),
            (): (42, "Invalid empty client quota entity"),
            (("group", "g"),): (42, "Unhandled client quota entity type: group"),
            (("user", ""),): (42, "Empty user not supported"),
            # the user's second entry is a duplicate entity, answered instead of the first one's error
            (("user", user),): (42, f"Ignoring duplicate entity ClientQuotaEntity(entries={{user={user}}})"),
            # Kafka's quirk: a repeated key makes the entity a "duplicate"
            (("client-id", client),): (
                42, f"Ignoring duplicate entity ClientQuotaEntity(entries={{client-id={client}}})"),
            (("user", None),): (42, "consumer_byte_rate cannot be a fractional value."),
        }
        answers = _alter(raw, [{"entity": _entity(user=user), "ops": [
            {"key": "no_such_quota", "value": 1.0, "remove": False}]}])
        assert answers == {(("user", user),): (42, "Invalid configuration key no_such_quota")}
        answers = _alter(raw, [
            {"entity": _entity(client_id="zero-" + client), "ops": [
                {"key": "request_percentage", "value": 0.0, "remove": False}]},
            {"entity": _entity(client_id="huge-" + client), "ops": [
                {"key": "producer_byte_rate", "value": 1e30, "remove": False}]},
            # a type named twice is one map entry, the last
            {"entity": [{"entity_type": "client-id", "entity_name": "x-" + client},
                        {"entity_type": "client-id", "entity_name": "y-" + client}], "ops": op},
            {"entity": _entity(ip="10.1.2.3"), "ops": [
                {"key": "connection_creation_rate", "value": 5.0, "remove": False}]},
        ], validate_only=True)
        assert answers == {
            (("client-id", "zero-" + client),): (42, "Quota request_percentage must be greater than 0"),
            (("client-id", "huge-" + client),): (42, "Proposed value for producer_byte_rate is too large for a LONG."),
            (("client-id", "y-" + client),): (0, None),
            (("ip", "10.1.2.3"),): (0, None),
        }

        # validate_only changes nothing
        other = unique("raw-validate")
        assert _alter(raw, [{"entity": _entity(client_id=other), "ops": op}], validate_only=True) == {
            (("client-id", other),): (0, None)}

        want = ((("client-id", client), ("user", user)), (("producer_byte_rate", 1000.0),))

        def described():
            code, _, entries = _describe(raw, [{"entity_type": "user", "match_type": 0, "match": user}])
            return (code, entries) if code == 0 and entries == [want] else not_yet((code, entries))

        code, entries = wait_until(described, 30, interval=0.3, what=f"the quota of {user} described")
        assert (code, entries) == (0, [want])
        assert _describe(raw, [{"entity_type": "client-id", "match_type": 0, "match": other}])[2] == []
        # strict: the user alone has no quota
        assert _describe(raw, [{"entity_type": "user", "match_type": 0, "match": user}], strict=True)[2] == []
        code, message, _ = _describe(raw, [{"entity_type": "group", "match_type": 0, "match": "x"}])
        assert (code, message) == (35, "Unsupported entity type group")
        code, message, _ = _describe(raw, [{"entity_type": "user", "match_type": 0, "match": None}])
        assert (code, message) == (42, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
        code, _, _ = _describe(raw, [{"entity_type": "ip", "match_type": 2, "match": None},
                                     {"entity_type": "user", "match_type": 2, "match": None}])
        assert code == 42
        assert _alter(raw, [{"entity": _entity(user=user, client_id=client),
                             "ops": [{"key": "producer_byte_rate", "value": 0.0, "remove": True}]}]) == {
            (("client-id", client), ("user", user)): (0, None)}
    finally:
        raw.close()


# ---------------------------------------------------------------------------------- throttling, tierlog


def _set_quota(kafka_tool, bootstrap: str, client: str, config: str) -> None:
    _configs(kafka_tool, bootstrap, "--alter", "--entity-type", "clients", "--entity-name", client,
             "--add-config", config)


def test_greedy_producer_held_to_its_byte_rate(tierlog_peer, kafka_tool):
    b = tierlog_peer.bootstrap
    topic, client = unique("quota-produce"), unique("greedy-producer")
    create_topic(b, topic, partitions=2)
    _set_quota(kafka_tool, b, client, f"producer_byte_rate={int(QUOTA)}")
    throttles: list[int] = []
    acked = [0]
    lock = threading.Lock()
    # The clock starts before the producer exists: before the broker records anything of this client id.
    end = time.monotonic() + MEASURE_S
    p = Producer({"bootstrap.servers": b, "client.id": client, "linger.ms": 5, "batch.size": 8192,
                  "acks": 1, "queue.buffering.max.kbytes": 4096, "max.in.flight.requests.per.connection": 5,
                  "throttle_cb": lambda e: throttles.append(e.throttle_time)})

    def delivered(err, msg):
        if err is None and time.monotonic() <= end:
            with lock:
                acked[0] += len(msg.value())
    while time.monotonic() < end:  # not a wait: the measurement window
        try:
            p.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            p.poll(0.05)
        else:
            p.poll(0)
    p.flush(60)
    rate = acked[0] / MEASURE_S
    print(f"producer: {rate:.0f} B/s against a quota of {QUOTA:.0f}; {len(throttles)} throttle callbacks")
    assert rate <= QUOTA * 1.10
    assert rate >= QUOTA * 0.5, "a throttled producer still gets most of its quota"
    assert throttles and max(throttles) > 0, "confluent-kafka's throttle_cb never reported a throttle time"


def test_greedy_consumer_held_to_its_byte_rate(tierlog_peer, kafka_tool):
    b = tierlog_peer.bootstrap
    topic, client = unique("quota-fetch"), unique("greedy-consumer")
    create_topic(b, topic, partitions=1)
    need = int(QUOTA * MEASURE_S * 1.6)  # more than the consumer may take in the measured interval
    p = Producer({"bootstrap.servers": b, "linger.ms": 20, "batch.size": 262144})
    for _ in range(need // len(VALUE)):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(120) == 0
    _set_quota(kafka_tool, b, client, f"consumer_byte_rate={int(QUOTA)}")
    throttles: list[int] = []
    # The clock starts before the consumer's first fetch (the group join counts as time, not bytes).
    end = time.monotonic() + MEASURE_S
    c = Consumer({"bootstrap.servers": b, "client.id": client, "group.id": unique("quota-group"),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.max.bytes": 131072,
                  "max.partition.fetch.bytes": 65536, "message.max.bytes": 131072,
                  "throttle_cb": lambda e: throttles.append(e.throttle_time)})
    got = 0
    try:
        c.subscribe([topic])
        while time.monotonic() < end:  # not a wait: the measurement window
            m = c.poll(0.2)
            if m is not None and m.error() is None and time.monotonic() <= end:
                got += len(m.value())
        assert got < need, "the consumer ran out of records: the measurement is not of the quota"
    finally:
        c.close()
    rate = got / MEASURE_S
    print(f"consumer: {rate:.0f} B/s against a quota of {QUOTA:.0f}; {len(throttles)} throttle callbacks")
    assert rate <= QUOTA * 1.10
    assert rate >= QUOTA * 0.5
    assert throttles and max(throttles) > 0



def test_request_percentage_and_quota_metrics(start_broker):
    """request_percentage throttles any API (the answer's throttle_time_ms, at most one window), and the
    quota metrics count bytes and throttle per (user, client id)."""
    from tests.harness.tiered import sample_value, scrape
    from tierlog.records import build_batch

    b = start_broker({"metrics.port": "0", "num.partitions": "1"})
    raw = RawClient(b.bootstrap)  # client id "rawclient"
    try:
        answers = _alter(raw, [
            {"entity": _entity(client_id="rawclient"),
             "ops": [{"key": "producer_byte_rate", "value": 1000.0, "remove": False}]},
            {"entity": _entity(user="ANONYMOUS"),
             "ops": [{"key": "request_percentage", "value": 0.0001, "remove": False}]}])
        assert set(answers.values()) == {(0, None)}
        # 12 KB against 1000 B/s: (12000 / 10 s - 1000) / 1000 * 10 s, about 2 s of throttle
        resp = raw.request(ApiKey.PRODUCE, 9, {"acks": 1, "timeout": 5000, "topic_data": [{
            "name": unique("quota-metrics"), "partition_data": [{"index": 0, "records": build_batch(
                [(None, b"x" * 12000, [], 0)])}]}]})
        answered = time.monotonic()
        produce_throttle = resp.throttle_time.total_seconds() * 1000
        assert produce_throttle > 1000
        # KIP-219: the connection is muted, its next request is not handled before the throttle time is over
        raw.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert time.monotonic() - answered >= produce_throttle / 1000 - 0.05
    finally:
        raw.close()
    raw = RawClient(b.bootstrap)
    try:
        # any request's handling time is far above 0.0001 % of a second per second: throttled for one window
        resp = raw.request(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False})
        assert resp.throttle_time.total_seconds() * 1000 == 1000
    finally:
        raw.close()
    samples = scrape(b)
    assert sample_value(samples, "kafka_server_produce_bytes_total", user="", client_id="rawclient") > 12000
    assert sample_value(samples, "kafka_server_produce_throttle_time_ms_total", user="",
                        client_id="rawclient") == produce_throttle
    assert sample_value(samples, "kafka_server_request_throttle_time_ms_total", user="ANONYMOUS",
                        client_id="") >= 1000
    # kept with the broker's metadata: a restarted broker has them
    b.restart()
    raw = RawClient(b.bootstrap)
    try:
        code, _, entries = _describe(raw, [{"entity_type": "client-id", "match_type": 0, "match": "rawclient"}])
        assert (code, entries) == (0, [((("client-id", "rawclient"),), (("producer_byte_rate", 1000.0),))])
        # a long-polling fetch's wait is not request time (Kafka counts its handler thread's time only). 20 %
        # of a second per second over the 10 s window is 2 s of handling: a loaded machine's slow requests stay
        # below it, the fetch's 5 s wait would not.
        assert _alter(raw, [{"entity": _entity(user="ANONYMOUS"), "ops": [
            {"key": "request_percentage", "value": 20.0, "remove": False}]}]) == {(("user", "ANONYMOUS"),): (0, None)}
    finally:
        raw.close()
    topic = unique("quota-longpoll")
    create_topic(b.bootstrap, topic)
    raw = RawClient(b.bootstrap)
    try:
        wait_until(lambda: _describe(raw, [{"entity_type": "user", "match_type": 0, "match": "ANONYMOUS"}])[2] == [
            ((("user", "ANONYMOUS"),), (("request_percentage", 20.0),))], 30, interval=0,
            what="the request quota of ANONYMOUS described")
        raw.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait": 5000, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": 0,
                                                        "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                                                        "log_start_offset": -1}]}]})
        # 5 s of waiting would be 50 % of a second per second, far above 20 %: the next answer would be throttled
        resp = raw.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert resp.throttle_time.total_seconds() == 0
    finally:
        raw.close()
