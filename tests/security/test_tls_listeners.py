"""TLS listeners of one broker, shared by the module: PLAINTEXT, SSL (server certificate only) and MTLS (an SSL
listener requiring client certificates, with mapping rules that name only OU=eng subjects). Real clients
(tierlog's, confluent-kafka, kafka-python, aiokafka, kcat, Kafka's Java console tools) produce and consume
over TLS with their usual settings; clients without an acceptable certificate and bytes that are not TLS are
refused while the broker keeps serving."""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess

import confluent_kafka
import pytest

from tests.harness.broker import log_lines, running_broker
from tests.harness.rawclient import RawClient, create_topic, unique
from tests.harness.tiered import wait_for
from tests.security.pki import KEY_PASSWORD, STORE_PASSWORD
from tests.security.tlslib import client_context, listener_addresses, tierlog_roundtrip, tierlog_settings, tls_raw
from tierlog.client.errors import KafkaConnectionError, KafkaTimeoutError
from tierlog.client.producer import Producer
from tierlog.errors import InvalidConfigError
from tierlog.protocol import ApiKey

MTLS_RULES = r"RULE:^CN=([^,]*),OU=eng,.*$/$1/L"


@pytest.fixture(scope="module")
def tls(pki, tmp_path_factory):
    settings = {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.broker.pem),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.mtls.ssl.principal.mapping.rules": MTLS_RULES,
        # a refused handshake is logged once per kind for the whole module, never again within it
        "internal.log.repeat.interval.ms": "3600000",
        "num.partitions": "1",
    }
    with running_broker(tmp_path_factory.mktemp("tls-broker"), settings) as broker:
        addresses = listener_addresses(broker)
        yield broker, addresses


def _serving(broker, addresses, pki) -> None:
    """The broker still runs and answers ApiVersions on its plaintext and TLS listeners."""
    assert broker.proc.poll() is None, "".join(broker.output[-40:])
    raw = RawClient(addresses["PLAINTEXT"])
    try:
        assert raw.request(ApiKey.API_VERSIONS, 3, {}).error_code == 0
    finally:
        raw.close()
    raw = tls_raw(addresses["SSL"], client_context(pki))
    try:
        assert raw.request(ApiKey.API_VERSIONS, 3, {}).error_code == 0
    finally:
        raw.close()


def _topic(addresses) -> str:
    name = unique("tls")
    create_topic(addresses["PLAINTEXT"], name)
    return name


# ---------------------------------------------------------------------------------------------- clients


def test_metadata_over_tls_names_the_tls_listener(tls, pki):
    """Kafka answers Metadata with the endpoints of the listener the request came in on: a TLS client is
    sent to TLS ports, a plaintext one to plaintext ports."""
    _broker, addresses = tls
    for listener, ctx in (("SSL", client_context(pki)), ("MTLS", client_context(pki, pki.client))):
        raw = tls_raw(addresses[listener], ctx)
        try:
            md = raw.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                                   "include_topic_authorized_operations": False})
        finally:
            raw.close()
        assert [f"{b.host}:{b.port}" for b in md.brokers] == [addresses[listener]]
    raw = RawClient(addresses["PLAINTEXT"])
    try:
        md = raw.request(ApiKey.METADATA, 12, {"topics": None, "allow_auto_topic_creation": False,
                                               "include_topic_authorized_operations": False})
    finally:
        raw.close()
    assert [f"{b.host}:{b.port}" for b in md.brokers] == [addresses["PLAINTEXT"]]


def test_tierlog_client_over_tls_with_a_pem_truststore(tls, pki):
    _broker, addresses = tls
    topic = _topic(addresses)
    got = asyncio.run(tierlog_roundtrip(tierlog_settings(pki, addresses["SSL"]), topic))
    assert got == [f"v{i}".encode() for i in range(20)]


def test_tierlog_client_mutual_tls_with_pkcs12_stores(tls, pki):
    _broker, addresses = tls
    topic = _topic(addresses)
    settings = {"bootstrap.servers": addresses["MTLS"], "security.protocol": "SSL",
                "ssl.truststore.type": "PKCS12", "ssl.truststore.location": str(pki.ca_p12),
                "ssl.truststore.password": STORE_PASSWORD,
                "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.client.p12),
                "ssl.keystore.password": STORE_PASSWORD}
    assert asyncio.run(tierlog_roundtrip(settings, topic, 5)) == [f"v{i}".encode() for i in range(5)]


