"""The table of every setting tierlog understands: broker, topic and client configuration.

Each :class:`ConfigDef` names one setting in one scope with its type, default, allowed values, a
one-line description and flags (dynamic, internal). Names, types, defaults and ranges follow Apache
Kafka 4.x (``KafkaConfig``, ``LogConfig``, ``RemoteLogManagerConfig``, the client configs) so that
Kafka clients and tools work unchanged; where tierlog deliberately departs from Kafka the setting is
listed in :data:`DELIBERATE_DIFFERENCES` together with the reason, and the generated
``docs/configuration.md`` renders that list.

A name can exist in several scopes with different meanings (``compression.type`` accepts
``producer`` on a broker or topic but ``none`` on a producer), so there is one definition per
(scope, name): see :data:`BROKER_CONFIGS`, :data:`TOPIC_CONFIGS` and :data:`CLIENT_CONFIGS`.
Topic settings carry their broker default keys in :attr:`ConfigDef.synonyms`, in Kafka's
precedence order (``retention.ms`` <- ``log.retention.ms`` <- ``log.retention.minutes`` <-
``log.retention.hours``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Literal

ConfigType = Literal["boolean", "short", "int", "long", "double", "string", "list", "password", "class"]
Scope = Literal["broker", "topic", "client"]
ClientRole = Literal["producer", "consumer", "admin"]

CONFIG_TYPES: tuple[str, ...] = ("boolean", "short", "int", "long", "double", "string", "list", "password",
                                 "class")
SCOPES: tuple[str, ...] = ("broker", "topic", "client")
CLIENT_ROLES: tuple[str, ...] = ("producer", "consumer", "admin")

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

#: Default prefixes of the remote storage plugin settings (``remote.log.storage.manager.impl.prefix``
#: and ``remote.log.metadata.manager.impl.prefix``).
RSM_PREFIX = "rsm.config."
_BUILTIN_RSM = ("filesystem", "objectstore")  # settings both built-in storage plugins read
RLMM_PREFIX = "rlmm.config."
#: Prefix of per-listener settings (Kafka's ``listener.name.<name>.``).
LISTENER_PREFIX = "listener.name."

#: Kafka's class name of the topic-based remote log metadata manager; tierlog accepts it as an alias
#: of its own ``topic`` implementation.
KAFKA_TBRLMM_CLASS = "org.apache.kafka.server.log.remote.metadata.storage.TopicBasedRemoteLogMetadataManager"


# ---------------------------------------------------------------------------------------------------
# Validators: what values a setting allows, as a check and as a human text
# ---------------------------------------------------------------------------------------------------


#: Kafka's replica selectors (``replica.selector.class``, KIP-392), by their Java class names.
RACK_AWARE_REPLICA_SELECTOR = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
LEADER_SELECTOR = "org.apache.kafka.common.replica.LeaderSelector"


class Validator:
    """Describes the allowed values of a setting. ``check`` returns None or the reason of a refusal."""

    def check(self, value: Any) -> str | None:  # pragma: no cover - interface
        raise NotImplementedError

    def describe(self) -> str:  # pragma: no cover - interface
        raise NotImplementedError


def _num(n: float) -> str:
    return str(n)


@dataclass(frozen=True)
class AtLeast(Validator):
    """A number not below ``minimum``; rendered ``[minimum,...]`` as in Kafka's docs."""

    minimum: float

    def check(self, value: Any) -> str | None:
        if value is not None and value < self.minimum:
            return f"Value must be at least {_num(self.minimum)}"
        return None

    def describe(self) -> str:
        return f"[{_num(self.minimum)},...]"


@dataclass(frozen=True)
class Between(Validator):
    """A number in ``[minimum, maximum]`` (both inclusive)."""

    minimum: float
    maximum: float

    def check(self, value: Any) -> str | None:
        if value is not None and not self.minimum <= value <= self.maximum:
            return f"Value must be between {_num(self.minimum)} and {_num(self.maximum)} (inclusive)"
        return None

    def describe(self) -> str:
        return f"[{_num(self.minimum)},...,{_num(self.maximum)}]"


@dataclass(frozen=True)
class InSet(Validator):
    """A string among ``values``. With ``case_insensitive`` the parsed value is normalised to the
    spelling in ``values`` (Kafka's ``CaseInsensitiveValidString`` accepts any case)."""

    values: tuple[str, ...]
    case_insensitive: bool = False

    def canonical(self, value: str) -> str:
        if self.case_insensitive:
            for v in self.values:
                if v.lower() == value.lower():
                    return v
        return value

    def check(self, value: Any) -> str | None:
        if value is None:
            return None
        if self.case_insensitive:
            ok = str(value).lower() in {v.lower() for v in self.values}
        else:
            ok = value in self.values
        if not ok:
            qualifier = " (case insensitive)" if self.case_insensitive else ""
            return f"String must be one of{qualifier}: {', '.join(self.values)}"
        return None

    def describe(self) -> str:
        return "[" + ", ".join(self.values) + "]" + (" (any case)" if self.case_insensitive else "")


@dataclass(frozen=True)
class ListIn(Validator):
    """A list whose every item is among ``values`` (an empty list is allowed)."""

    values: tuple[str, ...]

    def check(self, value: Any) -> str | None:
        if value is None:
            return None
        bad = [item for item in value if item not in self.values]
        if bad:
            return f"Every item must be one of: {', '.join(self.values)} (got {', '.join(bad) or '(empty)'})"
        return None

    def describe(self) -> str:
        return "[" + ", ".join(self.values) + "]"


@dataclass(frozen=True)
class NonEmpty(Validator):
    """A non-empty string or list (null stays allowed when the default is null)."""

    def check(self, value: Any) -> str | None:
        if value is not None and len(value) == 0:
            return "Value must be non-empty"
        return None

    def describe(self) -> str:
        return "non-empty"


@dataclass(frozen=True)
class Custom(Validator):
    """Any rule that the simple validators cannot express; ``text`` is what the docs show."""

    text: str
    func: Callable[[Any], str | None] = field(compare=False, repr=False)

    def check(self, value: Any) -> str | None:
        if value is None:
            return None
        return self.func(value)

    def describe(self) -> str:
        return self.text


# --- custom rules ----------------------------------------------------------------------------------


def parse_connection_overrides(value: str) -> dict[str, int]:
    """``host:count,host:count`` (Kafka's max.connections.per.ip.overrides) as a dict; ValueError if
    malformed. An IPv6 address keeps its colons: the count is what follows the last one."""
    overrides: dict[str, int] = {}
    for item in (value or "").split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host = host.strip().strip("[]")
        if not sep or not host or not count.strip().isdigit():
            raise ValueError(f"invalid entry {item!r}: expected host:count")
        overrides[host] = int(count)
    return overrides


def _check_connection_overrides(value: Any) -> str | None:
    try:
        parse_connection_overrides(value)
    except ValueError as e:
        return f"Must be host:count pairs separated by commas ({e})"
    return None


_LISTENER_RE = re.compile(r"^([A-Za-z0-9_-]+)://(\[[0-9A-Fa-f:.%a-z]*\]|[^:\[\]/,\s]*):(\d+)$")


def _check_listener_list(value: Any) -> str | None:
    items = [s.strip() for s in str(value).split(",")] if str(value).strip() else []
    names: set[str] = set()
    for item in items:
        m = _LISTENER_RE.match(item)
        if not m:
            return f"Each listener must look like NAME://host:port, got '{item}'"
        port = int(m.group(3))
        if port > 65535:
            return f"Port {port} of listener '{item}' is not in [0, 65535]"
        name = m.group(1).upper()
        if name in names:
            return f"Each listener must have a different name, '{name}' appears twice"
        names.add(name)
    return None


_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _check_protocol_map(value: Any) -> str | None:
    text = str(value).strip()
    if not text:
        return None
    for item in text.split(","):
        name, sep, proto = item.strip().partition(":")
        if not sep or not name.strip():
            return f"Each entry must look like LISTENER_NAME:SECURITY_PROTOCOL, got '{item.strip()}'"
        if proto.strip().upper() not in _SECURITY_PROTOCOLS:
            return f"Unknown security protocol '{proto.strip()}' (one of {', '.join(_SECURITY_PROTOCOLS)})"
    return None


_PY_PATH_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*([.:][A-Za-z_][A-Za-z0-9_]*)$")


def _plugin_name(short_names: tuple[str, ...],
                 kafka_aliases: tuple[str, ...] = ()) -> Callable[[Any], str | None]:
    def check(value: Any) -> str | None:
        v = str(value)
        if v in short_names or v in kafka_aliases or _PY_PATH_RE.match(v):
            return None
        return (f"Must be one of {', '.join(short_names)} or the import path of a plugin class "
                "(package.module:Class or package.module.Class)")

    return check


#: Kafka's authorizers, both served by tierlog's own (cluster/acls.py, server/authorizer.py).
AUTHORIZER_CLASSES = ("kafka.security.authorizer.AclAuthorizer",
                      "org.apache.kafka.metadata.authorizer.StandardAuthorizer")


def _check_authorizer(value: Any) -> str | None:
    if value in (None, "") or str(value).strip() in AUTHORIZER_CLASSES:
        return None
    return f"Unknown authorizer {value!r} (empty, or one of {', '.join(AUTHORIZER_CLASSES)})"


_HOST_PORT_RE = re.compile(r"^(\[[0-9A-Fa-f:.%a-z]+\]|[^:\[\]\s,]+):(\d+)$")


def _check_principal_rules(value: Any) -> str | None:
    from tierlog.security.principal import parse_rules

    try:
        parse_rules(str(value))
    except ValueError as e:
        return str(e)
    return None


def _check_bootstrap(value: Any) -> str | None:
    items = [str(v).strip() for v in value if str(v).strip()]
    if not items:
        return "At least one host:port must be given"
    for item in items:
        m = _HOST_PORT_RE.match(item)
        if not m or int(m.group(2)) > 65535:
            return f"Invalid url in bootstrap.servers: {item} (expected host:port)"
    return None


def _check_auto_offset_reset(value: Any) -> str | None:
    v = str(value).lower()
    if v in ("latest", "earliest", "none"):
        return None
    if v.startswith("by_duration:"):
        duration = value[len("by_duration:"):]
        if (re.fullmatch(r"P(?:\d+D)?(?:T(?:\d+H)?(?:\d+M)?(?:\d+(?:\.\d+)?S)?)?", duration, re.IGNORECASE)
                and duration.upper() not in ("P", "PT") and not duration.upper().endswith("T")):
            return None
        return f"by_duration needs an ISO-8601 duration such as P1DT2H, got '{duration}'"
    return "String must be one of: latest, earliest, none, by_duration:<ISO-8601 duration>"


_REPLICA_THROTTLE_RE = re.compile(r"^\d+:\d+$")


def _check_throttled_replicas(value: Any) -> str | None:
    items = list(value)
    if items == ["*"]:
        return None
    for item in items:
        if not _REPLICA_THROTTLE_RE.match(item.strip()):
            return "Must be * or a list of partitionId:brokerId pairs"
    return None


def _check_group_instance_id(value: Any) -> str | None:
    v = str(value)
    if not v:
        return "String must be non-empty"
    if len(v) > 249:
        return "Must be at most 249 characters"
    if not re.fullmatch(r"[a-zA-Z0-9._-]+", v):
        return "Only ASCII letters, digits, '.', '_' and '-' are allowed"
    return None


def _check_metadata_retention(value: Any) -> str | None:
    if value != -1 and value <= 0:
        return "Value must be -1 (unlimited) or greater than 0"
    return None


def _check_objectstore_url(value: Any) -> str | None:
    m = re.match(r"^([a-z][a-z0-9+.-]*)://", str(value))
    schemes = ("s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl", "file", "memory", "http", "https")
    if not m or m.group(1) not in schemes:
        return f"Must be a URL with one of the schemes {', '.join(schemes)} (e.g. s3://bucket/prefix)"
    return None


def _gzip_level(value: Any) -> str | None:
    if value == -1 or 1 <= value <= 9:
        return None
    return "Value must be -1 (library default) or between 1 and 9"


# ---------------------------------------------------------------------------------------------------
# The definition record
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Synonym:
    """A broker key that supplies the default of a topic setting; ``factor`` converts its unit to the
    topic setting's (``log.retention.hours`` has factor 3600000 towards ``retention.ms``)."""

    name: str
    factor: int = 1


