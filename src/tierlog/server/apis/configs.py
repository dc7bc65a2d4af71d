"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

Resources, as Kafka numbers them: TOPIC (2), BROKER (4, this node's id, or "" for the cluster-wide
dynamic defaults), BROKER_LOGGER (8, the broker's Python loggers with Kafka's log4j level names) and GROUP
(32, a group's config overrides, :mod:`tierlog.config.group_configs`, kept in the metadata image).
What a single Kafka broker with its own controller answers is the model: the broker-side checks of
Kafka's ``ConfigAdminManager`` (duplicate resources and keys, null values, the node id, log levels)
come first, then the controller's rules (``ConfigurationControlManager``: configs are validated
before the topic's existence is checked). Values come from the configuration table through
:meth:`BrokerConfig.describe_topic` / :meth:`BrokerConfig.describe_broker`; this module layers the
dynamic broker configs on top with Kafka's precedence and sources (DYNAMIC_BROKER_CONFIG for this
node, DYNAMIC_DEFAULT_BROKER_CONFIG for the cluster default).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace

from tierlog.cluster import ConfigOp, Controller, validate_topic_name
from tierlog.config import BROKER_CONFIGS, TOPIC_CONFIGS, BrokerConfig, ConfigEntry, ConfigSource, ConfigSynonym
from tierlog.config.broker import _broker_synonym_names
from tierlog.config.group_configs import GROUP_CONFIGS, group_config_value
from tierlog.config.values import format_value
from tierlog.errors import (
    NO_ERROR,
    InvalidConfigError,
    InvalidRequestError,
    KafkaError,
    UnknownTopicOrPartitionError,
    describe_error,
)
from tierlog.protocol import ApiKey, RequestContext, build_response, offload
from tierlog.protocol.offload import Pacer, paced
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization

log = logging.getLogger(__name__)

# ConfigResource.Type ids
TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
_TYPE_NAMES = {TOPIC: "TOPIC", BROKER: "BROKER", BROKER_LOGGER: "BROKER_LOGGER", CLIENT_METRICS: "CLIENT_METRICS",
               GROUP: "GROUP"}
# AlterConfigOp.OpType ids
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}



# ---------------------------------------------------------------------------------------------------
# Describing: the configuration table's entries with the dynamic broker configs layered on top
# ---------------------------------------------------------------------------------------------------


def _text(value) -> str | None:
    return value if isinstance(value, str) or value is None else format_value(value)


def _dynamic(controller) -> tuple[Mapping[str, str], Mapping[str, str]]:
    """(this node's dynamic broker configs, the cluster-wide dynamic defaults)."""
    dynamic = controller.image.broker_configs
    return dynamic.get(str(controller.node_id), {}), dynamic.get("", {})