def test_tierlog_client_mutual_tls_with_inline_pem_and_an_encrypted_key(tls, pki):
    _broker, addresses = tls
    topic = _topic(addresses)
    inline = {"bootstrap.servers": addresses["MTLS"], "security.protocol": "SSL", "ssl.truststore.type": "PEM",
              "ssl.truststore.certificates": pki.ca_text(), "ssl.keystore.type": "PEM",
              "ssl.keystore.key": pki.client.key_text, "ssl.keystore.certificate.chain": pki.client.chain_text}
    assert asyncio.run(tierlog_roundtrip(inline, topic, 3)) == [b"v0", b"v1", b"v2"]
    encrypted = tierlog_settings(pki, addresses["MTLS"], **{
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.client.encrypted_pem),
        "ssl.key.password": KEY_PASSWORD})
    assert len(asyncio.run(tierlog_roundtrip(encrypted, topic, 3))) == 6


def test_tierlog_client_checks_the_broker_host_name(tls, pki):
    """ssl.endpoint.identification.algorithm=https (the default): the broker's certificate names 127.0.0.1 and
    localhost; trusting another CA fails the handshake, and a bad setting is refused before any I/O."""
    _broker, addresses = tls
    wrong_ca = tierlog_settings(pki, addresses["SSL"], **{"ssl.truststore.location": str(pki.other_ca),
                                                          "socket.connection.setup.timeout.ms": "5000"})

    async def connect():
        async with Producer({**wrong_ca, "max.block.ms": 3000}) as producer:
            await asyncio.wait_for(producer.send_and_wait("anything", b"x"), 30)

    with pytest.raises((KafkaConnectionError, KafkaTimeoutError)):
        asyncio.run(connect())
    with pytest.raises(InvalidConfigError, match="ssl.keystore.password"):
        Producer(tierlog_settings(pki, addresses["SSL"], **{"ssl.keystore.type": "PKCS12",
                                                            "ssl.keystore.location": str(pki.client.p12)}))
    with pytest.raises(InvalidConfigError, match="GSSAPI is not supported"):  # SASL_SSL needs a mechanism
        Producer({"bootstrap.servers": addresses["SSL"], "security.protocol": "SASL_SSL"})


def test_confluent_kafka_over_tls_and_mutual_tls(tls, pki):
    _broker, addresses = tls
    for listener, extra in (("SSL", {}), ("MTLS", {"ssl.certificate.location": str(pki.client.cert),
                                                   "ssl.key.location": str(pki.client.key)})):
        topic = _topic(addresses)
        conf = {"bootstrap.servers": addresses[listener], "security.protocol": "SSL",
                "ssl.ca.location": str(pki.ca), **extra}
        producer = confluent_kafka.Producer(conf)
        for i in range(10):
            producer.produce(topic, f"c{i}".encode())
        assert producer.flush(30) == 0
        consumer = confluent_kafka.Consumer({**conf, "group.id": unique("g"), "auto.offset.reset": "earliest",
                                             "enable.auto.commit": False})
        try:
            consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
            got = []
            for msg in consumer.consume(10, timeout=30):
                assert msg.error() is None, msg.error()
                got.append(msg.value())
            while len(got) < 10:
                batch = consumer.consume(10 - len(got), timeout=30)
                assert batch, f"{listener}: only {len(got)} records"
                got += [m.value() for m in batch if m.error() is None]
        finally:
            consumer.close()
        assert got == [f"c{i}".encode() for i in range(10)]


def test_megabytes_of_records_fetched_over_tls(tls, pki):
    """Fetch answers carry record regions of segment files: through TLS they are read and encrypted in process
    (never sendfile'd), big answers included."""
    _broker, addresses = tls
    topic = _topic(addresses)
    conf = {"bootstrap.servers": addresses["SSL"], "security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    producer = confluent_kafka.Producer({**conf, "linger.ms": 20, "batch.size": 1_000_000})
    values = [(b"%08d" % i) * 2048 for i in range(600)]  # 16 KiB each, about 10 MB
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(120) == 0
    consumer = confluent_kafka.Consumer({**conf, "group.id": unique("g"), "enable.auto.commit": False,
                                         "fetch.max.bytes": 8_000_000, "max.partition.fetch.bytes": 8_000_000})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
        got = []
        while len(got) < len(values):
            batch = consumer.consume(500, timeout=30)
            assert batch, f"only {len(got)} of {len(values)} records"
            for m in batch:
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        consumer.close()
    assert got == values


def test_fetch_answers_of_several_partitions_over_tls(tls, pki):
    """A Fetch answer over TLS holding several partitions' record regions, with the headers between them, is
    written in groups of up to a megabyte (network.channel.TLS_WRITE_BYTES): every partition's records arrive whole and
    in order whatever group boundary falls between or after its region."""
    _broker, addresses = tls
    topic = unique("tls-parts")
    create_topic(addresses["PLAINTEXT"], topic, partitions=4)
    conf = {"bootstrap.servers": addresses["SSL"], "security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    producer = confluent_kafka.Producer({**conf, "linger.ms": 20, "batch.size": 1_000_000})
    # 4 partitions of 45 records of 12 KiB (about 540 KB each): an answer of all four crosses a group boundary
    # inside a region and between regions.
    values = {p: [(b"%d-%06d|" % (p, i)) * 1400 for i in range(45)] for p in range(4)}
    for p, vs in values.items():
        for v in vs:
            producer.produce(topic, v, partition=p)
    assert producer.flush(120) == 0
    consumer = confluent_kafka.Consumer({**conf, "group.id": unique("g"), "enable.auto.commit": False,
                                         "fetch.max.bytes": 8_000_000, "max.partition.fetch.bytes": 4_000_000,
                                         "fetch.wait.max.ms": 500, "fetch.min.bytes": 2_000_000})
    got: dict[int, list[bytes]] = {p: [] for p in values}
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING) for p in values])
        while sum(map(len, got.values())) < sum(map(len, values.values())):
            batch = consumer.consume(500, timeout=30)
            assert batch, f"only {[len(v) for v in got.values()]} records"
            for m in batch:
                assert m.error() is None, m.error()
                got[m.partition()].append(m.value())
    finally:
        consumer.close()
    assert got == values