@dataclass(frozen=True, eq=False)
class ConfigDef:
    """One setting in one scope.

    ``default`` is the typed default (None = null, i.e. unset). ``validator`` describes the allowed
    values. ``synonyms`` (topic settings only) lists the broker keys that supply the default, highest
    precedence first. ``dynamic`` marks settings that can be changed at runtime (broker: Kafka's
    dynamic broker configs; topic settings are always alterable). ``internal`` settings exist for tests
    and are left out of the main documentation tables. ``roles`` (client settings only) says which of
    producer / consumer / admin accept the setting; ``role_defaults`` overrides ``default`` per role.
    ``plugin`` / ``plugin_impl`` mark settings read by a remote storage plugin (their name carries the
    default ``rsm.config.`` / ``rlmm.config.`` prefix) and the implementation that reads them.
    ``value_aliases`` maps accepted spellings to the canonical value. ``inert`` says why a setting Kafka
    users may carry over is accepted but does nothing in tierlog yet. ``since`` notes where a setting
    comes from when it is not plain Kafka 4.0 (e.g. "Kafka 4.2", "Kafka trunk", "KIP-950 draft",
    "tierlog").
    """

    name: str
    type: ConfigType
    default: Any
    doc: str
    scope: Scope
    validator: Validator | None = None
    synonyms: tuple[Synonym, ...] = ()
    dynamic: bool = False
    internal: bool = False
    required: bool = False
    roles: frozenset[str] = frozenset()
    role_defaults: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    plugin: str | None = None
    plugin_impl: str | tuple[str, ...] | None = None
    value_aliases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    since: str | None = None
    inert: str | None = None  # why the setting is accepted but has no effect in tierlog yet

    @property
    def broker_key(self) -> str | None:
        """The highest-precedence broker key supplying this topic setting's default (Kafka's
        "Server Default Property"), or None."""
        return self.synonyms[0].name if self.synonyms else None

    @property
    def sensitive(self) -> bool:
        return self.type == "password"

    def default_for(self, role: str | None = None) -> Any:
        if role is not None and role in self.role_defaults:
            return self.role_defaults[role]
        return self.default

    def allowed(self) -> str:
        """Human text of the allowed values (empty when any value of the type is fine)."""
        return self.validator.describe() if self.validator else ""


# --- helpers to keep the table readable --------------------------------------------------------------


def _b(name: str, type_: ConfigType, default: Any, validator: Validator | None = None, *, doc: str,
       **kw: Any) -> ConfigDef:
    return ConfigDef(name=name, type=type_, default=default, doc=doc, scope="broker", validator=validator,
                     **kw)


def _t(name: str, type_: ConfigType, default: Any, validator: Validator | None = None,
       synonyms: tuple[Synonym, ...] | str | None = None, *, doc: str, **kw: Any) -> ConfigDef:
    if isinstance(synonyms, str):
        synonyms = (Synonym(synonyms),)
    return ConfigDef(name=name, type=type_, default=default, doc=doc, scope="topic", validator=validator,
                     synonyms=synonyms or (), dynamic=True, **kw)


_P = frozenset({"producer"})
_C = frozenset({"consumer"})
_A = frozenset({"admin"})
_PCA = frozenset(CLIENT_ROLES)


def _c(name: str, type_: ConfigType, default: Any, validator: Validator | None = None,
       roles: frozenset[str] = _PCA, *, doc: str, **kw: Any) -> ConfigDef:
    return ConfigDef(name=name, type=type_, default=default, doc=doc, scope="client", validator=validator,
                     roles=roles, **kw)


_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000
_WEEK_MS = 7 * 24 * _HOUR_MS

_BROKER_COMPRESSION = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_GZIP_LEVEL = Custom("[1,...,9] or -1", _gzip_level)
_LZ4_LEVEL = Between(1, 17)
_ZSTD_LEVEL = Between(-131072, 22)
_TIMESTAMP_TYPES = InSet(("CreateTime", "LogAppendTime"))

#: tierlog's minimum for ``segment.bytes`` / ``log.segment.bytes`` (Kafka 4.x: 1048576); see
#: :data:`DELIBERATE_DIFFERENCES`.
MIN_SEGMENT_BYTES = 14


# --- TLS (Kafka's ssl.* settings, shared by brokers and clients) -------------------------------------

_TLS_VERSIONS = ("TLSv1.2", "TLSv1.3", "TLSv1.1", "TLSv1")
_STORE_TYPES = InSet(("JKS", "PKCS12", "PEM"), case_insensitive=True)


def _ssl_common(make: Callable[..., ConfigDef], **kw: Any) -> tuple[ConfigDef, ...]:
    """The ssl.* settings both sides read (``make`` is _b or _c; ``kw`` e.g. dynamic=True on a broker)."""
    return (
        make("ssl.keystore.type", "string", "JKS", _STORE_TYPES, **kw,
             doc="Format of the keystore: PEM, or PKCS12 (JKS is accepted for files keytool wrote as PKCS12, "
                 "its default since Java 9; a real Java KeyStore file is refused with the command that converts "
                 "it)."),
        make("ssl.keystore.location", "string", None, **kw,
             doc="The keystore file: with PEM, the private key and the certificate chain in one file."),
        make("ssl.keystore.password", "password", None, **kw,
             doc="Password of a PKCS12 keystore (not used with PEM)."),
        make("ssl.key.password", "password", None, **kw,
             doc="Password of the private key: decrypts an encrypted PEM key (PKCS#8)."),
        make("ssl.keystore.key", "password", None, **kw,
             doc="The private key in PEM, inline (with ssl.keystore.type=PEM and "
                 "ssl.keystore.certificate.chain, instead of a keystore file)."),
        make("ssl.keystore.certificate.chain", "password", None, **kw,
             doc="The certificate chain in PEM, inline (with ssl.keystore.key)."),
        make("ssl.truststore.type", "string", "JKS", _STORE_TYPES, **kw,
             doc="Format of the truststore: PEM or PKCS12 (JKS as for ssl.keystore.type)."),
        make("ssl.truststore.location", "string", None, **kw,
             doc="The truststore file: the certificates of the authorities trusted to sign the peer's "
                 "certificate; unset, the system's authorities."),
        make("ssl.truststore.password", "password", None, **kw,
             doc="Password of a PKCS12 truststore (optional)."),
        make("ssl.truststore.certificates", "password", None, **kw,
             doc="Trusted certificates in PEM, inline (with ssl.truststore.type=PEM, instead of a file)."),
        make("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"], ListIn(_TLS_VERSIONS), **kw,
             doc="TLS versions allowed on the connection."),
        make("ssl.protocol", "string", "TLSv1.3", InSet(("TLS", "TLSv1.1", "TLSv1.2", "TLSv1.3", "SSL")), **kw,
             doc="The TLS protocol of the context; TLSv1.2 caps the version at 1.2, TLS and TLSv1.3 leave "
                 "ssl.enabled.protocols alone."),
        make("ssl.cipher.suites", "list", [], **kw,
             doc="Cipher suites allowed, by their IANA (Java) or OpenSSL names; empty: the defaults. TLS 1.3 "
                 "suites cannot be narrowed: a list without any disables TLS 1.3."),
    )


# ---------------------------------------------------------------------------------------------------
# Broker settings
# ---------------------------------------------------------------------------------------------------

