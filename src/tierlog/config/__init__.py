"""tierlog's configuration: one table of broker, topic and client settings, and what reads it.

* :mod:`tierlog.config.definitions` - the table (:data:`BROKER_CONFIGS`, :data:`TOPIC_CONFIGS`,
  :data:`CLIENT_CONFIGS`) and the deliberate differences from Kafka;
* :mod:`tierlog.config.properties` - Java ``.properties`` parsing;
* :mod:`tierlog.config.broker` - :class:`BrokerConfig` (load, validate, topic configs, describe);
* :mod:`tierlog.config.client` - :func:`validate_client_config`;
* :mod:`tierlog.config.docs` - the generated ``docs/configuration.md``.
"""

from tierlog.config.broker import (
    BrokerConfig,
    ConfigEntry,
    ConfigSource,
    ConfigSynonym,
    Listener,
    TopicConfig,
    plugin_setting,
    validate_topic_overrides,
)
from tierlog.config.client import client_settings, validate_client_config
from tierlog.config.definitions import (
    ALL_CONFIGS,
    BROKER_CONFIGS,
    CLIENT_CONFIGS,
    DELIBERATE_DIFFERENCES,
    TOPIC_CONFIGS,
    ConfigDef,
    Difference,
    Synonym,
)
from tierlog.config.properties import (
    PropertiesSyntaxError,
    format_properties,
    load_properties,
    parse_properties,
)
from tierlog.config.values import Password

__all__ = [
    "ALL_CONFIGS",
    "BROKER_CONFIGS",
    "CLIENT_CONFIGS",
    "DELIBERATE_DIFFERENCES",
    "TOPIC_CONFIGS",
    "BrokerConfig",
    "ConfigDef",
    "ConfigEntry",
    "ConfigSource",
    "ConfigSynonym",
    "Difference",
    "Listener",
    "Password",
    "PropertiesSyntaxError",
    "Synonym",
    "TopicConfig",
    "client_settings",
    "format_properties",
    "load_properties",
    "parse_properties",
    "plugin_setting",
    "validate_client_config",
    "validate_topic_overrides",
]