def test_kafka_python_over_mutual_tls(tls, pki):
    kafka = pytest.importorskip("kafka")
    _broker, addresses = tls
    topic = _topic(addresses)
    conf = {"bootstrap_servers": addresses["MTLS"], "security_protocol": "SSL", "ssl_cafile": str(pki.ca),
            "ssl_certfile": str(pki.client.cert), "ssl_keyfile": str(pki.client.key)}
    producer = kafka.KafkaProducer(**conf)
    try:
        for i in range(5):
            producer.send(topic, f"k{i}".encode()).get(timeout=30)
    finally:
        producer.close()
    consumer = kafka.KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=30000, **conf)
    try:
        got = []
        for msg in consumer:
            got.append(msg.value)
            if len(got) == 5:
                break
    finally:
        consumer.close()
    assert got == [f"k{i}".encode() for i in range(5)]


def test_aiokafka_over_tls(tls, pki):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.helpers import create_ssl_context

    _broker, addresses = tls
    topic = _topic(addresses)

    async def run():
        ctx = create_ssl_context(cafile=str(pki.ca))
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=addresses["SSL"], security_protocol="SSL",
                                             ssl_context=ctx)
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, f"a{i}".encode())
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(topic, bootstrap_servers=addresses["SSL"], security_protocol="SSL",
                                             ssl_context=ctx, auto_offset_reset="earliest")
        await consumer.start()
        try:
            got = []
            while len(got) < 5:
                msg = await asyncio.wait_for(consumer.getone(), 30)
                got.append(msg.value)
            return got
        finally:
            await consumer.stop()

    assert asyncio.run(run()) == [f"a{i}".encode() for i in range(5)]


def test_kcat_over_mutual_tls(tls, pki):
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    _broker, addresses = tls
    topic = _topic(addresses)
    common = ["-b", addresses["MTLS"], "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={pki.ca}",
              "-X", f"ssl.certificate.location={pki.client.cert}", "-X", f"ssl.key.location={pki.client.key}"]
    subprocess.run(["kcat", *common, "-P", "-t", topic], input=b"one\ntwo\nthree\n", check=True, timeout=60)
    out = subprocess.run(["kcat", *common, "-C", "-t", topic, "-o", "beginning", "-e", "-c", "3"],
                         capture_output=True, check=True, timeout=60)
    assert out.stdout.split() == [b"one", b"two", b"three"]


def test_kafka_java_console_tools_over_tls_and_mutual_tls(tls, pki, kafka_tool):
    _broker, addresses = tls
    for listener, extra in (("SSL", []), ("MTLS", ["ssl.keystore.type=PEM",
                                                   f"ssl.keystore.location={pki.client.pem}"])):
        topic = _topic(addresses)
        props = ["security.protocol=SSL", "ssl.truststore.type=PEM", f"ssl.truststore.location={pki.ca}", *extra]
        produce_args = [a for p in props for a in ("--producer-property", p)]
        consume_args = [a for p in props for a in ("--command-property", p)]
        kafka_tool("ConsoleProducer", "--bootstrap-server", addresses[listener], "--topic", topic,
                       *produce_args, input="j1\nj2\nj3\n", timeout=120)
        out = kafka_tool("ConsoleConsumer", "--bootstrap-server", addresses[listener], "--topic", topic,
                             "--from-beginning", "--max-messages", "3", "--timeout-ms", "60000", *consume_args,
                             timeout=120)
        assert out.stdout.split() == ["j1", "j2", "j3"], out.stderr


# ---------------------------------------------------------------------------------------------- refusals