_BROKER: tuple[ConfigDef, ...] = (
    # --- identity and roles ---
    _b("node.id", "int", 1, AtLeast(0),
       doc="Id of this node in the cluster; unique per broker."),
    _b("broker.id", "int", -1, AtLeast(-1),
       doc="Legacy name of the node id; when set (not -1) it must equal node.id."),
    _b("process.roles", "list", ["broker", "controller"],
       Custom("non-empty subset of [broker, controller] containing broker",
              lambda v: None if v and set(v) <= {"broker", "controller"} and "broker" in v
              else "Must be a non-empty subset of broker, controller that contains broker"),
       doc="Roles of this process; tierlog always runs the broker, with an embedded controller by default. "
           "Ignored in ZooKeeper mode (zookeeper.connect set), where every broker may become the controller."),
    _b("broker.rack", "string", None,
       doc="Rack of this broker; replica placement spreads each partition's replicas over racks."),
    # --- ZooKeeper mode (a cluster of brokers) ---
    _b("zookeeper.connect", "string", None,
       doc="host:port[,host:port...][/chroot] of the ZooKeeper ensemble holding the cluster's metadata. When "
           "set, the broker joins a multi-broker cluster: the controller is elected through ZooKeeper and "
           "broker.id (or node.id) names this broker. Unset: a single node with its embedded controller."),
    _b("zookeeper.session.timeout.ms", "int", 18000, AtLeast(1),
       doc="ZooKeeper session timeout: a broker silent this long is declared dead and its leaderships move."),
    _b("zookeeper.connection.timeout.ms", "int", None, AtLeast(1),
       doc="How long the broker waits to connect to ZooKeeper; defaults to zookeeper.session.timeout.ms."),
    _b("controlled.shutdown.enable", "boolean", True,
       doc="On a clean stop, ask the controller to move this broker's leaderships away before exiting."),
    _b("controlled.shutdown.max.retries", "int", 3, AtLeast(0),
       doc="Controlled shutdown attempts before the broker stops anyway."),
    _b("controlled.shutdown.retry.backoff.ms", "long", 5000, AtLeast(0),
       doc="Wait between two controlled shutdown attempts."),
    _b("auto.leader.rebalance.enable", "boolean", True,
       doc="The controller moves leadership back to each partition's preferred replica (the first in its "
           "list) when a broker's imbalance exceeds leader.imbalance.per.broker.percentage."),
    _b("leader.imbalance.check.interval.seconds", "long", 300, AtLeast(1),
       doc="How often the controller checks leader imbalance."),
    _b("leader.imbalance.per.broker.percentage", "int", 10, AtLeast(0),
       doc="Share of a broker's partitions led elsewhere than their preferred replica that triggers a "
           "rebalance."),
    _b("controller.socket.timeout.ms", "int", 30000, AtLeast(0),
       doc="Timeout of the controller's requests to brokers."),
    # --- replication ---
    _b("num.replica.fetchers", "int", 1, AtLeast(1), dynamic=True,
       doc="Replica fetchers per source broker: a follower's partitions led by one broker are spread over "
           "this many fetch loops, each with its own connection."),
    _b("replica.fetch.max.bytes", "int", 1048576, AtLeast(0),
       doc="Bytes a follower asks for per partition in one fetch (the first batch comes whole even when "
           "bigger)."),
    _b("replica.fetch.min.bytes", "int", 1, AtLeast(1),
       doc="Bytes a follower's fetch waits for before the leader answers."),
    _b("replica.fetch.wait.max.ms", "int", 500, AtLeast(0),
       doc="How long a follower's fetch waits at the leader for replica.fetch.min.bytes (keep it below "
           "replica.lag.time.max.ms)."),
    _b("replica.fetch.response.max.bytes", "int", 10485760, AtLeast(0),
       doc="Bytes a follower asks for in one fetch over all its partitions."),
    _b("replica.fetch.backoff.ms", "int", 1000, AtLeast(0),
       doc="How long a follower waits before fetching a partition again after an error."),
    _b("replica.socket.receive.buffer.bytes", "int", 65536, AtLeast(-1),
       doc="Socket receive buffer of a follower's fetch connections (-1: the system's default)."),
    _b("replica.socket.timeout.ms", "int", 30000, AtLeast(0),
       doc="Timeout of a follower's requests to its leader (at least replica.fetch.wait.max.ms)."),
    _b("replica.selector.class", "string", None,
       InSet((RACK_AWARE_REPLICA_SELECTOR, LEADER_SELECTOR)),
       doc="How a leader picks the replica a consumer should fetch from (KIP-392): unset or Kafka's "
           "LeaderSelector, the leader; Kafka's RackAwareReplicaSelector, a replica in the consumer's "
           "client.rack when the leader is elsewhere."),
    _b("replica.lag.time.max.ms", "long", 30000, AtLeast(0),
       doc="A follower that has not caught up with the leader's log end for this long leaves the in-sync "
           "replicas."),
    _b("leader.replication.throttled.rate", "long", LONG_MAX, AtLeast(0), dynamic=True,
       doc="Bytes per second this broker, as leader, sends of the replicas its topics list in "
           "leader.replication.throttled.replicas to followers not in the ISR (kafka-reassign-partitions "
           "--throttle sets it as a dynamic config of each broker it involves)."),
    _b("follower.replication.throttled.rate", "long", LONG_MAX, AtLeast(0), dynamic=True,
       doc="Bytes per second this broker, as follower, fetches of the replicas its topics list in "
           "follower.replication.throttled.replicas while not in the ISR."),
    _b("replication.quota.window.num", "int", 11, AtLeast(1),
       doc="Samples kept for the replication throttles."),
    _b("replication.quota.window.size.seconds", "int", 1, AtLeast(1),
       doc="Length of one replication throttle sample, in seconds."),
    _b("quota.window.num", "int", 11, AtLeast(1),
       doc="Samples kept for the client quotas (produce and fetch byte rates, request percentage)."),
    _b("quota.window.size.seconds", "int", 1, AtLeast(1),
       doc="Length of one client quota sample, in seconds."),
    # --- network ---
    _b("listeners", "string", "PLAINTEXT://127.0.0.1:9092",
       Custom("NAME://host:port,...", _check_listener_list), dynamic=True,
       doc="Comma-separated NAME://host:port addresses the broker binds; an empty host means all "
           "interfaces."),
    _b("advertised.listeners", "string", None,
       Custom("NAME://host:port,... (no 0.0.0.0)", _check_listener_list), dynamic=True,
       doc="Addresses given to clients in metadata responses, as NAME://host:port; defaults to listeners."),
    _b("listener.security.protocol.map", "string",
       "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
       Custom("NAME:PROTOCOL,...", _check_protocol_map), dynamic=True,
       doc="Maps each listener name to its security protocol, as NAME:PROTOCOL pairs."),
    _b("inter.broker.listener.name", "string", None,
       doc="Listener used between brokers; must be one of the advertised listeners."),
    _b("socket.request.max.bytes", "int", 104857600, AtLeast(1),
       doc="Largest request, in bytes, the broker reads from a socket."),
    _b("socket.send.buffer.bytes", "int", 102400,
       doc="SO_SNDBUF of broker sockets; -1 keeps the OS default."),
    _b("socket.receive.buffer.bytes", "int", 102400,
       doc="SO_RCVBUF of broker sockets; -1 keeps the OS default."),
    _b("connections.max.idle.ms", "long", 600000,
       doc="Idle client connections are closed after this many ms."),
    _b("max.connections", "int", INT_MAX, AtLeast(0), dynamic=True,
       doc="Most connections the broker holds at once, over all listeners; a connection beyond it is "
           "closed as soon as it is accepted."),
    _b("max.connections.per.ip", "int", INT_MAX, AtLeast(0), dynamic=True,
       doc="Most connections from one IP address; a connection beyond it is closed as soon as it is "
           "accepted. 0 is allowed when max.connections.per.ip.overrides is set."),
    _b("max.connections.per.ip.overrides", "string", "",
       Custom("host:count,...", _check_connection_overrides), dynamic=True,
       doc="Per-IP or per-hostname limits that replace max.connections.per.ip, as host:count pairs, e.g. "
           "hostName:100,127.0.0.1:200; host names are resolved when the limits are applied."),
    _b("security.inter.broker.protocol", "string", "PLAINTEXT", InSet(_SECURITY_PROTOCOLS, case_insensitive=True),
       doc="Security protocol between brokers, when inter.broker.listener.name is unset: the listener of that "
           "name carries the brokers' traffic. Set at most one of the two."),
    # --- TLS (per listener: listener.name.<name>.ssl.*) ---
    *_ssl_common(_b, dynamic=True),
    _b("ssl.client.auth", "string", "none", InSet(("required", "requested", "none"), case_insensitive=True),
       dynamic=True,
       doc="Client certificates on TLS listeners: required (mutual TLS: a client without a trusted "
           "certificate is refused), requested (checked when presented), none."),
    _b("ssl.endpoint.identification.algorithm", "string", "https", dynamic=True,
       doc="https: a broker connecting to another broker checks that its certificate names the host it "
           "connects to; empty: no check."),
    _b("ssl.allow.dn.changes", "boolean", False,
       doc="Whether a dynamic keystore update may change the certificate's subject (refused by default)."),
    _b("ssl.allow.san.changes", "boolean", False,
       doc="Whether a dynamic keystore update may change the certificate's subject alternative names (refused "
           "by default)."),
    _b("ssl.principal.mapping.rules", "string", "DEFAULT",
       Custom("DEFAULT or RULE:pattern/replacement/[LU],...", _check_principal_rules),
       doc="How the subject of a client certificate becomes the principal's name: rules "
           "RULE:pattern/replacement/ (L or U after the last slash lowercases or uppercases), tried in order, "
           "DEFAULT keeping the subject as it is (RFC 2253, e.g. CN=client,OU=eng,O=acme)."),
    # --- SASL (Kafka's names; PLAIN, SCRAM-SHA-256/512 and OAUTHBEARER are served) ---
    _b("sasl.enabled.mechanisms", "list", ["GSSAPI"],
       doc="SASL mechanisms a SASL_PLAINTEXT or SASL_SSL listener accepts (per listener: "
           "listener.name.<listener>.sasl.enabled.mechanisms): PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER. "
           "GSSAPI (Kerberos), Kafka's default, is not served: a SASL listener must name its mechanisms."),
    _b("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI",
       doc="The SASL mechanism brokers authenticate to each other with, when the inter-broker listener is "
           "SASL_PLAINTEXT or SASL_SSL."),
    _b("sasl.jaas.config", "password", None,
       doc="JAAS login configuration, Kafka's syntax (per listener and mechanism: "
           "listener.name.<listener>.<mechanism>.sasl.jaas.config). PLAIN: PlainLoginModule's user_<name>=\"password\" "
           "options are the users; username/password are what this broker sends to the others."),
    # --- dynamic password configs in ZooKeeper (Kafka's password encoder) ---
    _b("password.encoder.secret", "password", None,
       doc="ZooKeeper mode: the secret dynamic broker configs of type password (ssl.keystore.password, "
           "listener.name.<listener>.ssl.key.password, ...) are encrypted with in /config/brokers/<id>. Without it "
           "altering such a config is refused (\"Password encoder secret not configured\"). The controller "
           "encodes and every broker decodes its own: give every broker the same secret."),
    _b("password.encoder.old.secret", "password", None,
       doc="ZooKeeper mode: the previous password.encoder.secret, while the secret changes: stored passwords the "
           "secret cannot decode are decoded with this one."),
    _b("password.encoder.keyfactory.algorithm", "string", None,
       InSet(("PBKDF2WithHmacSHA512", "PBKDF2WithHmacSHA256", "PBKDF2WithHmacSHA1")),
       doc="How the encryption key is derived from password.encoder.secret (PBKDF2WithHmacSHA512 when unset, as "
           "Kafka on a JVM that has it)."),
    _b("password.encoder.cipher.algorithm", "string", "AES/CBC/PKCS5Padding",
       InSet(("AES/CBC/PKCS5Padding", "AES/GCM/NoPadding")),
       doc="The cipher encrypting dynamic password configs."),
    _b("password.encoder.key.length", "int", 128,
       Custom("128, 192 or 256", lambda v: None if v in (128, 192, 256) else "AES keys are 128, 192 or 256 bits"),
       doc="Length in bits of the AES key derived from password.encoder.secret."),
    _b("password.encoder.iterations", "int", 4096, AtLeast(1024),
       doc="PBKDF2 iterations deriving the key of each encoded password."),
    _b("sasl.server.max.receive.size", "int", 524288, AtLeast(1),
       doc="Largest SASL frame a client may send before it is authenticated; a bigger one closes the connection."),
    _b("connections.max.reauth.ms", "long", 0, AtLeast(0),
       doc="KIP-368: lifetime of an authenticated SASL session (0: unlimited). Clients are told it in "
           "SaslAuthenticate v1+ and re-authenticate before it ends; a connection past it is closed."),
    _b("sasl.oauthbearer.jwks.endpoint.url", "string", None,
       doc="OAUTHBEARER: where the signing keys of tokens are read (file:// or http(s)://); unset, unsecured "
           "tokens (alg none) are accepted, as Kafka's default validator does."),
    _b("sasl.oauthbearer.expected.audience", "list", [],  # Kafka 4.4's default (null before)
       doc="OAUTHBEARER: a token's aud must name one of these (empty: not checked)."),
    _b("sasl.oauthbearer.expected.issuer", "string", None,
       doc="OAUTHBEARER: a token's iss must be this (unset: not checked)."),
    _b("sasl.oauthbearer.sub.claim.name", "string", "sub",
       doc="OAUTHBEARER: the claim naming the principal."),
    _b("sasl.oauthbearer.scope.claim.name", "string", "scope",
       doc="OAUTHBEARER: the claim holding the token's scopes."),
    _b("sasl.oauthbearer.clock.skew.seconds", "int", 30, AtLeast(0),
       doc="OAUTHBEARER: how far the broker's and the issuer's clocks may differ when exp, iat and nbf are checked."),
    _b("max.request.partition.size.limit", "int", 2000, AtLeast(1), since="Kafka 3.8",
       doc="Most partitions one DescribeTopicPartitions answer carries (KIP-966); the rest are named by its cursor."),
    _b("queued.max.request.bytes", "long", -1,
       doc="Bytes of requests read (or being read) but not yet answered, over all connections; beyond it "
           "connections stop reading big requests until memory is freed (requests of up to 64 KiB are still "
           "read, from a reserve of an eighth of it, at least 1 MiB). -1 (or 0) is unbounded."),
    _b("internal.log.repeat.interval.ms", "long", 10000, AtLeast(1), internal=True, since="tierlog",
       doc="Interval in which a warning that repeats (accept errors, rejected connections) is logged once, "
           "then its repeats are counted."),
    _b("metrics.port", "int", None, Between(0, 65535), since="tierlog",
       doc="Port of the HTTP endpoint serving Prometheus metrics (/metrics), the probes /health and /ready, "
           "and the tiered storage status and reconciler (/v1/tier/status, /v1/tier/reconcile, read by tierlog "
           "tier); unset serves none, 0 picks a free port."),
    _b("metrics.host", "string", "127.0.0.1", since="tierlog",
       doc="Address the metrics endpoint binds to; the loopback address by default, so only this machine "
           "reaches it."),
    _b("metrics.ssl.enable", "boolean", False, since="tierlog",
       doc="Serve the HTTP endpoint (metrics.port) over HTTPS with the broker's keystore (ssl.keystore.*)."),
    _b("metrics.admin.enable", "boolean", False, since="tierlog",
       doc="Whether the metrics endpoint accepts admin operations (POST /v1/tier/reconcile?delete=true, which "
           "deletes remote objects); each needs the bearer token metrics.admin.token. Off, the endpoint is "
           "read-only."),
    _b("metrics.admin.token", "password", None, since="tierlog",
       doc="Bearer token of the metrics endpoint's admin operations (Authorization: Bearer <token>); required "
           "when metrics.admin.enable=true. tierlog tier reconcile --delete sends it (--token, "
           "TIERLOG_ADMIN_TOKEN or this setting of -c)."),
    # --- topics and logs ---
    _b("log.dirs", "list", None,
       Custom("distinct non-empty paths", lambda v: None if len(set(v)) == len(v) and all(v)
              else "Directories must be non-empty and distinct"),
       doc="Directories holding partition logs; when unset, log.dir is used."),
    _b("log.dir", "list", ["/tmp/tierlog-logs"],
       Custom("distinct non-empty paths", lambda v: None if len(set(v)) == len(v) and all(v)
              else "Directories must be non-empty and distinct"),
       doc="Log directory used when log.dirs is not set."),
    _b("cordoned.log.dirs", "list", [], dynamic=True, since="Kafka 4.3",
       doc="Log dirs that take no new partitions (KIP-1066): entries of log.dirs (or log.dir), or * for "
           "all; the partitions they hold stay. Dynamic per broker only, never as a cluster-wide default."),
    _b("num.partitions", "int", 1, AtLeast(1),
       doc="Partition count of auto-created topics and of CreateTopics with -1 partitions."),
    _b("default.replication.factor", "int", 1,
       doc="Replication factor of auto-created topics."),
    _b("auto.create.topics.enable", "boolean", True,
       doc="Create a topic when a client asks for metadata of an unknown one."),
    _b("authorizer.class.name", "string", "",
       Custom("empty, kafka.security.authorizer.AclAuthorizer or "
              "org.apache.kafka.metadata.authorizer.StandardAuthorizer", _check_authorizer),
       doc="The authorizer (docs/security.md, Authorization): Kafka's kafka.security.authorizer.AclAuthorizer or "
           "org.apache.kafka.metadata.authorizer.StandardAuthorizer enable ACLs (kept with the cluster metadata); "
           "empty, no authorization (every request is allowed and the ACL APIs answer SECURITY_DISABLED)."),
    _b("super.users", "string", "",
       doc="Principals allowed everything whatever the ACLs say, separated by semicolons "
           "(User:admin;User:ANONYMOUS)."),
    _b("allow.everyone.if.no.acl.found", "boolean", False,
       doc="With an authorizer: a resource no ACL matches is open to every principal (true) or to super "
           "users only (false, Kafka's default)."),
    _b("delete.topic.enable", "boolean", True,
       doc="Allow DeleteTopics; when false deletion requests are refused."),
    _b("message.max.bytes", "int", 1048588, AtLeast(0), dynamic=True,
       doc="Largest record batch the broker accepts (after compression)."),
    _b("fetch.max.bytes", "int", 57671680, AtLeast(1024),
       doc="Upper bound on the bytes returned for one Fetch request."),
    _b("num.recovery.threads.per.data.dir", "int", 2, AtLeast(1), dynamic=True,
       doc="Workers per log directory for recovery at start-up and flushing at shutdown."),
    _b("log.segment.bytes", "int", 1073741824, AtLeast(MIN_SEGMENT_BYTES), dynamic=True,
       doc="Size at which the active segment is rolled."),
    _b("log.roll.ms", "long", None, dynamic=True,
       doc="Age at which the active segment is rolled, in ms; overrides log.roll.hours."),
    _b("log.roll.hours", "int", 168, AtLeast(1),
       doc="Age at which the active segment is rolled, in hours (used if log.roll.ms unset)."),
    _b("log.roll.jitter.ms", "long", None, dynamic=True,
       doc="Largest random amount subtracted from the roll age, in ms; overrides log.roll.jitter.hours."),
    _b("log.roll.jitter.hours", "int", 0, AtLeast(0),
       doc="Largest random amount subtracted from the roll age, in hours."),
    _b("log.retention.ms", "long", None, dynamic=True,
       doc="Time a segment is kept before deletion, in ms; -1 keeps forever. Highest precedence of the "
           "three retention time keys."),
    _b("log.retention.minutes", "int", None,
       doc="Retention time in minutes, used when log.retention.ms is unset."),
    _b("log.retention.hours", "int", 168,
       doc="Retention time in hours, used when neither ms nor minutes is set."),
    _b("log.retention.bytes", "long", -1, dynamic=True,
       doc="Largest size of a partition log before old segments are deleted; -1 means no size limit."),
    _b("log.retention.check.interval.ms", "long", 300000, AtLeast(1),
       doc="How often retention is checked, in ms."),
    _b("log.cleanup.policy", "list", ["delete"], ListIn(("compact", "delete")), dynamic=True,
       doc="Default cleanup policy of topics: delete, compact or both (compact: see cleanup.policy)."),
    _b("log.cleaner.enable", "boolean", True,
       doc="Run the log cleaner that compacts topics with cleanup.policy=compact."),
    _b("log.cleaner.delete.retention.ms", "long", 86400000, AtLeast(0), dynamic=True,
       doc="How long tombstones stay in compacted topics, in ms."),
    _b("log.cleaner.min.compaction.lag.ms", "long", 0, AtLeast(0), dynamic=True,
       doc="Minimum age of a record before it may be compacted, in ms."),
    _b("log.cleaner.max.compaction.lag.ms", "long", LONG_MAX, AtLeast(1), dynamic=True,
       doc="Maximum time a record may stay uncompacted, in ms."),
    _b("log.cleaner.min.cleanable.ratio", "double", 0.5, Between(0, 1), dynamic=True,
       doc="Dirty fraction of a log that triggers compaction."),
    _b("log.cleaner.threads", "int", 1, AtLeast(0), dynamic=True,
       doc="Cleaner threads; each cleans one log at a time, the dirtiest first."),
    _b("log.cleaner.dedupe.buffer.size", "long", 134217728, AtLeast(0), dynamic=True,
       doc="Memory of the offset maps of all cleaner threads together, in bytes (24 bytes a key: two 64-bit "
           "key hashes and an offset, as Kafka's MD5 and offset)."),
    _b("log.cleaner.io.buffer.load.factor", "double", 0.9, Between(0, 1), dynamic=True,
       doc="How full an offset map may get before a cleaning round stops adding segments to it."),
    _b("log.cleaner.io.buffer.size", "int", 524288, AtLeast(0), dynamic=True,
       doc="Read and write buffer of each cleaner thread, in bytes."),
    _b("log.cleaner.io.max.bytes.per.second", "double", 1.7976931348623157e308, dynamic=True,
       doc="Throttle of the cleaners' reads and writes together, in bytes per second."),
    _b("log.cleaner.backoff.ms", "long", 15000, AtLeast(0), dynamic=True,
       doc="How long a cleaner thread sleeps when no log needs cleaning, in ms."),
    _b("log.index.size.max.bytes", "int", 10485760, AtLeast(4), dynamic=True,
       doc="Largest size of an offset or time index file."),
    _b("log.index.interval.bytes", "int", 4096, AtLeast(0), dynamic=True,
       doc="Bytes of log between two offset index entries."),
    _b("log.flush.interval.messages", "long", LONG_MAX, AtLeast(1), dynamic=True,
       doc="Records appended to a partition before it is fsynced."),
    _b("log.flush.interval.ms", "long", None, dynamic=True,
       doc="Longest time data may stay unflushed, in ms; defaults to log.flush.scheduler.interval.ms."),
    _b("log.flush.scheduler.interval.ms", "long", LONG_MAX,
       doc="How often the flusher looks for logs to flush, in ms."),
    _b("log.flush.offset.checkpoint.interval.ms", "int", 60000, AtLeast(0),
       doc="How often the recovery point checkpoint is written, in ms."),
    _b("log.flush.start.offset.checkpoint.interval.ms", "int", 60000, AtLeast(0),
       doc="How often the log start offset checkpoint is written, in ms."),
    _b("log.segment.delete.delay.ms", "long", 60000, AtLeast(0), dynamic=True,
       doc="Delay between marking a segment deleted and removing its files, in ms."),
    _b("log.preallocate", "boolean", False, dynamic=True,
       doc="Preallocate segment files to their full size on creation."),
    _b("log.message.timestamp.type", "string", "CreateTime", _TIMESTAMP_TYPES, dynamic=True,
       doc="Timestamp stored in batches: the producer's CreateTime or the broker's LogAppendTime."),
    _b("log.message.timestamp.before.max.ms", "long", LONG_MAX, AtLeast(0), dynamic=True,
       doc="How far in the past a CreateTime timestamp may be, in ms, before the batch is refused."),
    _b("log.message.timestamp.after.max.ms", "long", 3600000, AtLeast(0), dynamic=True,
       doc="How far in the future a CreateTime timestamp may be, in ms, before the batch is refused."),
    _b("log.initial.task.delay.ms", "long", 30000, AtLeast(0), internal=True,
       doc="Delay before the first run of the log manager's periodic tasks, in ms (for tests)."),
    _b("compression.type", "string", "producer", InSet(_BROKER_COMPRESSION), dynamic=True,
       doc="Compression of stored batches; producer keeps what the producer sent."),
    _b("compression.gzip.level", "int", -1, _GZIP_LEVEL, dynamic=True,
       doc="Level used when the broker compresses with gzip."),
    _b("compression.lz4.level", "int", 9, _LZ4_LEVEL, dynamic=True,
       doc="Level used when the broker compresses with lz4."),
    _b("compression.zstd.level", "int", 3, _ZSTD_LEVEL, dynamic=True,
       doc="Level used when the broker compresses with zstd."),
    _b("min.insync.replicas", "int", 1, AtLeast(1), dynamic=True,
       doc="Replicas that must acknowledge an acks=all write."),
    _b("unclean.leader.election.enable", "boolean", False, dynamic=True,
       doc="Allow an out-of-sync replica to become leader, accepting data loss."),
    # --- coordinators ---
    _b("offsets.topic.num.partitions", "int", 50, AtLeast(1),
       doc="Partitions of __consumer_offsets (fixed once created)."),
    _b("offsets.commit.timeout.ms", "int", 5000, AtLeast(1),
       doc="How long an offset commit waits for the in-sync replicas of its __consumer_offsets partition "
           "before it is answered COORDINATOR_NOT_AVAILABLE."),
    _b("offsets.topic.replication.factor", "short", 3, AtLeast(1),
       doc="Replication factor of __consumer_offsets; on a single node it is created with 1 (one warning)."),
    _b("offsets.retention.minutes", "int", 10080, AtLeast(1),
       doc="How long committed offsets of an empty group are kept, in minutes."),
    _b("offsets.retention.check.interval.ms", "long", 600000, AtLeast(1),
       doc="How often expired offsets are removed, in ms."),
    _b("group.initial.rebalance.delay.ms", "int", 3000,
       doc="Wait for more members before the first rebalance of an empty classic group, in ms."),
    _b("group.min.session.timeout.ms", "int", 6000,
       doc="Smallest session timeout a classic group member may ask for."),
    _b("group.max.session.timeout.ms", "int", 1800000,
       doc="Largest session timeout a classic group member may ask for."),
    _b("group.max.size", "int", 2147483647, AtLeast(1),
       doc="Most members a classic group may have; more get GROUP_MAX_SIZE_REACHED."),
    _b("group.coordinator.rebalance.protocols", "list", ["classic", "consumer"], ListIn(("classic", "consumer")),
       doc="The group protocols the coordinator serves: with 'consumer', ConsumerGroupHeartbeat and "
           "ConsumerGroupDescribe (KIP-848) are served and advertised by ApiVersions; 'classic' is always served."),
    _b("group.consumer.heartbeat.interval.ms", "int", 5000, AtLeast(1),
       doc="The heartbeat interval given to consumer group (KIP-848) members, in ms."),
    _b("group.consumer.min.heartbeat.interval.ms", "int", 5000, AtLeast(1),
       doc="Smallest group.consumer.heartbeat.interval.ms allowed."),
    _b("group.consumer.max.heartbeat.interval.ms", "int", 15000, AtLeast(1),
       doc="Largest group.consumer.heartbeat.interval.ms allowed."),
    _b("group.consumer.session.timeout.ms", "int", 45000, AtLeast(1),
       doc="How long a consumer group (KIP-848) member may go without a heartbeat before it is fenced, in ms."),
    _b("group.consumer.min.session.timeout.ms", "int", 45000, AtLeast(1),
       doc="Smallest group.consumer.session.timeout.ms allowed."),
    _b("group.consumer.max.session.timeout.ms", "int", 60000, AtLeast(1),
       doc="Largest group.consumer.session.timeout.ms allowed."),
    _b("group.consumer.assignment.interval.ms", "int", 1000, AtLeast(0), dynamic=True,
       doc="At most one new target assignment of a consumer group (KIP-848) per this many ms: the group epoch "
           "bumps in between (members joining or leaving together) are assigned at the first heartbeat after it; "
           "0 computes one at every bump."),
    _b("group.consumer.min.assignment.interval.ms", "int", 0, AtLeast(0),
       doc="Smallest group.consumer.assignment.interval.ms allowed."),
    _b("group.consumer.max.assignment.interval.ms", "int", 15000, AtLeast(0),
       doc="Largest group.consumer.assignment.interval.ms allowed."),
    _b("group.consumer.max.size", "int", 2147483647, AtLeast(1),
       doc="Most members a consumer group (KIP-848) may have; more get GROUP_MAX_SIZE_REACHED."),
    _b("group.consumer.assignors", "list", ["uniform", "range"],
       ListIn(("uniform", "range", "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
               "org.apache.kafka.coordinator.group.assignor.RangeAssignor")),
       doc="The server-side assignors of consumer groups, by name or Kafka's class name; the first is used when "
           "no member asks for one (ServerAssignor)."),
    _b("group.consumer.migration.policy", "string", "bidirectional",
       InSet(("disabled", "upgrade", "downgrade", "bidirectional"), case_insensitive=True),
       doc="Online migration of a group with members between the classic and the consumer protocol (KIP-848): "
           "upgrade converts a classic group when a consumer-protocol member joins it, downgrade converts a "
           "consumer group back when its last consumer-protocol member leaves and classic members remain. "
           "Empty groups convert whatever the policy."),
    # Share groups (KIP-932), with Kafka 4.4's defaults and ranges
    _b("group.share.record.lock.duration.ms", "int", 30000, Between(1000, 3600000),
       doc="How long a share consumer holds the records it acquired before they become available again, in ms."),
    _b("group.share.delivery.count.limit", "int", 5, Between(2, 10),
       doc="Deliveries of a record to a share group before a release or an expired lock archives it."),
    _b("group.share.partition.max.record.locks", "int", 2000, Between(100, 10000),
       doc="Most in-flight records (acquired or not yet finished) of one share-partition."),
    _b("group.share.max.share.sessions", "int", 2000, AtLeast(1),
       doc="Most share sessions a broker keeps (SHARE_SESSION_LIMIT_REACHED beyond)."),
    _b("group.share.session.timeout.ms", "int", 45000, AtLeast(1),
       doc="A share group member that does not heartbeat for this long is removed, in ms."),
    _b("group.share.heartbeat.interval.ms", "int", 5000, AtLeast(1),
       doc="How often share group members heartbeat, in ms."),
    _b("group.share.max.size", "int", 200, Between(1, 1000),
       doc="Most members of a share group; more get GROUP_MAX_SIZE_REACHED."),
    _b("errors.deadletterqueue.auto.create.topics.enable", "boolean", False, since="Kafka 4.4", dynamic=True,
       doc="Create a share group's dead-letter queue topic (KIP-1191) when it does not exist, with the default "
           "partitions and replication factor, errors.deadletterqueue.group.enable=true and "
           "message.timestamp.type=CreateTime; false: records bound for a missing DLQ topic are archived without "
           "it, as Kafka 4.4 does."),
    _b("errors.deadletterqueue.topic.name.prefix", "string", "dlq.", since="Kafka 4.4", dynamic=True,
       doc="The prefix a share group's dead-letter queue topic (its errors.deadletterqueue.topic.name, KIP-1191) "
           "must start with; empty: any name not starting with __. Dynamic, as in Kafka: read at each DLQ write."),
    _b("share.coordinator.state.topic.num.partitions", "int", 50, AtLeast(1),
       doc="Partitions of __share_group_state, set when the topic is created."),
    _b("share.coordinator.state.topic.replication.factor", "short", 3, AtLeast(1),
       doc="Replication factor of __share_group_state; on a single node it is created with 1 (one warning)."),
    _b("share.coordinator.state.topic.min.isr", "short", 2, AtLeast(1),
       doc="min.insync.replicas of __share_group_state."),
    _b("share.coordinator.state.topic.segment.bytes", "int", 104857600, AtLeast(1),
       doc="segment.bytes of __share_group_state, set when the topic is created."),
    _b("offset.metadata.max.bytes", "int", 4096,
       doc="Longest metadata string a committed offset may carry (OFFSET_METADATA_TOO_LARGE beyond)."),
    _b("offsets.topic.segment.bytes", "int", 104857600, AtLeast(1),
       doc="segment.bytes of __consumer_offsets, set when the topic is created."),
    _b("transaction.state.log.num.partitions", "int", 50, AtLeast(1),
       doc="Partitions of __transaction_state."),
    _b("transaction.state.log.replication.factor", "short", 3, AtLeast(1),
       doc="Replication factor of __transaction_state; set 1 on a single broker."),
    _b("transaction.state.log.min.isr", "int", 2, AtLeast(1),
       doc="min.insync.replicas of __transaction_state; set 1 on a single broker."),
    _b("transaction.state.log.segment.bytes", "int", 104857600, AtLeast(1),
       doc="segment.bytes of __transaction_state, set when the topic is created."),
    _b("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10000, AtLeast(1),
       doc="How often the transaction coordinator aborts transactions open longer than their timeout, in ms."),
    _b("transaction.remove.expired.transaction.cleanup.interval.ms", "int", 3600000, AtLeast(1),
       doc="How often the transaction coordinator removes expired transactional ids, in ms."),
    _b("transaction.max.timeout.ms", "int", 900000, AtLeast(1),
       doc="Largest transaction timeout a producer may ask for, in ms."),
    _b("transaction.version", "int", 2, Between(0, 2), since="tierlog",
       doc="The level a new cluster finalizes Kafka's transaction.version feature at (supported 0-2); afterwards "
           "kafka-features upgrade/downgrade (UpdateFeatures) changes the cluster's level, kept in the cluster "
           "metadata, and this setting is not read again. 2: KIP-890 part 2, clients run transaction version 2 "
           "(partition leaders add partitions, every commit or abort bumps the producer epoch); 0 or 1: clients "
           "run version 1."),
    _b("transaction.partition.verification.enable", "boolean", True, dynamic=True,
       doc="KIP-890 part 1: a partition leader appends the first transactional batch of a producer's "
           "transaction only once the transaction coordinator confirms the partition is in it."),
    _b("transactional.id.expiration.ms", "int", 604800000, AtLeast(1),
       doc="Idle time after which a transactional id expires, in ms."),
    _b("request.timeout.ms", "int", 30000, AtLeast(0),
       doc="Longest wait of the transaction coordinator for a state write to reach the in-sync replicas of "
           "__transaction_state, in ms (then the client gets COORDINATOR_NOT_AVAILABLE and retries)."),
    _b("producer.id.expiration.ms", "int", 86400000, AtLeast(1), dynamic=True,
       doc="Idle time after which an idempotent producer's state is dropped, in ms."),
    _b("producer.id.expiration.check.interval.ms", "int", 600000, AtLeast(1),
       doc="How often expired producer ids are removed, in ms."),
    # --- tiered storage (KIP-405) ---
    _b("remote.log.storage.system.enable", "boolean", False,
       doc="Master switch of tiered storage: starts the remote log manager, the storage plugin and the "
           "metadata manager."),
    _b("remote.log.storage.manager.class.name", "string", "filesystem",
       Custom("filesystem, objectstore or package.module:Class", _plugin_name(("filesystem", "objectstore"))),
       doc="Remote storage plugin: filesystem (a local or mounted folder), objectstore (S3, GCS, Azure, ... "
           "through obstore) or the import path of a custom class."),
    _b("remote.log.storage.manager.class.path", "string", None,
       doc="Extra import paths (os.pathsep-separated) searched first when loading a custom remote storage "
           "plugin."),
    _b("remote.log.storage.manager.impl.prefix", "string", RSM_PREFIX,
       doc="Prefix of the settings handed, without it, to the remote storage plugin."),
    _b("remote.log.metadata.manager.class.name", "string", "topic",
       Custom("topic or package.module:Class", _plugin_name(("topic", "memory"), (KAFKA_TBRLMM_CLASS,))),
       value_aliases=MappingProxyType({KAFKA_TBRLMM_CLASS: "topic"}),
       doc="Remote log metadata manager: topic (the __remote_log_metadata topic, Kafka's "
           "TopicBasedRemoteLogMetadataManager, whose Java class name is accepted too), memory (kept in the "
           "broker process only, lost at restart: for tests) or a custom class."),
    _b("remote.log.metadata.manager.class.path", "string", None,
       doc="Extra import paths (os.pathsep-separated) searched first when loading a custom metadata "
           "manager."),
    _b("remote.log.metadata.manager.impl.prefix", "string", RLMM_PREFIX,
       doc="Prefix of the settings handed, without it, to the remote log metadata manager."),
    _b("remote.log.metadata.manager.listener.name", "string", None,
       doc="Listener whose address the metadata manager's internal clients connect to; unset means the "
           "inter-broker listener."),
    _b("remote.log.metadata.custom.metadata.max.bytes", "int", 128, AtLeast(0),
       doc="Largest custom metadata a storage plugin may return for a copied segment (KIP-917); larger "
           "values stop the partition's copy task."),
    _b("remote.log.index.file.cache.total.size.bytes", "long", 1073741824, AtLeast(1), dynamic=True,
       doc="Disk budget for index files fetched from remote storage."),
    _b("remote.log.manager.thread.pool.size", "int", 2, AtLeast(1),
       doc="Workers running follower tasks (reading the highest uploaded offset); superseded by "
           "remote.log.manager.follower.thread.pool.size in Kafka 4.2."),
    _b("remote.log.manager.copier.thread.pool.size", "int", 10, AtLeast(1), dynamic=True,
       doc="Workers running segment copy tasks."),
    _b("remote.log.manager.expiration.thread.pool.size", "int", 10, AtLeast(1), dynamic=True,
       doc="Workers running remote retention tasks."),
    _b("remote.log.manager.follower.thread.pool.size", "int", 2, AtLeast(1), dynamic=True, since="Kafka 4.2",
       doc="Workers running follower tasks."),
    _b("remote.log.manager.task.interval.ms", "long", 30000, AtLeast(1),
       doc="Period of the copy, expiration and follower tasks, in ms."),
    _b("remote.log.manager.task.retry.backoff.ms", "long", 500, AtLeast(1), internal=True,
       doc="First back-off after a failed remote task, in ms."),
    _b("remote.log.manager.task.retry.backoff.max.ms", "long", 30000, AtLeast(1), internal=True,
       doc="Largest back-off after failed remote tasks, in ms."),
    _b("remote.log.manager.task.retry.jitter", "double", 0.2, Between(0, 0.5), internal=True,
       doc="Random jitter factor applied to the retry back-off."),
    _b("remote.log.reader.threads", "int", 10, AtLeast(1), dynamic=True,
       doc="Workers reading remote segments for fetches."),
    _b("remote.log.reader.max.pending.tasks", "int", 100, AtLeast(1),
       doc="Queued remote reads; when full, fetches of remote data get an error."),
    _b("remote.log.manager.copy.max.bytes.per.second", "long", LONG_MAX, AtLeast(1), dynamic=True,
       doc="Broker-wide upload quota in bytes per second (KIP-956)."),
    _b("remote.log.manager.copy.quota.window.num", "int", 11, AtLeast(1),
       doc="Samples kept for the upload quota."),
    _b("remote.log.manager.copy.quota.window.size.seconds", "int", 1, AtLeast(1),
       doc="Length of one upload quota sample, in seconds."),
    _b("remote.log.manager.fetch.max.bytes.per.second", "long", LONG_MAX, AtLeast(1), dynamic=True,
       doc="Broker-wide remote read quota in bytes per second; throttled partitions return no data and no "
           "error."),
    _b("remote.log.manager.fetch.quota.window.num", "int", 11, AtLeast(1),
       doc="Samples kept for the remote read quota."),
    _b("remote.log.manager.fetch.quota.window.size.seconds", "int", 1, AtLeast(1),
       doc="Length of one remote read quota sample, in seconds."),
    _b("remote.fetch.max.wait.ms", "int", 500, AtLeast(1), dynamic=True,
       doc="Longest wait for a remote read before a Fetch is answered, in ms."),
    _b("remote.list.offsets.request.timeout.ms", "long", 30000, AtLeast(1), dynamic=True,
       doc="Longest wait for a ListOffsets that needs remote data, in ms (KIP-1075)."),
    _b("follower.fetch.last.tiered.offset.enable", "boolean", False, dynamic=True, since="Kafka 4.3",
       doc="An empty follower of a tiered partition starts after the leader's last tiered offset (its "
           "state built from that remote segment) instead of copying the leader's local log (KIP-1023)."),
    _b("log.local.retention.ms", "long", -2, AtLeast(-2), dynamic=True,
       doc="Default local-tier retention time, in ms; -2 means use log.retention.ms."),
    _b("log.local.retention.bytes", "long", -2, AtLeast(-2), dynamic=True,
       doc="Default local-tier size limit per partition; -2 means use log.retention.bytes."),
    _b("log.remote.copy.lag.ms", "long", 0, AtLeast(-1), dynamic=True, since="Kafka 4.4",
       doc="Default age at which a rolled segment may be uploaded, in ms (KIP-1241); 0 uploads at once, -1 "
           "means local retention time."),
    _b("log.remote.copy.lag.bytes", "long", -1, AtLeast(-1), dynamic=True, since="Kafka 4.4",
       doc="Default local bytes after a rolled segment at which it may be uploaded (KIP-1241); 0 uploads at "
           "once, -1 means local retention size."),
    # --- the topic-based metadata manager, read under rlmm.config. ---
    _b("rlmm.config.remote.log.metadata.topic.num.partitions", "int", 50, AtLeast(1), plugin="rlmm",
       plugin_impl="topic",
       doc="Partitions of __remote_log_metadata; an existing topic must have exactly this many."),
    _b("rlmm.config.remote.log.metadata.topic.replication.factor", "short", 3, AtLeast(1), plugin="rlmm",
       plugin_impl="topic",
       doc="Replication factor of __remote_log_metadata; on a single node it is created with 1 (one warning)."),
    _b("rlmm.config.remote.log.metadata.topic.retention.ms", "long", -1,
       Custom("-1 or [1,...]", _check_metadata_retention), plugin="rlmm", plugin_impl="topic",
       doc="Retention of __remote_log_metadata; must outlive every tiered topic's retention."),
    _b("rlmm.config.remote.log.metadata.topic.min.isr", "short", 2, AtLeast(1), plugin="rlmm",
       plugin_impl="topic", since="Kafka 4.3",
       doc="min.insync.replicas given to __remote_log_metadata at creation (KIP-1235)."),
    _b("rlmm.config.remote.log.metadata.consume.wait.ms", "long", 120000, AtLeast(0), plugin="rlmm",
       plugin_impl="topic",
       doc="How long a metadata update waits for the manager's own consumer to read it back, in ms."),
    _b("rlmm.config.remote.log.metadata.initialization.retry.max.timeout.ms", "long", 120000, AtLeast(0),
       plugin="rlmm", plugin_impl="topic",
       doc="Total time allowed for the manager's start-up, counted from broker ready (KIP-1197), in ms."),
    _b("rlmm.config.remote.log.metadata.initialization.retry.interval.ms", "long", 100, AtLeast(0),
       plugin="rlmm", plugin_impl="topic",
       doc="Pause between start-up attempts of the manager, in ms."),
    _b("rlmm.config.remote.log.metadata.snapshot.interval.ms", "long", 60000, AtLeast(1), plugin="rlmm",
       plugin_impl="topic", since="tierlog",
       doc="How often the manager snapshots its cache per metadata partition, so a restart replays only the "
           "events after the snapshot (Kafka replays the whole topic), in ms; also written at shutdown."),
    # --- tierlog's own storage plugins, read under rsm.config. ---
    _b("rsm.config.dir", "string", None, NonEmpty(), plugin="rsm", plugin_impl="filesystem", since="tierlog",
       doc="Folder of the filesystem remote storage; required when it is the active plugin."),
    _b("rsm.config.url", "string", None,
       Custom("s3://, gs://, az://, file://, memory://, ... URL", _check_objectstore_url), plugin="rsm",
       plugin_impl="objectstore", since="tierlog",
       doc="Bucket URL of the objectstore remote storage, e.g. s3://bucket/prefix, gs://..., az://..., "
           "file:///path or memory://; other rsm.config.* keys are passed to obstore."),
    _b("rsm.config.key.prefix", "string", "", plugin="rsm", plugin_impl=_BUILTIN_RSM, since="tierlog",
       doc="Prepended to every object key of the built-in storage plugins: a relative /-separated path without "
           ". or .. parts; end it with / to get a folder."),
    _b("rsm.config.key.cluster.id.enable", "boolean", True, plugin="rsm", plugin_impl=_BUILTIN_RSM,
       since="tierlog",
       doc="Put the cluster id in every object key ({key.prefix}{cluster id}/{topic}-{topicId}/...), so "
           "clusters sharing one bucket or folder never collide; false writes the older layout without it. "
           "Reads find segments of either layout."),
    _b("rsm.config.custom.metadata.enable", "boolean", None, plugin="rsm", plugin_impl=_BUILTIN_RSM,
       since="tierlog",
       doc="Whether a copy returns custom metadata (KIP-917: the key prefix and stored size); null means the "
           "backend's own default, false for filesystem and true for objectstore."),
    _b("rsm.config.compression.enable", "boolean", False, plugin="rsm", plugin_impl=_BUILTIN_RSM, since="tierlog",
       doc="Store each segment's .log as independently zstd-compressed chunks."),
    _b("rsm.config.compression.chunk.size", "int", 4 * 1024 * 1024, AtLeast(1), plugin="rsm",
       plugin_impl=_BUILTIN_RSM, since="tierlog", doc="Original bytes per compressed chunk."),
    _b("rsm.config.compression.level", "int", 3, Between(-7, 22), plugin="rsm", plugin_impl=_BUILTIN_RSM,
       since="tierlog", doc="zstd level of the compressed chunks."),
    _b("rsm.config.compression.heuristic.enable", "boolean", False, plugin="rsm", plugin_impl=_BUILTIN_RSM,
       since="tierlog",
       doc="Store a segment raw when its first batch is already compressed (compressing again gains little)."),
    _b("rsm.config.fsync.enable", "boolean", True, plugin="rsm", plugin_impl="filesystem", since="tierlog",
       doc="Fsync each object of the filesystem remote storage, and its folder, before the rename that "
           "publishes it."),
    _b("rsm.config.upload.part.size", "int", 8 * 1024 * 1024, AtLeast(5 * 1024 * 1024), plugin="rsm",
       plugin_impl="objectstore", since="tierlog",
       doc="Part size of the objectstore's multipart uploads (.log objects larger than one part)."),
    _b("rsm.config.request.timeout.ms", "long", None, AtLeast(1), plugin="rsm", plugin_impl="objectstore",
       since="tierlog", doc="HTTP request timeout of the objectstore; null means obstore's (30 s)."),
    _b("rsm.config.connect.timeout.ms", "long", None, AtLeast(1), plugin="rsm", plugin_impl="objectstore",
       since="tierlog", doc="HTTP connect timeout of the objectstore; null means obstore's (5 s)."),
    _b("rsm.config.retry.max.retries", "int", None, AtLeast(0), plugin="rsm", plugin_impl="objectstore",
       since="tierlog", doc="obstore's retries of a failed call; null means obstore's (10)."),
    _b("rsm.config.retry.timeout.ms", "long", None, AtLeast(0), plugin="rsm", plugin_impl="objectstore",
       since="tierlog", doc="obstore's total retry time; null means obstore's (3 minutes)."),
    _b("rsm.config.retry.backoff.ms", "long", None, AtLeast(0), plugin="rsm", plugin_impl="objectstore",
       since="tierlog", doc="obstore's first retry backoff; null means obstore's (100 ms)."),
    _b("rsm.config.retry.backoff.max.ms", "long", None, AtLeast(0), plugin="rsm", plugin_impl="objectstore",
       since="tierlog", doc="obstore's largest retry backoff; null means obstore's (15 s)."),
)


