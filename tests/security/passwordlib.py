"""Shared by the password-encoder tests: the dynamic password setting they change, and a broker config change
sent as IncrementalAlterConfigs or AlterConfigs."""

from __future__ import annotations

from tests.harness.rawclient import RawClient
from tierlog.protocol import ApiKey

BROKER = 4  # ConfigResource type
PASSWORD_KEY = "listener.name.ssl.ssl.keystore.password"
LOCATION_KEY = "listener.name.ssl.ssl.keystore.location"


def alter_broker_configs(broker, resource: str, configs: dict, incremental: bool = True):
    raw = RawClient(broker.bootstrap)
    try:
        if incremental:
            entries = [{"name": k, "config_operation": 0, "value": v} for k, v in configs.items()]
            r = raw.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
                {"resource_type": BROKER, "resource_name": resource, "configs": entries}], "validate_only": False})
        else:
            r = raw.request(ApiKey.ALTER_CONFIGS, 2, {"resources": [
                {"resource_type": BROKER, "resource_name": resource,
                 "configs": [{"name": k, "value": v} for k, v in configs.items()]}], "validate_only": False})
    finally:
        raw.close()
    return r.responses[0].error_code, r.responses[0].error_message