def _chain(names: Iterable[str], static: BrokerConfig, node: Mapping[str, str], cluster: Mapping[str, str],
           sensitive: bool) -> list[ConfigSynonym]:
    """Kafka's ConfigHelper.configSynonyms order: every name's dynamic per-broker value, then every
    name's dynamic default, then the static file, then the built-in defaults."""
    names = list(names)
    originals = static.originals
    out: list[ConfigSynonym] = []
    for values, source in ((node, ConfigSource.DYNAMIC_BROKER_CONFIG),
                           (cluster, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                           (originals, ConfigSource.STATIC_BROKER_CONFIG)):
        for n in names:
            if n in values and values[n] is not None:
                out.append(ConfigSynonym(n, None if sensitive else _text(values[n]), source))
    for n in names:
        d = BROKER_CONFIGS.get(n)
        if d is not None and d.default is not None:
            out.append(ConfigSynonym(n, None if sensitive else format_value(d.default), ConfigSource.DEFAULT_CONFIG))
    return out


def describe_topic(controller, overrides: Mapping[str, str] | None) -> list[ConfigEntry]:
    """Every topic setting of a topic with these overrides: the effective value (dynamic broker
    defaults included), its source and its synonym chain (the override, then the broker keys that
    supply the default: dynamic per-broker, dynamic cluster default, static, built-in)."""
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    node, cluster = _dynamic(controller)
    static = controller.config
    out = []
    for e in controller.effective_config.describe_topic(overrides):
        tdef = TOPIC_CONFIGS[e.name]
        chain = [ConfigSynonym(e.name, e.value, ConfigSource.DYNAMIC_TOPIC_CONFIG)] if e.name in overrides else []
        chain += _chain((s.name for s in tdef.synonyms), static, node, cluster, e.sensitive)
        source = chain[0].source if chain else ConfigSource.DEFAULT_CONFIG
        out.append(replace(e, source=source, synonyms=tuple(chain)))
    return out


def describe_broker(controller) -> list[ConfigEntry]:
    """This node's settings as Kafka describes BROKER resource "<node id>"."""
    node, cluster = _dynamic(controller)
    static = controller.config
    out = []
    for e in controller.effective_config.describe_broker():
        if e.type == "unknown":  # a key given without a definition: as the table describes it
            out.append(e)
            continue
        chain = _chain(_broker_synonym_names(e.name), static, node, cluster, e.sensitive)
        while chain and chain[0].name != e.name:  # Kafka drops the links before the described key
            chain.pop(0)
        source = chain[0].source if chain else ConfigSource.DEFAULT_CONFIG
        out.append(replace(e, source=source, synonyms=tuple(chain)))
    return out


def describe_group(controller, group_id: str) -> list[ConfigEntry]:
    """A group's configs as Kafka 4.4 describes GROUP resource ``group_id`` (any id, existing group or not): the
    override (DYNAMIC_GROUP_CONFIG) or the value it falls back to (DEFAULT_CONFIG, the broker key as synonym)."""
    overrides = controller.image.group_configs.get(group_id, {})
    out = []
    for name, d in GROUP_CONFIGS.items():
        fallback = group_config_value(None, name, controller.effective_config)
        chain = [ConfigSynonym(name, overrides[name], ConfigSource.DYNAMIC_GROUP_CONFIG)] if name in overrides else []
        chain.append(ConfigSynonym(d.broker_key or name, fallback, ConfigSource.DEFAULT_CONFIG))
        out.append(ConfigEntry(name, chain[0].value, chain[0].source, False, False, d.type, tuple(chain), None))
    return out


def describe_broker_defaults(controller) -> list[ConfigEntry]:
    """The cluster-wide dynamic defaults, as Kafka describes BROKER resource "" (only the keys set)."""
    _node, cluster = _dynamic(controller)
    out = []
    for name, value in cluster.items():
        d = BROKER_CONFIGS.get(name)
        sensitive = d.sensitive if d is not None else True
        chain = [s for s in _chain(_broker_synonym_names(name), controller.config, {}, cluster, sensitive)
                 if s.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        while chain and chain[0].name != name:
            chain.pop(0)
        out.append(ConfigEntry(name, None if sensitive else value, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                               sensitive, not (d is not None and d.dynamic), d.type if d is not None else "unknown",
                               tuple(chain), d.doc if d is not None else None))
    return out


# ---------------------------------------------------------------------------------------------------
# BROKER_LOGGER: Python's loggers under Kafka's log4j level names
# ---------------------------------------------------------------------------------------------------

ROOT_LOGGER = "root"
TRACE = 5
_LEVELS = {"FATAL": logging.CRITICAL, "ERROR": logging.ERROR, "WARN": logging.WARNING, "INFO": logging.INFO,
           "DEBUG": logging.DEBUG, "TRACE": TRACE}
VALID_LOG_LEVELS = ", ".join(sorted(_LEVELS))


def _kafka_level(level: int) -> str:
    for name, value in sorted(_LEVELS.items(), key=lambda kv: -kv[1]):
        if level >= value:
            return name
    return "TRACE"


def _existing_logger(name: str) -> logging.Logger | None:
    if name == ROOT_LOGGER:
        return logging.getLogger()
    lg = logging.Logger.manager.loggerDict.get(name)
    return lg if isinstance(lg, logging.Logger) else None


def current_loggers() -> dict[str, str]:
    """Kafka's Log4jController.loggers: every logger and its effective level (root first)."""
    out = {ROOT_LOGGER: _kafka_level(logging.getLogger().level)}
    for name, lg in sorted(logging.Logger.manager.loggerDict.items()):
        if isinstance(lg, logging.Logger):
            out[name] = _kafka_level(lg.getEffectiveLevel())
    return out


def _node_id(name: str, label: str = "Node id") -> int:
    try:
        return int(name)
    except ValueError:
        raise InvalidRequestError(f"{label} must be an integer, but it is: {name}") from None


def _check_node(name: str, node_id: int) -> None:
    """ConfigAdminManager.validateResourceNameIsCurrentNodeId."""
    if _node_id(name) != node_id:
        raise InvalidRequestError(f"Unexpected broker id, expected {node_id}, but received {name}")


def apply_logger_changes(node_id: int, name: str, configs, validate_only: bool) -> None:
    """Kafka's RuntimeLoggerManager: validate every operation, then apply them (SET / DELETE only)."""
    if _node_id(name) != node_id:
        raise InvalidRequestError(f"Unexpected node id. Expected {node_id}, but received {name}")
    for c in configs:
        op = c.config_operation
        if op in (SET, DELETE):
            if _existing_logger(c.name) is None:
                raise InvalidConfigError(f"Logger {c.name} does not exist!")
            if op == SET and c.value not in _LEVELS:
                raise InvalidConfigError(f"Cannot set the log level of {c.name} to {c.value} as it is not a "
                                         f"supported log level. Valid log levels are {VALID_LOG_LEVELS}")
            if op == DELETE and c.name == ROOT_LOGGER:
                raise InvalidRequestError(f"Removing the log level of the {ROOT_LOGGER} logger is not allowed")
        elif op in (APPEND, SUBTRACT):
            raise InvalidRequestError(f"{_OP_NAMES[op]} operation is not allowed for the BROKER_LOGGER resource")
        else:
            raise InvalidRequestError(f"Unknown operation type {op} is not allowed for the BROKER_LOGGER resource")
    if validate_only:
        return
    for c in configs:
        lg = _existing_logger(c.name)
        if c.config_operation == SET:
            if _LEVELS[c.value] == TRACE and logging.getLevelName(TRACE) != "TRACE":
                logging.addLevelName(TRACE, "TRACE")
            lg.setLevel(_LEVELS[c.value])
            log.warning("Updated the log level of %s to %s", c.name, c.value)
        else:
            lg.setLevel(logging.NOTSET)
            log.warning("Unset the log level of %s", c.name)


# ---------------------------------------------------------------------------------------------------
# The APIs
# ---------------------------------------------------------------------------------------------------


def _error(e: KafkaError) -> tuple[int, str | None]:
    return e.code, e.message


def _entry_out(e: ConfigEntry, include_synonyms: bool, include_documentation: bool) -> dict:
    return {
        "name": e.name,
        "value": None if e.sensitive else e.value,
        "read_only": e.read_only,
        "config_source": int(e.source),
        "is_sensitive": e.sensitive,
        "synonyms": [{"name": s.name, "value": s.value, "source": int(s.source)} for s in e.synonyms]
        if include_synonyms else [],
        "config_type": e.type_id,
        "documentation": e.documentation if include_documentation else None,
    }


class ConfigApis:
    def __init__(self, controller: Controller, node_id: int, *, authorization: ApiAuthorization = ALLOW_ALL):
        self.controller = controller
        self.node_id = node_id
        self.authorization = authorization

    def register(self, registry) -> None:
        registry.register(ApiKey.DESCRIBE_CONFIGS, 1, 4, self.describe_configs)
        registry.register(ApiKey.ALTER_CONFIGS, 0, 2, self.alter_configs)
        registry.register(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, self.incremental_alter_configs)

    # ------------------------------------------------------------------ DescribeConfigs

    async def describe_configs(self, ctx: RequestContext):
        checked = self.authorization.describe_configs(ctx)
        ctx = checked.ctx
        req = ctx.request
        include_synonyms = bool(getattr(req, "include_synonyms", False))
        include_documentation = bool(getattr(req, "include_documentation", False))
        pacer = Pacer()  # a request may name a million resources: its loops yield to the event loop
        unknown = None
        async for chunk in paced(req.resources, 512, pacer):
            unknown = next((r for r in chunk if r.resource_type not in _TYPE_NAMES), None)
            if unknown is not None:
                break
        results = []
        items = 0
        async for chunk in paced(req.resources, 16, pacer):
            for r in chunk:
                out = {"resource_type": r.resource_type, "resource_name": r.resource_name, "error_code": NO_ERROR,
                       "error_message": None, "configs": []}
                try:
                    if unknown is not None:
                        # Kafka fails the whole request on a resource type it does not know.
                        raise InvalidRequestError(
                            f"Unexpected resource type UNKNOWN for resource {unknown.resource_name}")
                    entries = self._describe(r)
                    if entries is None:  # Kafka answers an unknown topic without a message
                        out["error_code"] = UnknownTopicOrPartitionError.code
                    else:
                        keys = r.configuration_keys
                        if keys:
                            wanted = set(keys)
                            entries = [e for e in entries if e.name in wanted]
                        out["configs"] = [_entry_out(e, include_synonyms, include_documentation) for e in entries]
                        items += len(out["configs"])
                except KafkaError as e:
                    out["error_code"], out["error_message"] = _error(e)
                results.append(out)
        results += checked.refused
        return await offload.respond(ctx, {"throttle_time_ms": 0, "results": results}, items + len(results))

    def _describe(self, r) -> list[ConfigEntry] | None:
        controller = self.controller
        name = r.resource_name
        if r.resource_type == TOPIC:
            validate_topic_name(name)
            topic = controller.image.topics.get(name)
            return None if topic is None else describe_topic(controller, topic.configs)
        if r.resource_type == BROKER:
            if not name:
                return describe_broker_defaults(controller)
            if _node_id(name, "Broker id") != self.node_id:
                raise InvalidRequestError(f"Unexpected broker id, expected {self.node_id} or empty string, "
                                          f"but received {name}")
            return describe_broker(controller)
        if r.resource_type == BROKER_LOGGER:
            if not name:
                raise InvalidRequestError("Broker id must not be empty")
            if _node_id(name, "Broker id") != self.node_id:
                raise InvalidRequestError(f"Unexpected broker id, expected {self.node_id} but received {name}")
            return [ConfigEntry(n, level, ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG, False, False, "unknown", (),
                                None) for n, level in current_loggers().items()]
        if r.resource_type == CLIENT_METRICS:
            if not name:
                raise InvalidRequestError("Client metrics subscription name must not be empty")
            return []  # no client metrics subscriptions are stored
        if r.resource_type == GROUP:
            if not name:
                raise InvalidRequestError("Group name must not be empty")
            return describe_group(controller, name)
        raise InvalidRequestError(f"Unsupported resource type: {_TYPE_NAMES[r.resource_type]}")

    # ------------------------------------------------------------------ AlterConfigs / IncrementalAlterConfigs

    async def alter_configs(self, ctx: RequestContext):
        return await self._alter(ctx, incremental=False)

    async def incremental_alter_configs(self, ctx: RequestContext):
        return await self._alter(ctx, incremental=True)

    async def _alter(self, ctx: RequestContext, incremental: bool):
        checked = self.authorization.alter_configs(ctx)
        ctx = checked.ctx
        req = ctx.request
        validate_only = bool(getattr(req, "validate_only", False))
        seen: dict[tuple[int, str], int] = {}
        for r in req.resources:
            key = (r.resource_type, r.resource_name)
            seen[key] = seen.get(key, 0) + 1
        responses = []
        for r in req.resources:
            code, message = 0, None
            try:
                if seen[(r.resource_type, r.resource_name)] > 1:
                    raise InvalidRequestError("Each resource must appear at most once.")
                await self._alter_one(r, incremental, validate_only)
            except KafkaError as e:
                code, message = _error(e)
                log.info("%s of %s %r failed: %s", "IncrementalAlterConfigs" if incremental else "AlterConfigs",
                         _TYPE_NAMES.get(r.resource_type, r.resource_type), r.resource_name, describe_error(e))
            responses.append({"error_code": code, "error_message": message, "resource_type": r.resource_type,
                              "resource_name": r.resource_name})
        return build_response(ctx, {"throttle_time_ms": 0, "responses": responses + checked.refused})

    async def _alter_one(self, r, incremental: bool, validate_only: bool) -> None:
        """Kafka's broker-side preprocessing (ConfigAdminManager.preprocess), then the controller."""
        names = [c.name for c in r.configs]
        if len(set(names)) != len(names):
            raise InvalidRequestError("Error due to duplicate config keys")
        nulls = [c.name for c in r.configs
                 if c.value is None and not (incremental and c.config_operation == DELETE)]
        if nulls:
            raise InvalidRequestError("Null value not supported for : " + ", ".join(nulls))
        rtype, name = r.resource_type, r.resource_name
        controller = self.controller
        if rtype == BROKER_LOGGER and incremental:
            apply_logger_changes(self.node_id, name, r.configs, validate_only)
        elif rtype == BROKER:
            if name and not controller.clustered:  # in a cluster the controller handles every broker's
                _check_node(name, self.node_id)
            ops = self._ops(r.configs, BROKER) if incremental else None  # INVALID_CONFIG, as in Kafka
            try:
                await controller.call(controller.alter_broker_configs, name, {c.name: c.value for c in r.configs},
                                      ops, validate_only)
            except InvalidConfigError as e:
                # KAFKA-13609: a broker config that fails validation is INVALID_REQUEST in Kafka.
                raise InvalidRequestError(e.message) from None
        elif rtype == GROUP:
            if not name:
                raise InvalidRequestError("Default group resources are not allowed.")
            if incremental:
                ops = self._ops(r.configs, GROUP)
                await controller.call(controller.alter_group_configs, name, None, ops, validate_only)
            else:
                await controller.call(controller.alter_group_configs, name, {c.name: c.value for c in r.configs},
                                      None, validate_only)
        elif rtype == TOPIC:
            if not name:
                raise InvalidRequestError("Default topic resources are not allowed.")
            validate_topic_name(name)
            if incremental:
                await controller.call(controller.incremental_alter_topic_configs, name, self._ops(r.configs, TOPIC),
                                      validate_only)
            else:
                await controller.call(controller.alter_topic_configs, name, {c.name: c.value for c in r.configs},
                                      validate_only)
        else:
            raise InvalidRequestError(f"Unknown resource type {rtype}")

    @staticmethod
    def _ops(configs, rtype: int) -> list[ConfigOp]:
        ops = []
        for c in configs:
            op = c.config_operation
            if op not in _OP_NAMES:
                raise InvalidRequestError(f"Unknown operations type {op}")
            if op in (APPEND, SUBTRACT):
                if rtype == GROUP:  # no group config is a list
                    raise InvalidConfigError(f"Can't {_OP_NAMES[op]} to key {c.name} because its type is not LIST.")
                if rtype == TOPIC:
                    d = TOPIC_CONFIGS.get(c.name)
                    if d is None or d.type != "list":  # ConfigurationControlManager's rule and message
                        raise InvalidConfigError(f"Can't {_OP_NAMES[op]} to key {c.name} because its type is not LIST.")
                else:
                    d = BROKER_CONFIGS.get(c.name)
                    if d is None:  # ConfigAdminManager.prepareIncrementalConfigs
                        raise InvalidConfigError(f"Unknown config name: {c.name}")
                    if d.type != "list":
                        raise InvalidConfigError(
                            f"Config value {_OP_NAMES[op].lower()} is not allowed for config key: {c.name}")
            ops.append(ConfigOp(c.name, op, c.value))
        return ops


__all__ = ["ConfigApis", "current_loggers", "describe_broker", "describe_broker_defaults", "describe_topic"]