# ---------------------------------------------------------------------------------------------------
# Topic settings (broker default keys in precedence order)
# ---------------------------------------------------------------------------------------------------

_TOPIC: tuple[ConfigDef, ...] = (
    _t("cleanup.policy", "list", ["delete"], ListIn(("compact", "delete")), "log.cleanup.policy",
       doc="delete removes old segments, compact keeps the last record per key (the log cleaner); both may "
           "be combined. A compacted topic may be tiered (uploads only cleaned segments)."),
    _t("compression.type", "string", "producer", InSet(_BROKER_COMPRESSION), "compression.type",
       doc="Compression of stored batches; producer keeps the producer's."),
    _t("compression.gzip.level", "int", -1, _GZIP_LEVEL, "compression.gzip.level",
       doc="gzip level when the broker recompresses."),
    _t("compression.lz4.level", "int", 9, _LZ4_LEVEL, "compression.lz4.level",
       doc="lz4 level when the broker recompresses."),
    _t("compression.zstd.level", "int", 3, _ZSTD_LEVEL, "compression.zstd.level",
       doc="zstd level when the broker recompresses."),
    _t("delete.retention.ms", "long", 86400000, AtLeast(0), "log.cleaner.delete.retention.ms",
       doc="How long tombstones stay readable in a compacted topic, in ms."),
    _t("file.delete.delay.ms", "long", 60000, AtLeast(0), "log.segment.delete.delay.ms",
       doc="Delay before a deleted segment's files are removed, in ms."),
    _t("flush.messages", "long", LONG_MAX, AtLeast(1), "log.flush.interval.messages",
       doc="Records appended before the log is fsynced."),
    _t("flush.ms", "long", LONG_MAX, AtLeast(0),
       (Synonym("log.flush.interval.ms"), Synonym("log.flush.scheduler.interval.ms")),
       doc="Longest time data stays unflushed, in ms."),
    _t("index.interval.bytes", "int", 4096, AtLeast(0), "log.index.interval.bytes",
       doc="Bytes of log between two offset index entries."),
    _t("max.compaction.lag.ms", "long", LONG_MAX, AtLeast(1), "log.cleaner.max.compaction.lag.ms",
       doc="Longest time a record may stay uncompacted, in ms."),
    _t("min.compaction.lag.ms", "long", 0, AtLeast(0), "log.cleaner.min.compaction.lag.ms",
       doc="Minimum age before a record may be compacted, in ms."),
    _t("min.cleanable.dirty.ratio", "double", 0.5, Between(0, 1), "log.cleaner.min.cleanable.ratio",
       doc="Dirty fraction that triggers compaction."),
    _t("max.message.bytes", "int", 1048588, AtLeast(0), "message.max.bytes",
       doc="Largest record batch the topic accepts (after compression)."),
    _t("message.timestamp.type", "string", "CreateTime", _TIMESTAMP_TYPES, "log.message.timestamp.type",
       doc="CreateTime keeps the producer's timestamps, LogAppendTime stamps batches with the broker's "
           "clock."),
    _t("message.timestamp.before.max.ms", "long", LONG_MAX, AtLeast(0), "log.message.timestamp.before.max.ms",
       doc="How far in the past a CreateTime timestamp may be, in ms."),
    _t("message.timestamp.after.max.ms", "long", 3600000, AtLeast(0), "log.message.timestamp.after.max.ms",
       doc="How far in the future a CreateTime timestamp may be, in ms."),
    _t("min.insync.replicas", "int", 1, AtLeast(1), "min.insync.replicas",
       doc="Replicas that must acknowledge an acks=all write."),
    _t("preallocate", "boolean", False, None, "log.preallocate",
       doc="Preallocate new segment files to their full size."),
    _t("retention.bytes", "long", -1, None, "log.retention.bytes",
       doc="Largest size of a partition (remote plus local) before its oldest segments are deleted; -1 "
           "means no limit."),
    _t("retention.ms", "long", _WEEK_MS, AtLeast(-1),
       (Synonym("log.retention.ms"), Synonym("log.retention.minutes", _MINUTE_MS),
        Synonym("log.retention.hours", _HOUR_MS)),
       doc="Age after which segments are deleted (remote plus local), in ms; -1 keeps forever."),
    _t("segment.bytes", "int", 1073741824, AtLeast(MIN_SEGMENT_BYTES), "log.segment.bytes",
       doc="Size at which the active segment is rolled."),
    _t("segment.index.bytes", "int", 10485760, AtLeast(4), "log.index.size.max.bytes",
       doc="Largest size of a segment's offset or time index."),
    _t("segment.jitter.ms", "long", 0, AtLeast(0),
       (Synonym("log.roll.jitter.ms"), Synonym("log.roll.jitter.hours", _HOUR_MS)),
       doc="Largest random amount subtracted from segment.ms, in ms."),
    _t("segment.ms", "long", _WEEK_MS, AtLeast(1),
       (Synonym("log.roll.ms"), Synonym("log.roll.hours", _HOUR_MS)),
       doc="Age at which the active segment is rolled even if not full, in ms."),
    _t("unclean.leader.election.enable", "boolean", False, None, "unclean.leader.election.enable",
       doc="Allow an out-of-sync replica to become leader."),
    _t("local.retention.ms", "long", -2, AtLeast(-2), "log.local.retention.ms",
       doc="Age after which uploaded segments leave the local disk, in ms; -2 means retention.ms. Must not "
           "exceed retention.ms."),
    _t("local.retention.bytes", "long", -2, AtLeast(-2), "log.local.retention.bytes",
       doc="Local size per partition above which uploaded segments leave the local disk; -2 means "
           "retention.bytes. Must not exceed retention.bytes."),
    _t("errors.deadletterqueue.group.enable", "boolean", False, since="Kafka 4.4",
       doc="Share groups may write the records they give up on to this topic as their dead-letter queue "
           "(KIP-1191); a group naming a topic without it writes none."),
    _t("remote.storage.enable", "boolean", False,
       doc="Tier this topic's closed segments to remote storage (needs remote.log.storage.system.enable and "
           "cleanup.policy=delete)."),
    _t("remote.log.copy.disable", "boolean", False,
       doc="Stop uploading; remote data stays readable and expires by retention (KIP-950). "
           "local.retention.* must then be -2 or equal retention.*."),
    _t("remote.log.delete.on.disable", "boolean", False,
       doc="When remote.storage.enable goes from true to false, delete the topic's remote data (KIP-950)."),
    _t("remote.log.disable.policy", "string", "retain", InSet(("retain", "delete")), since="KIP-950 draft",
       doc="What turning remote.storage.enable off does: retain keeps remote data readable until it "
           "expires, delete removes it (KIP-950 draft)."),
    _t("remote.copy.lag.ms", "long", 0, AtLeast(-1), "log.remote.copy.lag.ms", since="Kafka 4.4",
       doc="Age at which a rolled segment may be uploaded, in ms (KIP-1241): uploaded once this old or once "
           "remote.copy.lag.bytes follow it; 0 uploads at once, -1 means local retention time (unlimited: "
           "no time check)."),
    _t("remote.copy.lag.bytes", "long", -1, AtLeast(-1), "log.remote.copy.lag.bytes", since="Kafka 4.4",
       doc="Bytes following a rolled segment at which it may be uploaded (KIP-1241): uploaded once this many "
           "follow it or once it is remote.copy.lag.ms old; 0 uploads at once, -1 means local retention "
           "size (unlimited: no size check)."),
    _t("leader.replication.throttled.replicas", "list", [],
       Custom("* or partition:broker,...", _check_throttled_replicas),
       doc="Replicas whose leader throttles what it sends to followers not in the ISR (at the leader's "
           "leader.replication.throttled.rate), as partition:broker pairs naming the leader's broker, or * for "
           "all."),
    _t("follower.replication.throttled.replicas", "list", [],
       Custom("* or partition:broker,...", _check_throttled_replicas),
       doc="Replicas that fetch at most the follower's follower.replication.throttled.rate while not in the "
           "ISR, as partition:broker pairs naming the follower's broker, or * for all."),
    _t("internal.segment.bytes", "int", None, AtLeast(MIN_SEGMENT_BYTES), internal=True,
       doc="Segment size overriding segment.bytes without its minimum (Kafka 4.x's hook for tests)."),
)


