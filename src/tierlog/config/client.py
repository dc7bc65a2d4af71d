"""Client configuration checks (producer, consumer, admin), as Kafka's client config classes run them.

:func:`validate_client_config` parses and checks every given setting for the role, fills in the
defaults and applies Kafka's post-processing rules:

* producer: idempotence (enabled by default) needs ``acks=all``, ``retries`` > 0 and at most 5
  requests in flight. If the user enabled it explicitly a conflict is an error; otherwise idempotence
  is switched off with a log message. ``transactional.id`` needs idempotence. ``delivery.timeout.ms``
  must be at least ``linger.ms + request.timeout.ms`` when set explicitly, and is raised to that sum
  otherwise;
* consumer: without ``group.id`` automatic commits are off, and asking for them is an error; with a
  classic group, ``heartbeat.interval.ms`` must be lower than ``session.timeout.ms``; each group
  protocol refuses the settings of the other (:func:`check_group_protocol_settings`);
* all: setting ``reconnect.backoff.ms`` alone makes the reconnect back-off constant.

Keys that are not settings of the role are logged and left out, as Kafka's clients do.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from tierlog.config.definitions import CLIENT_CONFIGS, CLIENT_ROLES
from tierlog.config.values import invalid, parse_value
from tierlog.errors import InvalidConfigError
from tierlog.security import client_context

log = logging.getLogger("tierlog.config")


def client_settings(role: str) -> list[str]:
    """Names of the settings that ``role`` (producer, consumer or admin) accepts."""
    _check_role(role)
    return [name for name, d in CLIENT_CONFIGS.items() if role in d.roles]


def _check_role(role: str) -> None:
    if role not in CLIENT_ROLES:
        raise ValueError(f"role must be one of {', '.join(CLIENT_ROLES)}, not {role!r}")


def validate_client_config(role: str, props: Mapping[str, Any]) -> dict[str, Any]:
    """Check the settings of a producer, consumer or admin client and return every setting of the
    role, typed, with defaults filled in and Kafka's adjustments applied.

    Raises InvalidConfigError (naming the key, the value and what is allowed) for an invalid value or
    a contradiction Kafka refuses; ValueError for an unknown role."""
    _check_role(role)
    given = {str(k): v for k, v in props.items()}
    out: dict[str, Any] = {}
    for name, defn in CLIENT_CONFIGS.items():
        if role not in defn.roles:
            continue
        if name in given:
            out[name] = parse_value(defn, given[name])
        else:
            default = defn.default_for(role)
            out[name] = list(default) if isinstance(default, list) else default
        if defn.required and name not in given:
            raise invalid(name, None, f"Missing required configuration {name} ({defn.allowed()})")
    for key in given:
        if key not in out:
            if key in CLIENT_CONFIGS:
                log.warning("Configuration '%s' is not a %s setting: ignored", key, role)
            else:
                log.warning("Unknown configuration '%s' for a %s: ignored", key, role)

    protocol = out["security.protocol"].upper()
    if protocol.startswith("SASL_"):
        from tierlog.security.sasl_client import SaslClientError, SaslCredentials
        try:  # incomplete credentials are refused here, before any I/O
            SaslCredentials.from_config(out)
        except SaslClientError as e:
            raise invalid("sasl.mechanism", out.get("sasl.mechanism"), str(e)) from None
    if protocol in ("SSL", "SASL_SSL"):
        client_context(out)  # unreadable stores, a wrong password...: refused here, before any I/O
    if "reconnect.backoff.ms" in given and "reconnect.backoff.max.ms" not in given:
        out["reconnect.backoff.max.ms"] = out["reconnect.backoff.ms"]
    if role == "producer":
        _producer_rules(out, given)
    elif role == "consumer":
        _consumer_rules(out, given)
    return out


def _producer_rules(out: dict[str, Any], given: Mapping[str, Any]) -> None:
    explicit = "enable.idempotence" in given
    if out["enable.idempotence"]:
        conflicts = []
        if out["retries"] == 0:
            conflicts.append(("retries", out["retries"], "Must be non-zero when idempotence is enabled"))
        if out["acks"] not in ("all", "-1"):
            conflicts.append(("acks", out["acks"], "Must be all (-1) when idempotence is enabled"))
        if out["max.in.flight.requests.per.connection"] > 5:
            conflicts.append(
                (
                    "max.in.flight.requests.per.connection",
                    out["max.in.flight.requests.per.connection"],
                    "Must be at most 5 when idempotence is enabled",
                )
            )
        if conflicts:
            if explicit:
                key, value, reason = conflicts[0]
                raise invalid(key, value, reason)
            log.info("Idempotence disabled because %s", ", ".join(f"{k}={v}" for k, v, _ in conflicts))
            out["enable.idempotence"] = False
    if out["transactional.id"] is not None and not out["enable.idempotence"]:
        raise invalid(
            "transactional.id",
            out["transactional.id"],
            "A transactional producer needs enable.idempotence=true",
        )
    floor = min(out["linger.ms"] + out["request.timeout.ms"], 2**31 - 1)
    if out["delivery.timeout.ms"] < floor:
        if "delivery.timeout.ms" in given:
            raise invalid(
                "delivery.timeout.ms",
                out["delivery.timeout.ms"],
                f"Must be at least linger.ms + request.timeout.ms ({floor})",
            )
        log.warning("delivery.timeout.ms raised to linger.ms + request.timeout.ms = %d", floor)
        out["delivery.timeout.ms"] = floor


def _consumer_rules(out: dict[str, Any], given: Mapping[str, Any]) -> None:
    if out["group.id"] is None:
        if "enable.auto.commit" not in given:
            out["enable.auto.commit"] = False
        elif out["enable.auto.commit"]:
            raise invalid("enable.auto.commit", True, "Cannot be true without a group.id")
    elif out["group.protocol"] == "classic" and out["heartbeat.interval.ms"] >= out["session.timeout.ms"]:
        raise invalid(
            "heartbeat.interval.ms",
            out["heartbeat.interval.ms"],
            f"Must be lower than session.timeout.ms ({out['session.timeout.ms']})",
        )


__all__ = ["client_settings", "validate_client_config"]


# Kafka's ConsumerConfig: settings one group protocol has and the other refuses (when a group.id is set)
_UNSUPPORTED_BY_PROTOCOL = {
    "classic": ("group.remote.assignor",),
    "consumer": ("partition.assignment.strategy", "heartbeat.interval.ms", "session.timeout.ms"),
}


def check_group_protocol_settings(config: Mapping[str, Any], given: Mapping[str, Any]) -> None:
    """Refuse, as Kafka's consumer does, settings the chosen ``group.protocol`` does not have: with
    ``consumer`` (KIP-848) the broker decides heartbeats, sessions and assignment."""
    protocol = str(config["group.protocol"]).lower()
    if config.get("group.id") is None:
        return
    bad = [name for name in _UNSUPPORTED_BY_PROTOCOL.get(protocol, ())
           if given.get(name) is not None and str(given[name]).strip() not in ("", "[]", "()")]
    if bad:
        raise InvalidConfigError(f"{', '.join(bad)} cannot be set when group.protocol={protocol.upper()}")
