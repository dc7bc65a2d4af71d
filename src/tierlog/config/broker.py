"""Broker configuration: load, validate, look up, derive topic configurations and describe them.

``BrokerConfig.load(path, overrides)`` reads a ``server.properties`` file, puts the ``-o key=value``
overrides on top, parses every value by its type, checks it against its allowed range and runs the
cross-setting checks Kafka runs at start-up (listeners, log directories, retention, tiered storage).
Anything invalid raises :class:`~tierlog.errors.InvalidConfigError` whose message names the key, the
value and what is allowed. Keys tierlog does not know are logged and kept; keys under the plugin
prefixes (``rsm.config.``, ``rlmm.config.``) are kept silently and handed to the plugins.

Topic configurations are derived from the broker's defaults through Kafka's synonym chains
(``retention.ms`` <- ``log.retention.ms`` <- ``log.retention.minutes`` <- ``log.retention.hours``) and
validated the way CreateTopics / AlterConfigs validate them. The describe helpers produce what Kafka's
DescribeConfigs returns: value, source and synonyms.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import Any

from tierlog.config.definitions import (
    BROKER_CONFIGS,
    LISTENER_PREFIX,
    RLMM_PREFIX,
    RSM_PREFIX,
    TOPIC_CONFIGS,
    ConfigDef,
)
from tierlog.config.properties import PropertiesSyntaxError, load_properties
from tierlog.config.values import HIDDEN, check_value, format_value, invalid, looks_sensitive, parse_typed
from tierlog.errors import InvalidConfigError, InvalidRequestError

log = logging.getLogger("tierlog.config")

_EMPTY: Mapping[str, str] = MappingProxyType({})


class ConfigSource(IntEnum):
    """Where a described value comes from; names are Kafka's ``ConfigEntry.ConfigSource`` names and the
    numbers are the DescribeConfigs wire ids."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    DYNAMIC_CLIENT_METRICS_CONFIG = 7
    DYNAMIC_GROUP_CONFIG = 8


#: DescribeConfigs wire ids of the config types (0 = unknown).
CONFIG_TYPE_IDS: Mapping[str, int] = MappingProxyType(
    {
        "unknown": 0,
        "boolean": 1,
        "string": 2,
        "int": 3,
        "short": 4,
        "long": 5,
        "double": 6,
        "list": 7,
        "class": 8,
        "password": 9,
    }
)


@dataclass(frozen=True)
class ConfigSynonym:
    """One link of a synonym chain as DescribeConfigs reports it (value None when sensitive or null)."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """One described setting: Kafka's DescribeConfigs result for a key."""

    name: str
    value: str | None
    source: ConfigSource
    sensitive: bool
    read_only: bool
    type: str
    synonyms: tuple[ConfigSynonym, ...]
    documentation: str | None

    @property
    def type_id(self) -> int:
        return CONFIG_TYPE_IDS.get(self.type, 0)


@dataclass(frozen=True)
class Listener:
    """One parsed ``NAME://host:port`` endpoint; an empty host means every interface."""

    name: str
    host: str
    port: int
    security_protocol: str

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


_LISTENER_RE = re.compile(r"^([A-Za-z0-9_-]+)://(?:\[([^\]]*)\]|([^:\[\]/,\s]*)):(\d+)$")


#: The security protocols a listener can be served with.
SERVED_PROTOCOLS = frozenset({"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"})

#: The ssl.* settings a TLS listener reads (each may be overridden per listener).
SSL_SETTING_NAMES: tuple[str, ...] = tuple(n for n in BROKER_CONFIGS if n.startswith("ssl."))

#: The SASL settings a listener may override (``listener.name.<name>.<setting>``); sasl.jaas.config is also
#: given per mechanism, ``listener.name.<name>.<mechanism>.sasl.jaas.config`` as in Kafka.
SASL_SETTING_NAMES: tuple[str, ...] = tuple(n for n in BROKER_CONFIGS if n.startswith("sasl.")
                                            or n == "connections.max.reauth.ms")


def listener_override_setting(key: str) -> str | None:
    """The setting a ``listener.name.<name>.<setting>`` key overrides, or None for any other key (only the
    ssl.* and sasl.* settings have per-listener values in tierlog)."""
    if not key.startswith(LISTENER_PREFIX):
        return None
    _name, sep, setting = key[len(LISTENER_PREFIX):].partition(".")
    if sep and setting.endswith(".sasl.jaas.config"):  # <mechanism>.sasl.jaas.config
        return "sasl.jaas.config"
    return setting if sep and (setting in SSL_SETTING_NAMES or setting in SASL_SETTING_NAMES) else None