# ---------------------------------------------------------------------------------------------------
# Client settings
# ---------------------------------------------------------------------------------------------------

_CLIENT: tuple[ConfigDef, ...] = (
    # --- common ---
    _c("bootstrap.servers", "list", [], Custom("host:port,... (at least one)", _check_bootstrap),
       required=True,
       doc="host:port pairs used to find the cluster; the client learns the rest from metadata."),
    _c("client.id", "string", "",
       doc="Name sent with every request, for broker logs and quotas."),
    _c("client.dns.lookup", "string", "use_all_dns_ips",
       InSet(("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only")),
       doc="Try every address a host name resolves to, or resolve bootstrap names to canonical names first."),
    _c("security.protocol", "string", "PLAINTEXT", InSet(_SECURITY_PROTOCOLS, case_insensitive=True),
       doc="Protocol used to talk to brokers."),
    *_ssl_common(_c),
    _c("ssl.endpoint.identification.algorithm", "string", "https",
       doc="https: check that the broker's certificate names the host connected to (its SAN); empty: no "
           "check."),
    _c("sasl.mechanism", "string", "GSSAPI",
       doc="SASL mechanism with security.protocol SASL_PLAINTEXT or SASL_SSL: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 "
           "or OAUTHBEARER (GSSAPI, Kafka's default, is not supported)."),
    _c("sasl.jaas.config", "password", None,
       doc="Java clients' login: PlainLoginModule or ScramLoginModule with username and password; "
           "OAuthBearerLoginModule with unsecuredLoginStringClaim_sub (an unsecured token, for development)."),
    _c("sasl.username", "string", None, doc="confluent-kafka's name for the SASL user (PLAIN, SCRAM)."),
    _c("sasl.password", "password", None, doc="confluent-kafka's name for the SASL password (PLAIN, SCRAM)."),
    _c("sasl.oauthbearer.config", "string", None,
       doc="confluent-kafka's unsecured OAUTHBEARER token settings: principal=<name> [lifeSeconds=<s>] "
           "[scope=<a,b>]."),
    _c("metadata.recovery.strategy", "string", "rebootstrap",
       InSet(("none", "rebootstrap"), case_insensitive=True),
       doc="What to do when no known broker is reachable: none fails, rebootstrap starts again from "
           "bootstrap.servers (KIP-899)."),
    _c("metadata.recovery.rebootstrap.trigger.ms", "long", 300000, AtLeast(0),
       doc="Rebootstrap after this long without metadata from any broker, in ms (KIP-1102)."),
    _c("metadata.max.age.ms", "long", 300000, AtLeast(0),
       doc="Metadata is refreshed at least this often, in ms."),
    _c("reconnect.backoff.ms", "long", 50, AtLeast(0),
       doc="Wait before reconnecting to a broker, in ms."),
    _c("reconnect.backoff.max.ms", "long", 1000, AtLeast(0),
       doc="Largest reconnect wait after repeated failures, in ms."),
    _c("retry.backoff.ms", "long", 100, AtLeast(0),
       doc="Wait before retrying a failed request, in ms."),
    _c("retry.backoff.max.ms", "long", 1000, AtLeast(0),
       doc="Largest retry wait after repeated failures, in ms."),
    _c("request.timeout.ms", "int", 30000, AtLeast(0),
       doc="Time to wait for a response before retrying or failing, in ms."),
    _c("socket.connection.setup.timeout.ms", "long", 10000,
       doc="Time allowed to establish a connection, in ms."),
    _c("socket.connection.setup.timeout.max.ms", "long", 30000,
       doc="Largest connection set-up time after repeated failures, in ms."),
    _c("connections.max.idle.ms", "long", 540000, role_defaults=MappingProxyType({"admin": 300000}),
       doc="Idle connections are closed after this many ms."),
    _c("default.api.timeout.ms", "int", 60000, AtLeast(0), roles=frozenset({"consumer", "admin"}),
       doc="Timeout of client calls that take no explicit timeout, in ms."),
    _c("retries", "int", INT_MAX, AtLeast(0), roles=frozenset({"producer", "admin"}),
       doc="How many times a failed request is retried (bounded by the timeouts)."),
    # --- producer ---
    _c("acks", "string", "all", InSet(("all", "-1", "0", "1")), roles=_P,
       doc="Acknowledgements a write needs: 0 none, 1 the leader, all (-1) every in-sync replica."),
    _c("linger.ms", "long", 5, AtLeast(0), roles=_P,
       doc="Time a batch waits for more records before it is sent, in ms."),
    _c("batch.size", "int", 16384, AtLeast(0), roles=_P,
       doc="Target size of a batch per partition, in bytes."),
    _c("enable.idempotence", "boolean", True, roles=_P,
       doc="Write each record exactly once per partition; needs acks=all, retries > 0 and at most 5 "
           "requests in flight."),
    _c("compression.type", "string", "none", InSet(("none", "gzip", "snappy", "lz4", "zstd")), roles=_P,
       doc="Compression of produced batches."),
    _c("compression.gzip.level", "int", -1, _GZIP_LEVEL, roles=_P,
       doc="gzip level for produced batches."),
    _c("compression.lz4.level", "int", 9, _LZ4_LEVEL, roles=_P,
       doc="lz4 level for produced batches."),
    _c("compression.zstd.level", "int", 3, _ZSTD_LEVEL, roles=_P,
       doc="zstd level for produced batches."),
    _c("delivery.timeout.ms", "int", 120000, AtLeast(0), roles=_P,
       doc="Upper bound on the time to report success or failure of a send; at least linger.ms + "
           "request.timeout.ms."),
    _c("max.in.flight.requests.per.connection", "int", 5, AtLeast(1), roles=_P,
       doc="Unacknowledged requests per connection."),
    _c("max.request.size", "int", 1048576, AtLeast(0), roles=_P,
       doc="Largest produce request, in bytes."),
    _c("buffer.memory", "long", 33554432, AtLeast(0), roles=_P,
       doc="Memory for records waiting to be sent, in bytes."),
    _c("max.block.ms", "long", 60000, AtLeast(0), roles=_P,
       doc="How long send() and metadata waits may block, in ms."),
    _c("partitioner.ignore.keys", "boolean", False, roles=_P,
       doc="Ignore keys when choosing a partition."),
    _c("transactional.id", "string", None, NonEmpty(), roles=_P,
       doc="Id that makes the producer transactional (init_transactions, begin, commit, abort), kept "
           "across producer restarts; tierlog's client needs an Apache Kafka cluster for it until "
           "tierlog's broker has a transaction coordinator."),
    _c("transaction.timeout.ms", "int", 60000, roles=_P,
       doc="Time after which the coordinator aborts an open transaction, in ms."),
    _c("key.serializer", "class", None, roles=_P,
       doc="Serializer of record keys (accepted for Kafka compatibility)."),
    _c("value.serializer", "class", None, roles=_P,
       doc="Serializer of record values (accepted for Kafka compatibility)."),
    # --- consumer ---
    _c("group.id", "string", None, roles=_C,
       doc="Consumer group of this consumer; needed for subscribe() and committed offsets."),
    _c("group.instance.id", "string", None,
       Custom("non-empty, [a-zA-Z0-9._-], at most 249 characters", _check_group_instance_id), roles=_C,
       doc="Static membership id of this consumer (KIP-345)."),
    _c("group.protocol", "string", "classic", InSet(("classic", "consumer"), case_insensitive=True), roles=_C,
       doc="Group protocol: classic (JoinGroup/SyncGroup), or consumer (KIP-848's ConsumerGroupHeartbeat)."),
    _c("group.remote.assignor", "string", None, roles=_C,
       doc="With group.protocol=consumer: the broker's assignor for the group (e.g. uniform, range); "
           "none: the broker's default."),
    _c("auto.offset.reset", "string", "latest",
       Custom("[latest, earliest, none, by_duration:<duration>]", _check_auto_offset_reset), roles=_C,
       doc="Where to start without a committed offset: latest, earliest, none (fail) or "
           "by_duration:<ISO-8601 duration>."),
    _c("enable.auto.commit", "boolean", True, roles=_C,
       doc="Commit consumed offsets periodically in the background."),
    _c("auto.commit.interval.ms", "int", 5000, AtLeast(0), roles=_C,
       doc="Period of automatic offset commits, in ms."),
    _c("isolation.level", "string", "read_uncommitted", InSet(("read_committed", "read_uncommitted")),
       roles=_C,
       doc="read_committed hides records of open and aborted transactions."),
    _c("fetch.min.bytes", "int", 1, AtLeast(0), roles=_C,
       doc="Bytes a fetch waits for before the broker answers."),
    _c("fetch.max.bytes", "int", 52428800, AtLeast(0), roles=_C,
       doc="Largest response to one fetch, in bytes."),
    _c("fetch.max.wait.ms", "int", 500, AtLeast(0), roles=_C,
       doc="Longest time the broker holds a fetch waiting for fetch.min.bytes."),
    _c("max.partition.fetch.bytes", "int", 1048576, AtLeast(0), roles=_C,
       doc="Largest data per partition in one fetch, in bytes."),
    _c("max.poll.records", "int", 500, AtLeast(1), roles=_C,
       doc="Most records returned by one poll()."),
    _c("max.poll.interval.ms", "int", 300000, AtLeast(1), roles=_C,
       doc="Longest gap between poll() calls before the member leaves the group, in ms."),
    _c("session.timeout.ms", "int", 45000, roles=_C,
       doc="Time without heartbeats after which the member is removed, in ms."),
    _c("heartbeat.interval.ms", "int", 3000, roles=_C,
       doc="Period of group heartbeats; must be lower than session.timeout.ms."),
    _c("client.rack", "string", "", roles=_C,
       doc="Rack of the consumer, for fetching from the closest replica."),
    _c("check.crcs", "boolean", True, roles=_C,
       doc="Verify the CRC of fetched batches."),
    _c("allow.auto.create.topics", "boolean", True, roles=_C,
       doc="Let subscribing to a missing topic create it (when the broker allows)."),
    _c("exclude.internal.topics", "boolean", True, roles=_C,
       doc="Keep internal topics out of pattern subscriptions."),
    _c("key.deserializer", "class", None, roles=_C,
       doc="Deserializer of record keys (accepted for Kafka compatibility)."),
    _c("value.deserializer", "class", None, roles=_C,
       doc="Deserializer of record values (accepted for Kafka compatibility)."),
)