def _refused(address: str, ctx: ssl.SSLContext) -> None:
    """A TLS connection the broker does not serve: the handshake fails, or (TLS 1.3: the client's certificate
    is checked after the client finished) the first request gets no answer but the connection's end."""
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        raw = tls_raw(address, ctx)
        try:
            raw.request(ApiKey.API_VERSIONS, 3, {})
        finally:
            raw.close()


def test_mutual_tls_refuses_a_client_without_an_acceptable_certificate(tls, pki):
    broker, addresses = tls
    seen = len(broker.output)
    for _ in range(3):
        _refused(addresses["MTLS"], client_context(pki))  # no certificate at all
        _serving(broker, addresses, pki)  # a new connection may get the refused one's descriptor number
    _refused(addresses["MTLS"], client_context(pki, pki.stranger))  # signed by a CA the broker does not trust
    _serving(broker, addresses, pki)
    raw = tls_raw(addresses["MTLS"], client_context(pki, pki.client))  # the listener still serves good clients
    try:
        assert raw.request(ApiKey.API_VERSIONS, 3, {}).error_code == 0
    finally:
        raw.close()
    # the broker's output arrives through a pipe: wait for the line rather than race it
    failures = wait_for(lambda: [m["message"] for m in log_lines(broker.output[seen:], "WARNING")
                                 if "TLS handshake with 127.0.0.1 on listener MTLS failed" in m["message"]],
                        "the refused handshakes logged")
    # three clients without a certificate: one line (with the address), the repeats counted, not logged
    assert any("CERTIFICATE" in f.upper() for f in failures), failures
    assert len(failures) <= 2, failures


def test_a_certificate_no_mapping_rule_names_is_refused(tls, pki):
    """ssl.principal.mapping.rules without DEFAULT: a subject no rule matches has no principal, and Kafka
    refuses the connection; OU=eng subjects (the rule) are served."""
    broker, addresses = tls
    seen = len(broker.output)
    for _ in range(5):  # each time a new connection follows at once (it may get the refused one's descriptor)
        _refused(addresses["MTLS"], client_context(pki, pki.outsider))
        _serving(broker, addresses, pki)
    refused = wait_for(lambda: [m["message"] for m in log_lines(broker.output[seen:], "WARNING")
                                if "on listener MTLS" in m["message"] and "No rule" in m["message"]],
                       "the unmapped subject logged")
    assert pki.outsider.subject in refused[0], refused


def test_a_handshake_cut_halfway_never_disturbs_the_broker(tls, pki):
    broker, addresses = tls
    host, port = addresses["SSL"].rsplit(":", 1)
    # a real ClientHello, made in memory, of which only the first half is sent before the socket closes
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    hello_obj = client_context(pki).wrap_bio(incoming, outgoing, server_hostname=host)
    with pytest.raises(ssl.SSLWantReadError):
        hello_obj.do_handshake()
    hello = outgoing.read()
    assert len(hello) > 100
    for cut in (len(hello) // 2, len(hello)):
        with socket.create_connection((host, int(port)), timeout=20) as s:
            s.sendall(hello[:cut])
            if cut == len(hello):  # the whole hello: the broker answers, then the client disappears
                assert s.recv(5)
    _serving(broker, addresses, pki)


def test_garbage_and_a_plaintext_client_on_the_tls_port_never_disturb_the_broker(tls, pki):
    broker, addresses = tls
    host, port = addresses["SSL"].rsplit(":", 1)
    for payload in (bytes(range(256)) * 8, b"\x16\x03\x01\xff\xff" + b"\x00" * 100, b"GET / HTTP/1.1\r\n\r\n"):
        with socket.create_connection((host, int(port)), timeout=20) as s:
            s.sendall(payload)
            try:
                while s.recv(4096):  # an alert, then the end of the connection
                    pass
            except ConnectionResetError:
                pass
    # a Kafka client speaking plaintext to the TLS port: its request is no TLS record, nothing answers it
    raw = RawClient(addresses["SSL"], timeout=20)
    try:
        with pytest.raises((ConnectionError, OSError)):
            raw.request(ApiKey.API_VERSIONS, 3, {})
    finally:
        raw.close()
    # and a TLS client on the plaintext port fails its handshake, the plaintext listener serving on
    with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
        tls_raw(addresses["PLAINTEXT"], client_context(pki), timeout=20).close()
    _serving(broker, addresses, pki)


def test_the_broker_logged_no_error_and_no_traceback(tls):
    """Everything this module threw at the TLS listeners was handled as a refused connection: warnings, never
    an error or a traceback (the last test of the module, over everything before it)."""
    broker, _addresses = tls
    assert broker.proc.poll() is None
    assert not log_lines(broker.output, "ERROR"), [m["message"] for m in log_lines(broker.output, "ERROR")]
    assert not any("Traceback" in line for line in broker.output), "".join(broker.output)