def _parse_protocol_map(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        if item.strip():
            name, _, proto = item.strip().partition(":")
            out[name.strip().upper()] = proto.strip().upper()
    return out


def parse_listeners(
    text: str | None, protocol_map: Mapping[str, str], key: str = "listeners"
) -> list[Listener]:
    """Parse a listeners value; every listener name must be in ``protocol_map``."""
    out: list[Listener] = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        m = _LISTENER_RE.match(item)
        if not m:
            raise invalid(key, text, f"Each listener must look like NAME://host:port, got '{item}'")
        name = m.group(1).upper()
        if name not in protocol_map:
            raise invalid(
                key,
                text,
                f"Listener name {name} is not in listener.security.protocol.map ({', '.join(protocol_map)})",
            )
        out.append(
            Listener(
                name,
                m.group(2) if m.group(2) is not None else m.group(3),
                int(m.group(4)),
                protocol_map[name],
            )
        )
    return out


# Kafka's DynamicBrokerConfig.brokerConfigSynonyms: the broker keys reported as synonyms of each other.
_BROKER_SYNONYM_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def _broker_synonym_names(name: str) -> tuple[str, ...]:
    if name == "log.flush.interval.ms":
        return ("log.flush.interval.ms", "log.flush.scheduler.interval.ms")
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return group
    return (name,)


# Broker keys whose lookup returns the effective value through Kafka's precedence chain, and the topic
# setting whose synonym chain defines it.
_EFFECTIVE_VIA_TOPIC = {
    "log.retention.ms": "retention.ms",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.flush.interval.ms": "flush.ms",
}

#: Topics on which remote storage never takes effect (Kafka: internal topics and the metadata logs).
INTERNAL_TOPICS = frozenset(
    {
        "__consumer_offsets",
        "__transaction_state",
        "__share_group_state",
        "__remote_log_metadata",
        "__cluster_metadata",
    }
)


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else value


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else (format_value(value) or "")


# ---------------------------------------------------------------------------------------------------
# Topic configuration
# ---------------------------------------------------------------------------------------------------


class TopicConfig(Mapping[str, Any]):
    """The typed configuration of one topic: its overrides on top of the broker's defaults.

    ``tc["retention.ms"]`` is the configured value (``local.retention.ms`` may be -2); the properties
    resolve Kafka's derived values (``tc.local_retention_ms`` replaces -2 by ``retention.ms``)."""

    def __init__(
        self, values: Mapping[str, Any], overrides: frozenset[str], remote_storage_system_enabled: bool
    ):
        self._values = dict(values)
        self.overrides = overrides
        self.remote_storage_system_enabled = remote_storage_system_enabled

    def __getitem__(self, key: str) -> Any:
        return _copy(self._values[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        shown = {k: format_value(self._values[k]) for k in sorted(self.overrides)}
        return f"TopicConfig(overrides={shown})"

    @property
    def local_retention_ms(self) -> int:
        """``local.retention.ms`` with -2 replaced by ``retention.ms``."""
        v = self._values["local.retention.ms"]
        return self._values["retention.ms"] if v == -2 else v

    @property
    def local_retention_bytes(self) -> int:
        """``local.retention.bytes`` with -2 replaced by ``retention.bytes``."""
        v = self._values["local.retention.bytes"]
        return self._values["retention.bytes"] if v == -2 else v

    @property
    def segment_bytes(self) -> int:
        """The roll size: ``internal.segment.bytes`` when set, else ``segment.bytes``."""
        internal = self._values.get("internal.segment.bytes")
        return internal if internal is not None else self._values["segment.bytes"]

    @property
    def compact(self) -> bool:
        return "compact" in self._values["cleanup.policy"]

    @property
    def delete(self) -> bool:
        return "delete" in self._values["cleanup.policy"]

    @property
    def remote_log_disable_policy(self) -> str:
        """What turning remote storage off does: ``retain`` or ``delete`` (the KIP-950 draft's policy,
        or ``delete`` when only Kafka's ``remote.log.delete.on.disable=true`` is set)."""
        if "remote.log.disable.policy" in self.overrides:
            return self._values["remote.log.disable.policy"]
        return "delete" if self._values["remote.log.delete.on.disable"] else "retain"

    def remote_log_enabled(self, topic: str) -> bool:
        """Whether tiering takes effect for ``topic`` (Kafka's ``UnifiedLog.isRemoteLogEnabled``): the broker
        switch and the topic switch are on and the topic is not an internal topic. Unlike Kafka, compacted
        topics are tiered too (docs/tiered-storage.md, "Compacted topics")."""
        return (
            self.remote_storage_system_enabled
            and bool(self._values["remote.storage.enable"])
            and topic not in INTERNAL_TOPICS
        )

    def to_properties(self) -> dict[str, str | None]:
        """Every setting in Kafka's text form."""
        return {k: format_value(v) for k, v in self._values.items()}


# ---------------------------------------------------------------------------------------------------
# Broker configuration
# ---------------------------------------------------------------------------------------------------


class BrokerConfig(Mapping[str, Any]):
    """A validated broker configuration.

    ``cfg[key]`` is the typed value of a broker setting (configured or default). For the keys with a
    precedence chain it is the effective value: ``log.retention.ms`` (ms > minutes > hours, negative
    means -1), ``log.roll.ms`` (ms > hours), ``log.roll.jitter.ms``, ``log.flush.interval.ms`` (falls
    back to ``log.flush.scheduler.interval.ms``) and ``log.dirs`` (``log.dirs`` > ``log.dir``). Keys
    without a definition that were set (plugin settings, unknown keys) return their text.
    """

    def __init__(self, props: Mapping[str, Any] = _EMPTY):
        self._originals: dict[str, Any] = {str(k): v for k, v in props.items()}
        self._values: dict[str, Any] = {}
        self._set: set[str] = set()
        self._actual: dict[str, str] = {}  # canonical name -> key used in the file
        self._parse()
        self._known_keys = set(self._actual.values())
        self.unknown_keys: frozenset[str] = frozenset(
            k for k in self._originals if k not in self._known_keys and not self._is_plugin_key(k)
        )
        self._check()
        for key in sorted(self.unknown_keys):
            log.warning("Unknown configuration '%s': kept, but tierlog does not use it", key)

    # --- construction ------------------------------------------------------------------------------

    @classmethod
    def load(
        cls, path: str | os.PathLike[str] | None = None, overrides: Mapping[str, str] = _EMPTY
    ) -> BrokerConfig:
        """Read ``path`` (a ``.properties`` file; None for none), apply ``overrides`` on top, validate.

        Raises InvalidConfigError for invalid settings or a malformed file; OSError if the file cannot
        be read."""
        props: dict[str, Any] = {}
        if path is not None:
            try:
                props.update(load_properties(path))
            except PropertiesSyntaxError as e:
                raise InvalidConfigError(f"Cannot parse configuration file {e}") from None
        props.update(overrides)
        return cls(props)

    def _is_plugin_key(self, key: str) -> bool:
        return key.startswith((self.rsm_prefix, self.rlmm_prefix)) or listener_override_setting(key) is not None

    def _plugin_active(self, defn: ConfigDef) -> bool:
        impls = defn.plugin_impl if isinstance(defn.plugin_impl, tuple) else (defn.plugin_impl,)
        if defn.plugin == "rsm":
            return self._values["remote.log.storage.manager.class.name"] in impls
        return self._values["remote.log.metadata.manager.class.name"] in impls

    def _parse_one(self, defn: ConfigDef, key: str) -> None:
        self._actual[defn.name] = key
        if key in self._originals:
            self._set.add(defn.name)
            self._values[defn.name] = check_value(defn, parse_typed(defn, self._originals[key], key), key)
        else:
            self._values[defn.name] = _copy(defn.default)

    def _parse(self) -> None:
        plugin_defs = []
        for defn in BROKER_CONFIGS.values():
            if defn.plugin:
                plugin_defs.append(defn)
            else:
                self._parse_one(defn, defn.name)
        self.rsm_prefix: str = self._values["remote.log.storage.manager.impl.prefix"] or RSM_PREFIX
        self.rlmm_prefix: str = self._values["remote.log.metadata.manager.impl.prefix"] or RLMM_PREFIX
        for defn in plugin_defs:
            default_prefix = RSM_PREFIX if defn.plugin == "rsm" else RLMM_PREFIX
            actual_prefix = self.rsm_prefix if defn.plugin == "rsm" else self.rlmm_prefix
            key = actual_prefix + defn.name[len(default_prefix) :]
            if self._plugin_active(defn):
                self._parse_one(defn, key)
            else:  # read only by a plugin that is not in use: keep as given
                self._actual[defn.name] = key
                if key in self._originals:
                    self._set.add(defn.name)
                    self._values[defn.name] = self._originals[key]
                else:
                    self._values[defn.name] = _copy(defn.default)

    # --- cross-setting checks (Kafka's KafkaConfig / LogConfig / RemoteLogManagerConfig rules) ----------

    def _key(self, name: str) -> str:
        return self._actual.get(name, name)

    def _check_consumer_groups(self) -> None:
        """Kafka's GroupCoordinatorConfig rules for KIP-848 consumer groups."""
        v = self._values
        if "classic" not in v["group.coordinator.rebalance.protocols"]:
            raise invalid("group.coordinator.rebalance.protocols", ",".join(v["group.coordinator.rebalance.protocols"]),
                          "Must contain classic")
        for what in ("heartbeat.interval", "session.timeout", "assignment.interval"):
            value = v[f"group.consumer.{what}.ms"]
            low, high = v[f"group.consumer.min.{what}.ms"], v[f"group.consumer.max.{what}.ms"]
            if not low <= value <= high:
                raise invalid(f"group.consumer.{what}.ms", value,
                              f"Must be between group.consumer.min.{what}.ms ({low}) and "
                              f"group.consumer.max.{what}.ms ({high})")
        if v["group.consumer.heartbeat.interval.ms"] >= v["group.consumer.session.timeout.ms"]:
            raise invalid("group.consumer.heartbeat.interval.ms", v["group.consumer.heartbeat.interval.ms"],
                          "Must be less than group.consumer.session.timeout.ms "
                          f"({v['group.consumer.session.timeout.ms']})")

    def _check(self) -> None:
        v = self._values
        if v["broker.id"] != -1 and "node.id" not in self._set:
            v["node.id"] = v["broker.id"]  # ZooKeeper-mode files name the broker with broker.id alone
        if v["broker.id"] != -1 and v["broker.id"] != v["node.id"]:
            raise invalid("broker.id", v["broker.id"], f"Must equal node.id ({v['node.id']}) when set")
        self._check_listeners()
        if v["max.connections.per.ip"] == 0 and not (v["max.connections.per.ip.overrides"] or "").strip():
            raise invalid("max.connections.per.ip", 0,
                          "Must be at least 1 unless max.connections.per.ip.overrides is set")
        queued = v["queued.max.request.bytes"]
        if 0 < queued < v["socket.request.max.bytes"]:
            raise invalid("queued.max.request.bytes", queued, "Must be -1 (unbounded) or at least "
                          f"socket.request.max.bytes ({v['socket.request.max.bytes']})")
        token = v["metrics.admin.token"]
        if v["metrics.admin.enable"] and not (token.value if token is not None else ""):
            raise invalid("metrics.admin.enable", True,
                          "Needs metrics.admin.token (the bearer token admin requests must carry)")
        if not self.log_dirs:
            raise invalid("log.dirs", "", "At least one log directory must be given in log.dirs or log.dir")
        _check_cordoned_log_dirs(v["cordoned.log.dirs"], self.log_dirs)
        roll_ms, roll_key = self._chain_value(TOPIC_CONFIGS["segment.ms"])
        if roll_ms < 1:
            raise invalid(roll_key, self._shown(roll_key), "Value must be at least 1 ms")
        jitter, jitter_key = self._chain_value(TOPIC_CONFIGS["segment.jitter.ms"])
        if jitter < 0:
            raise invalid(jitter_key, self._shown(jitter_key), "Value must be at least 0")
        retention, retention_key = self._chain_value(TOPIC_CONFIGS["retention.ms"])
        if retention == 0:
            raise invalid(
                retention_key, self._shown(retention_key), "Retention must be -1 (unlimited) or at least 1 ms"
            )
        # every topic default derived from a broker key must be a valid topic value
        for tdef in TOPIC_CONFIGS.values():
            if tdef.synonyms and tdef.validator is not None:
                value, key = self._chain_value(tdef)
                reason = tdef.validator.check(value)
                if reason is not None and key is not None:
                    raise invalid(key, self._shown(key), reason)
        self._check_consumer_groups()
        if v["log.cleaner.min.compaction.lag.ms"] > v["log.cleaner.max.compaction.lag.ms"]:
            raise invalid(
                "log.cleaner.min.compaction.lag.ms",
                v["log.cleaner.min.compaction.lag.ms"],
                "Must not exceed log.cleaner.max.compaction.lag.ms "
                f"({v['log.cleaner.max.compaction.lag.ms']})",
            )
        if v["remote.log.storage.system.enable"]:
            defaults = self._topic_defaults()
            _check_local_retention(
                defaults,
                names={
                    "retention.ms": "log.retention.ms",
                    "retention.bytes": "log.retention.bytes",
                    "local.retention.ms": "log.local.retention.ms",
                    "local.retention.bytes": "log.local.retention.bytes",
                },
            )
            rsm = v["remote.log.storage.manager.class.name"]
            if rsm == "filesystem" and not v["rsm.config.dir"]:
                raise invalid(
                    self._key("rsm.config.dir"),
                    None,
                    "Required when remote.log.storage.system.enable=true and "
                    "remote.log.storage.manager.class.name=filesystem",
                )
            if rsm == "objectstore" and not v["rsm.config.url"]:
                raise invalid(
                    self._key("rsm.config.url"),
                    None,
                    "Required when remote.log.storage.system.enable=true and "
                    "remote.log.storage.manager.class.name=objectstore",
                )

    def _shown(self, key: str) -> Any:
        return self._originals.get(key, self._values.get(key))

    def _check_listeners(self) -> None:
        v = self._values
        protocol_map = _parse_protocol_map(v["listener.security.protocol.map"])
        listeners = parse_listeners(v["listeners"], protocol_map, "listeners")
        if not listeners:
            raise invalid("listeners", v["listeners"], "At least one listener is required")
        unserved = [f"{lst.name} ({lst.security_protocol})" for lst in listeners
                    if lst.security_protocol not in SERVED_PROTOCOLS]
        if unserved:
            raise invalid("listeners", v["listeners"], f"Listeners {', '.join(unserved)}: unknown security protocol")
        names = [lst.name for lst in listeners]
        if v["advertised.listeners"]:
            advertised = parse_listeners(v["advertised.listeners"], protocol_map, "advertised.listeners")
            unknown = [a.name for a in advertised if a.name not in names]
            if unknown:
                raise invalid(
                    "advertised.listeners",
                    v["advertised.listeners"],
                    f"Listener names {', '.join(unknown)} are not defined in listeners",
                )
        else:
            advertised = listeners
        if any(a.host == "0.0.0.0" for a in advertised):
            key = "advertised.listeners" if v["advertised.listeners"] else "listeners"
            raise invalid(
                key,
                v[key],
                "Cannot advertise the non-routable address 0.0.0.0; set "
                "advertised.listeners to a routable address",
            )
        self._listeners = listeners
        self._advertised = advertised
        ib = v["inter.broker.listener.name"]
        if ib is not None and self.configured("security.inter.broker.protocol"):
            raise invalid("security.inter.broker.protocol", v["security.inter.broker.protocol"],
                          "Only one of inter.broker.listener.name and security.inter.broker.protocol may be set")
        if ib is None and self.configured("security.inter.broker.protocol"):
            wanted = v["security.inter.broker.protocol"].upper()
            if wanted not in [a.name for a in advertised]:
                raise invalid("security.inter.broker.protocol", wanted,
                              f"No advertised listener is named {wanted} (the inter-broker listener when "
                              "inter.broker.listener.name is unset)")
        self._check_listener_overrides()
        adv_names = [a.name for a in advertised]
        if ib is not None and ib.upper() not in adv_names:
            raise invalid(
                "inter.broker.listener.name",
                ib,
                f"Must be one of the advertised listener names ({', '.join(adv_names)})",
            )
        rl = v["remote.log.metadata.manager.listener.name"]
        if rl is not None and rl.upper() not in names:
            raise invalid(
                "remote.log.metadata.manager.listener.name",
                rl,
                f"Must be one of the listener names ({', '.join(names)})",
            )

    def _check_listener_overrides(self) -> None:
        """``listener.name.<name>.<setting>`` values are checked as the setting itself is."""
        for key, value in self._originals.items():
            setting = listener_override_setting(key)
            if setting is not None:
                defn = BROKER_CONFIGS[setting]
                check_value(defn, parse_typed(defn, value, key), key)

    def listener_setting(self, listener: str, name: str) -> Any:
        """Setting ``name`` as listener ``listener`` sees it: ``listener.name.<listener>.<name>`` when set
        (the listener name in any case), else the broker-wide value, as Kafka's listener prefix works."""
        prefix = f"{LISTENER_PREFIX}{listener.lower()}."
        for key, value in self._originals.items():
            if key.lower().startswith(prefix) and key[len(prefix):] == name:
                defn = BROKER_CONFIGS[name]
                return check_value(defn, parse_typed(defn, value, key), key)
        return self[name]

    def listener_ssl_settings(self, listener: str) -> dict[str, Any]:
        """Every ssl.* setting of ``listener`` (its overrides on top of the broker-wide values)."""
        return {name: self.listener_setting(listener, name) for name in SSL_SETTING_NAMES}

    # --- lookups -----------------------------------------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        if key in _EFFECTIVE_VIA_TOPIC:
            return self._chain_value(TOPIC_CONFIGS[_EFFECTIVE_VIA_TOPIC[key]])[0]
        if key == "log.dirs":
            return self.log_dirs
        if key in self._values:
            return _copy(self._values[key])
        for name, actual in self._actual.items():
            if actual == key:
                return _copy(self._values[name])
        if key in self._originals:
            return self._originals[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        yield from self._values
        for key in self._originals:
            if key not in self._values and key not in self._known_keys:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and (key in self._values or key in self._originals)

    def configured(self, key: str) -> bool:
        """Whether ``key`` was set in the file or the overrides (rather than left to its default)."""
        return key in self._set or key in self._originals

    @property
    def originals(self) -> dict[str, Any]:
        """The settings as given (file plus overrides), before parsing."""
        return dict(self._originals)

    def with_prefix(self, prefix: str) -> dict[str, str]:
        """The given settings whose key starts with ``prefix``, prefix stripped, as text."""
        return {k[len(prefix) :]: _as_text(v) for k, v in self._originals.items() if k.startswith(prefix)}

    def rsm_config(self) -> dict[str, str]:
        """Settings for the remote storage plugin (under ``remote.log.storage.manager.impl.prefix``)."""
        return self.with_prefix(self.rsm_prefix)

    def rlmm_config(self) -> dict[str, str]:
        """Settings for the metadata manager (under ``remote.log.metadata.manager.impl.prefix``)."""
        return self.with_prefix(self.rlmm_prefix)

    @property
    def log_dirs(self) -> list[str]:
        """``log.dirs`` if set, else ``log.dir``."""
        dirs = self._values["log.dirs"]
        return list(dirs if dirs is not None else self._values["log.dir"])

    @property
    def listeners(self) -> list[Listener]:
        return list(self._listeners)

    @property
    def advertised_listeners(self) -> list[Listener]:
        """``advertised.listeners``, or ``listeners`` when unset."""
        return list(self._advertised)

    @property
    def zookeeper_mode(self) -> bool:
        """A broker of a multi-broker cluster whose metadata lives in ZooKeeper (``zookeeper.connect``)."""
        return bool(self._values["zookeeper.connect"])

    @property
    def inter_broker_listener(self) -> Listener:
        """The advertised listener named by ``inter.broker.listener.name``; when unset, the one named after
        ``security.inter.broker.protocol`` (PLAINTEXT by default) if any, else the first."""
        name = self._values["inter.broker.listener.name"] or self._values["security.inter.broker.protocol"]
        wanted = name.upper() if name else "PLAINTEXT"
        for lst in self._advertised:
            if lst.name == wanted:
                return lst
        return self._advertised[0]

    @property
    def remote_log_metadata_listener(self) -> Listener:
        """The listener the metadata manager's clients use: ``remote.log.metadata.manager.listener.name``
        or the inter-broker listener."""
        name = self._values["remote.log.metadata.manager.listener.name"]
        if name:
            for lst in self._listeners:
                if lst.name == name.upper():
                    return lst
        return self.inter_broker_listener

    def __repr__(self) -> str:
        shown = {}
        for key, value in self._originals.items():
            defn = BROKER_CONFIGS.get(key)
            sensitive = defn.sensitive if defn else looks_sensitive(key)
            shown[key] = HIDDEN if sensitive else _as_text(value)
        return f"BrokerConfig({shown})"

    # --- topic configurations --------------------------------------------------------------------------

    def _chain_value(self, tdef: ConfigDef) -> tuple[Any, str | None]:
        """The broker's default for topic setting ``tdef`` and the broker key it came from."""
        for syn in tdef.synonyms:
            value = self._values.get(syn.name)
            if value is not None:
                value = _copy(value)
                if syn.factor != 1:
                    value = value * syn.factor
                if tdef.name == "retention.ms" and value < 0:
                    value = -1
                return value, syn.name
        return _copy(tdef.default), None

    def _topic_defaults(self) -> dict[str, Any]:
        return {name: self._chain_value(tdef)[0] for name, tdef in TOPIC_CONFIGS.items()}

    def validate_topic_overrides(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """Validate a topic's overrides as CreateTopics / AlterConfigs do and return them typed.

        Unknown keys, unparsable or out-of-range values and the cross-setting rules of tiered storage
        (Kafka's LogConfig checks, plus the KIP-950 draft's disable policy) raise InvalidConfigError."""
        return self._validate_topic(overrides, from_store=False)[0]

    def topic_config(self, overrides: Mapping[str, Any] | None = None) -> TopicConfig:
        """The typed configuration of a topic with these overrides (None: broker defaults only)."""
        typed, merged = self._validate_topic(overrides or {}, from_store=True)
        return TopicConfig(merged, frozenset(typed), bool(self._values["remote.log.storage.system.enable"]))

    def _validate_topic(
        self, overrides: Mapping[str, Any], from_store: bool
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        typed: dict[str, Any] = {}
        for key, value in overrides.items():
            defn = TOPIC_CONFIGS.get(key)
            if defn is None:
                err = InvalidConfigError(f"Unknown topic config name: {key}")
                err.config_name = key  # type: ignore[attr-defined]
                raise err
            if value is None:  # a null override means "no override", as in Kafka's config records
                continue
            typed[key] = check_value(defn, parse_typed(defn, value, key), key)
        merged = self._topic_defaults()
        merged.update(typed)
        if merged["min.compaction.lag.ms"] > merged["max.compaction.lag.ms"]:
            raise invalid(
                "min.compaction.lag.ms",
                merged["min.compaction.lag.ms"],
                f"Must not exceed max.compaction.lag.ms ({merged['max.compaction.lag.ms']})",
            )
        if (
            "remote.log.disable.policy" in typed
            and typed["remote.log.disable.policy"] == "retain"
            and merged["remote.log.delete.on.disable"]
        ):
            raise invalid(
                "remote.log.delete.on.disable",
                True,
                "Contradicts remote.log.disable.policy=retain; use policy delete or leave it unset",
            )
        if merged["remote.storage.enable"]:
            if not self._values["remote.log.storage.system.enable"]:
                reason = (
                    "Tiered storage is disabled on this broker (remote.log.storage.system.enable=false); "
                    + (
                        "delete every topic with remote.storage.enable=true before disabling it cluster-wide"
                        if from_store
                        else "a topic cannot enable remote storage"
                    )
                )
                raise invalid("remote.storage.enable", True, reason)
            _check_local_retention(merged)
            _check_copy_lag(merged)
            if merged["remote.log.copy.disable"]:
                for kind in ("bytes", "ms"):
                    local, total = merged[f"local.retention.{kind}"], merged[f"retention.{kind}"]
                    if local not in (-2, total):
                        raise invalid(
                            f"local.retention.{kind}",
                            local,
                            f"With remote.log.copy.disable=true it must be -2 or equal retention.{kind} "
                            f"({total}), since nothing more is uploaded",
                        )
        return typed, merged

    # --- describe (DescribeConfigs) --------------------------------------------------------------------

    def _static_text(self, key: str) -> str | None:
        return _as_text(self._originals[key]) if key in self._originals else None

    def describe_topic(self, overrides: Mapping[str, Any] | None = None) -> list[ConfigEntry]:
        """Every topic setting of a topic with these overrides as DescribeConfigs reports it: the value,
        its source (DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG or DEFAULT_CONFIG) and the synonym chain
        (the topic override, the broker keys set in the file, the broker keys' defaults)."""
        overrides = overrides or {}
        tc = self.topic_config(overrides)
        entries = []
        for name, tdef in TOPIC_CONFIGS.items():
            if tdef.internal and name not in tc.overrides:
                continue
            value = None if tdef.sensitive else format_value(tc[name])
            chain: list[ConfigSynonym] = []
            if name in tc.overrides:
                chain.append(ConfigSynonym(name, value, ConfigSource.DYNAMIC_TOPIC_CONFIG))
            for syn in tdef.synonyms:
                text = self._static_text(syn.name)
                if text is not None:
                    chain.append(ConfigSynonym(syn.name, text, ConfigSource.STATIC_BROKER_CONFIG))
            for syn in tdef.synonyms:
                default = BROKER_CONFIGS[syn.name].default
                if default is not None:
                    chain.append(ConfigSynonym(syn.name, format_value(default), ConfigSource.DEFAULT_CONFIG))
            source = chain[0].source if chain else ConfigSource.DEFAULT_CONFIG
            entries.append(
                ConfigEntry(name, value, source, tdef.sensitive, False, tdef.type, tuple(chain), tdef.doc)
            )
        return entries

    def describe_broker(self) -> list[ConfigEntry]:
        """Every broker setting (and every key given without a definition) as DescribeConfigs reports it.

        Values are the configured or default values (None for unset keys without default and for
        sensitive ones; keys without a definition are treated as sensitive, as Kafka does). Synonyms
        follow Kafka's broker rules: the key and its alternative-unit keys (log.retention.ms /
        .minutes / .hours, log.roll.ms / .hours, ...) set in the file, then their defaults, starting at
        the described key."""
        entries = []
        described: set[str] = set()
        for name, defn in BROKER_CONFIGS.items():
            key = self._actual.get(name, name)
            described.add(key)
            if defn.internal and key not in self._originals:
                continue
            value = None if defn.sensitive else format_value(self._values[name])
            chain = self._broker_chain(key, _broker_synonym_names(key), defn.sensitive)
            source = chain[0].source if chain else ConfigSource.DEFAULT_CONFIG
            entries.append(
                ConfigEntry(key, value, source, defn.sensitive, not defn.dynamic, defn.type, chain, defn.doc)
            )
        for key in self._originals:
            if key in described:
                continue
            setting = listener_override_setting(key)
            if setting is not None:  # listener.name.<name>.ssl.*: described as the setting it overrides
                defn = BROKER_CONFIGS[setting]
                value = None if defn.sensitive else _as_text(self._originals[key])
                chain = (ConfigSynonym(key, value, ConfigSource.STATIC_BROKER_CONFIG),)
                entries.append(ConfigEntry(key, value, ConfigSource.STATIC_BROKER_CONFIG, defn.sensitive,
                                           not defn.dynamic, defn.type, chain, defn.doc))
                continue
            chain = (ConfigSynonym(key, None, ConfigSource.STATIC_BROKER_CONFIG),)
            entries.append(
                ConfigEntry(key, None, ConfigSource.STATIC_BROKER_CONFIG, True, True, "unknown", chain, None)
            )
        return entries

    def _broker_chain(self, name: str, names: tuple[str, ...], sensitive: bool) -> tuple[ConfigSynonym, ...]:
        chain: list[ConfigSynonym] = []
        for n in names:
            text = self._static_text(n)
            if text is not None:
                chain.append(ConfigSynonym(n, None if sensitive else text, ConfigSource.STATIC_BROKER_CONFIG))
        for n in names:
            defn = BROKER_CONFIGS.get(n)
            if defn is not None and defn.default is not None:
                chain.append(
                    ConfigSynonym(
                        n, None if sensitive else format_value(defn.default), ConfigSource.DEFAULT_CONFIG
                    )
                )
        while chain and chain[0].name != name:  # Kafka drops the links before the described key
            chain.pop(0)
        return tuple(chain)


def _check_local_retention(values: Mapping[str, Any], names: Mapping[str, str] | None = None) -> None:
    """Kafka's local-vs-total retention rule: unless local is -2 (inherit), a finite total retention
    forbids local -1 (forever) and a local value above the total."""
    names = names or {}
    for kind, total_forever in (("bytes", lambda t: t <= -1), ("ms", lambda t: t == -1)):
        total_key, local_key = f"retention.{kind}", f"local.retention.{kind}"
        total, local = values[total_key], values[local_key]
        if total_forever(total) or local == -2:
            continue
        shown_local, shown_total = names.get(local_key, local_key), names.get(total_key, total_key)
        if local == -1:
            raise invalid(shown_local, local, f"Must not be -1 (forever) while {shown_total} is {total}")
        if local > total:
            raise invalid(shown_local, local, f"Must not be more than {shown_total} ({total})")


def _check_cordoned_log_dirs(cordoned: list[str], log_dirs: list[str]) -> None:
    """KIP-1066 as Kafka 4.3+ checks it (INVALID_REQUEST, Kafka's wording): * alone, or entries of log.dirs."""
    if "*" in cordoned:
        if len(cordoned) > 1:
            raise InvalidRequestError("requirement failed: When cordoned.log.dirs is set to *, it must not contain "
                                      "other values")
        return
    missing = [d for d in cordoned if d not in log_dirs]
    if missing:
        raise InvalidRequestError("requirement failed: All entries in cordoned.log.dirs must be present in log.dirs "
                                  f"or log.dir. Missing entries : {','.join(missing)}")


def _check_copy_lag(values: Mapping[str, Any]) -> None:
    """Kafka 4.4's rule: a positive remote.copy.lag.* must not exceed the effective local retention (bytes
    checked first, as Kafka does)."""
    for kind in ("bytes", "ms"):
        lag = values[f"remote.copy.lag.{kind}"]
        local = values[f"local.retention.{kind}"]
        effective = values[f"retention.{kind}"] if local == -2 else local
        if lag > 0 and effective >= 0 and lag > effective:
            raise invalid(
                f"remote.copy.lag.{kind}",
                lag,
                f"Value must not exceed local.retention.{kind} (effective value: {effective})",
            )


def validate_topic_overrides(
    overrides: Mapping[str, Any], broker: BrokerConfig | None = None
) -> dict[str, Any]:
    """:meth:`BrokerConfig.validate_topic_overrides` against ``broker`` (default: a broker with every
    setting at its default)."""
    return (broker if broker is not None else BrokerConfig()).validate_topic_overrides(overrides)


def load(path: str | os.PathLike[str] | None = None, overrides: Mapping[str, str] = _EMPTY) -> BrokerConfig:
    """Shorthand for :meth:`BrokerConfig.load`."""
    return BrokerConfig.load(path, overrides)


__all__ = [
    "CONFIG_TYPE_IDS",
    "INTERNAL_TOPICS",
    "BrokerConfig",
    "ConfigEntry",
    "ConfigSource",
    "ConfigSynonym",
    "Listener",
    "TopicConfig",
    "load",
    "parse_listeners",
    "validate_topic_overrides",
]


def plugin_setting(configs: Mapping[str, Any], prefix: str, name: str) -> Any:
    """A plugin's setting ``name`` as the plugin received it (``prefix`` stripped, values as strings), parsed
    and checked by the config table's entry ``prefix + name``; the table's default when it is absent. The
    table is the one source of a plugin setting's default, its check and its documentation."""
    defn = BROKER_CONFIGS[prefix + name]
    value = configs.get(name)
    if value is None or (isinstance(value, str) and not value.strip()):
        return _copy(defn.default)
    return check_value(defn, parse_typed(defn, value, name), name)