# Settings Kafka users carry over that tierlog accepts (so a Kafka properties file or topic
# configuration works unchanged) but that do nothing yet; the generated docs say so next to each.
_NO_FOLLOWERS = ("follower tasks read the uploaded offsets from the metadata manager's memory on the event loop; "
                 "no thread pool runs them.")
_KERNEL_BUFFERS = "the kernel sizes socket buffers, as with -1."
_NO_PREALLOCATION = "segment files grow as they are written."
_RETRY_EACH_INTERVAL = "a failed remote task runs again after remote.log.manager.task.interval.ms."
_INERT: Mapping[tuple[str, str], str] = {
    ("broker", "socket.send.buffer.bytes"): _KERNEL_BUFFERS,
    ("broker", "socket.receive.buffer.bytes"): _KERNEL_BUFFERS,
    ("broker", "num.recovery.threads.per.data.dir"): "logs are recovered one after another.",
    ("broker", "log.flush.start.offset.checkpoint.interval.ms"):
        "log start offsets are checkpointed with the recovery points (log.flush.offset.checkpoint.interval.ms).",
    ("broker", "producer.id.expiration.check.interval.ms"):
        "idle producer ids are expired on the retention check (log.retention.check.interval.ms).",
    ("broker", "log.preallocate"): _NO_PREALLOCATION,
    ("topic", "preallocate"): _NO_PREALLOCATION,
    ("broker", "remote.log.manager.thread.pool.size"): _NO_FOLLOWERS,
    ("broker", "remote.log.manager.follower.thread.pool.size"): _NO_FOLLOWERS,
    ("broker", "remote.log.manager.task.retry.backoff.ms"): _RETRY_EACH_INTERVAL,
    ("broker", "remote.log.manager.task.retry.backoff.max.ms"): _RETRY_EACH_INTERVAL,
    ("broker", "remote.log.manager.task.retry.jitter"): _RETRY_EACH_INTERVAL,
    ("broker", "log.initial.task.delay.ms"): "retention and flush tasks start with the broker.",
    ("client", "client.dns.lookup"): "the client always tries every address a name resolves to (use_all_dns_ips).",
    ("client", "socket.connection.setup.timeout.max.ms"):
        "every attempt gets socket.connection.setup.timeout.ms.",
    ("client", "connections.max.idle.ms"): "the client keeps idle connections open.",
}


def _mark_inert(defs: tuple[ConfigDef, ...]) -> tuple[ConfigDef, ...]:
    return tuple(replace(d, inert=_INERT[d.scope, d.name]) if (d.scope, d.name) in _INERT else d for d in defs)


_BROKER, _TOPIC, _CLIENT = _mark_inert(_BROKER), _mark_inert(_TOPIC), _mark_inert(_CLIENT)
_unknown_inert = set(_INERT) - {(d.scope, d.name) for d in _BROKER + _TOPIC + _CLIENT}
assert not _unknown_inert, _unknown_inert


def _index(defs: tuple[ConfigDef, ...]) -> Mapping[str, ConfigDef]:
    out: dict[str, ConfigDef] = {}
    for d in defs:
        if d.name in out:
            raise AssertionError(f"duplicate {d.scope} config {d.name}")
        if d.type not in CONFIG_TYPES:
            raise AssertionError(f"bad type {d.type} for {d.name}")
        out[d.name] = d
    return MappingProxyType(out)


#: Broker settings by name (plugin settings under their default ``rsm.config.`` / ``rlmm.config.`` name).
BROKER_CONFIGS: Mapping[str, ConfigDef] = _index(_BROKER)
#: Topic settings by name.
TOPIC_CONFIGS: Mapping[str, ConfigDef] = _index(_TOPIC)
#: Client settings by name (see :attr:`ConfigDef.roles`).
CLIENT_CONFIGS: Mapping[str, ConfigDef] = _index(_CLIENT)
#: Every definition, broker first, then topic, then client.
ALL_CONFIGS: tuple[ConfigDef, ...] = _BROKER + _TOPIC + _CLIENT

#: Prefix families passed through to plugins without a definition of their own.
PREFIX_FAMILIES: tuple[tuple[str, str], ...] = (
    (LISTENER_PREFIX, "listener.name.<listener name>.ssl.* overrides an ssl.* setting for one listener "
                      "(the name in lowercase, e.g. listener.name.internal.ssl.keystore.location)."),
    (RSM_PREFIX, "Everything under the remote storage prefix goes to the storage plugin, prefix stripped "
                 "(for objectstore: obstore options such as rsm.config.aws_region)."),
    (RLMM_PREFIX, "Everything under the metadata manager prefix goes to the metadata manager, prefix "
                  "stripped."),
    (RLMM_PREFIX + "remote.log.metadata.common.client.",
     "Settings of all clients of the topic-based metadata manager."),
    (RLMM_PREFIX + "remote.log.metadata.producer.", "Settings of its producer (override common ones)."),
    (RLMM_PREFIX + "remote.log.metadata.consumer.", "Settings of its consumer (override common ones)."),
    (RLMM_PREFIX + "remote.log.metadata.admin.", "Settings of its admin client (Kafka 4.3)."),
)


# ---------------------------------------------------------------------------------------------------
# Deliberate differences from Kafka
# ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """One place where tierlog deliberately does not do what Kafka 4.x does."""

    settings: tuple[str, ...]
    kafka: str
    tierlog: str
    reason: str


DELIBERATE_DIFFERENCES: tuple[Difference, ...] = (
    Difference(
        ("segment.bytes", "log.segment.bytes", "internal.segment.bytes"),
        "Minimum 1048576 (1 MiB) since Kafka 4.0 (KIP-1030); tests use the internal internal.segment.bytes.",
        f"Minimum {MIN_SEGMENT_BYTES} (Kafka 3.x's minimum); internal.segment.bytes is accepted as well.",
        "Tests, demos and the tiering pipeline need segments that roll after a few records so the copy and "
        "retention tasks have closed segments to work on without writing megabytes per segment."),
    Difference(
        ("node.id",),
        "No default: every KRaft node must set it.",
        "Default 1.",
        "`tierlog broker` starts a single-node broker without any configuration file."),
    Difference(
        ("process.roles",),
        "No default; broker, controller or both.",
        "Default broker,controller; the value must contain broker.",
        "tierlog always runs the broker and embeds its controller; a controller-only process does not "
        "exist."),
    Difference(
        ("listeners",),
        "Default PLAINTEXT://:9092 (every interface).",
        "Default PLAINTEXT://127.0.0.1:9092 (loopback only).",
        "A development broker without authentication should not be reachable from the network by default."),
    Difference(
        ("log.dir",),
        "Default /tmp/kafka-logs.",
        "Default /tmp/tierlog-logs.",
        "Avoids sharing a data directory with a Kafka broker on the same machine."),
    Difference(
        ("inter.broker.listener.name",),
        "When unset, a listener named after security.inter.broker.protocol (PLAINTEXT) must exist.",
        "When unset, the PLAINTEXT listener if there is one, else the first listener.",
        "A single-node broker has no inter-broker traffic; only the metadata manager's clients use it."),
    Difference(
        ("remote.log.storage.manager.class.name", "remote.log.storage.manager.class.path",
         "remote.log.metadata.manager.class.name", "remote.log.metadata.manager.class.path"),
        "Java class names (the storage manager has no default) and Java class paths.",
        "Short names filesystem / objectstore (default filesystem) and topic (default; Kafka's "
        "TopicBasedRemoteLogMetadataManager class name is accepted as an alias), or a Python import path; "
        "class paths are Python import paths.",
        "Plugins are Python classes; the embedded filesystem store makes tiering work out of the box."),
    Difference(
        ("offsets.topic.replication.factor", "rlmm.config.remote.log.metadata.topic.replication.factor"),
        "An internal topic is created only once as many brokers as the setting asks for are alive; with the "
        "default of 3 a single broker never creates it (no consumer group works, nothing is tiered).",
        "On a single node (one broker can host replicas) the topic is created with replication factor 1 and "
        "one warning naming the setting; its min.insync.replicas is capped at 1 too. With more brokers, "
        "Kafka's rule.",
        "Nothing but 1 is possible on one node, so Kafka's defaults would only make the broker fail in a way "
        "that is hard to read."),
    Difference(
        ("remote.log.metadata.manager.listener.name",),
        "Unset means the metadata manager needs "
        "rlmm.config.remote.log.metadata.common.client.bootstrap.servers.",
        "Unset means the inter-broker listener.",
        "The topic-based metadata manager of a single-node broker always talks to its own broker."),
    Difference(
        ("remote.storage.enable", "remote.log.delete.on.disable", "remote.log.disable.policy"),
        "Turning remote.storage.enable from true to false is refused unless remote.log.delete.on.disable="
        "true; remote.log.disable.policy does not exist (it was in the KIP-950 draft only).",
        "Turning it off is accepted; remote.log.disable.policy (retain, the default, or delete) decides what "
        "happens to remote data, and remote.log.delete.on.disable=true means delete.",
        "The KIP-950 draft is the specification; Kafka's shipped names are accepted too."),
    Difference(
        ("remote.log.disable.policy",),
        "KIP-950 draft: an invalid policy value is answered with INVALID_REQUEST (42).",
        "Answered with INVALID_CONFIG (40), like every other invalid setting.",
        "Clients handle both as non-retriable; one error code for all configuration mistakes is simpler."),
    Difference(
        ("max.connections",),
        "A new connection beyond the broker-wide limit waits in the accept queue until a connection closes "
        "(the acceptor blocks); connections on the inter-broker listener may exceed it.",
        "A new connection beyond the limit is closed at once, as one beyond max.connections.per.ip; no "
        "listener is exempt.",
        "One rule for every limit; a single-node broker has no inter-broker connections to protect."),
    Difference(
        ("(configuration files)",),
        "server.properties is read as ISO-8859-1.",
        "Read as UTF-8, falling back to ISO-8859-1 when the file is not valid UTF-8; \\uXXXX escapes work "
        "in both.",
        "UTF-8 is what editors write today; pure-ASCII files read the same either way."),
    Difference(
        ("(DescribeConfigs of topics)",),
        "A broker drops the synonym list of a topic setting whose only broker key set is a lower-precedence "
        "one (log.retention.hours, log.roll.hours) and reports it as DEFAULT_CONFIG.",
        "Reports STATIC_BROKER_CONFIG with the whole chain (topic override, broker keys set, default), as "
        "Kafka's controller does in CreateTopics responses.",
        "Operators should see where a topic's value comes from."),
)


__all__ = [
    "ALL_CONFIGS", "BROKER_CONFIGS", "CLIENT_CONFIGS", "CLIENT_ROLES", "CONFIG_TYPES",
    "DELIBERATE_DIFFERENCES",
    "INT_MAX", "KAFKA_TBRLMM_CLASS", "LISTENER_PREFIX", "LONG_MAX", "MIN_SEGMENT_BYTES", "PREFIX_FAMILIES",
    "RLMM_PREFIX",
    "RSM_PREFIX", "SCOPES", "TOPIC_CONFIGS", "AtLeast", "Between", "ClientRole", "ConfigDef", "ConfigType",
    "Custom", "Difference", "InSet", "ListIn", "NonEmpty", "Scope", "Synonym", "Validator",
]
