"""DescribeClientQuotas and AlterClientQuotas (KIP-546), what ``kafka-configs --entity-type users/clients``
sends.

Entities are sets of (type, name) components, ``user`` and ``client-id`` (a name of None is the default
entity); the rules and messages are Kafka's controller's (ClientQuotaControlManager for alterations,
ClientQuotasImage for the describe filter). Quotas are stored by entity path in the metadata image
(:mod:`tierlog.server.quotas.client_quota`), so they live with the topic configs: the metadata file of a single
broker, ``/config/users`` and ``/config/clients`` in ZooKeeper mode, where AlterClientQuotas is forwarded to
the controller like the other config changes.
"""

from __future__ import annotations

import ipaddress
import logging

from tierlog.cluster import Controller
from tierlog.cluster.acls import AclOperation
from tierlog.errors import NO_ERROR, InvalidRequestError, KafkaError, UnsupportedVersionError
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization
from tierlog.server.quotas.client_quota import (
    CLIENT_ID,
    CONTROLLER_MUTATION,
    DEFAULT,
    FETCH,
    IP,
    PRODUCE,
    REQUEST,
    USER,
    entity_path,
    parse_entity_path,
    sanitize,
)

log = logging.getLogger(__name__)

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
# Kafka's QuotaConfig: the keys of user and client-id entities, and the integral ones among them
_QUOTA_TYPES = {PRODUCE: "LONG", FETCH: "LONG", REQUEST: "DOUBLE", CONTROLLER_MUTATION: "DOUBLE"}
_IP_TYPES = {"connection_creation_rate": "INT"}
_LIMITS = {"SHORT": 2**15 - 1, "INT": 2**31 - 1, "LONG": 2**63 - 1}


def _entity_of(path: str) -> dict[str, str | None]:
    return parse_entity_path(path)


def matches(entity: dict[str, str | None], exact: dict[str, str | None], specified: set[str], strict: bool) -> bool:
    """ClientQuotasImage.matches: every exact component equal, every specified type present; strict: nothing
    else in the entity."""
    if strict and len(entity) != len(exact) + len(specified):
        return False
    for kind, name in exact.items():
        if kind not in entity or entity[kind] != name:
            return False
    return all(kind in entity for kind in specified)


def parse_filter(components, strict: bool) -> tuple[dict[str, str | None], set[str]]:
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for c in components:
        kind = c.entity_type
        if not kind:
            raise InvalidRequestError("Invalid empty entity type.")
        if kind in exact or kind in specified:
            raise InvalidRequestError(f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in (IP, USER, CLIENT_ID):
            raise UnsupportedVersionError(f"Unsupported entity type {kind}")
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise InvalidRequestError("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[kind] = c.match
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise InvalidRequestError("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[kind] = None
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise InvalidRequestError("Request specified MATCH_TYPE_SPECIFIED, but also specified a match "
                                          "string.")
            specified.add(kind)
        else:
            raise UnsupportedVersionError(f"Unknown match type {c.match_type}")
    kinds = set(exact) | specified
    if IP in kinds and (USER in kinds or CLIENT_ID in kinds):
        raise InvalidRequestError("Invalid entity filter component combination. IP filter component should not "
                                  "be used with user or clientId filter component.")
    return exact, specified


def validate_entity(named: dict[str, str | None]) -> dict[str, str | None]:
    """ClientQuotaControlManager.validateEntity and the entity types' combinations, on the entity's map (a type
    named twice in a request is one entry, the last, as Kafka's broker builds the map)."""
    if not named:
        raise InvalidRequestError("Invalid empty client quota entity")
    entity: dict[str, str | None] = {}
    for kind, name in named.items():
        if kind == IP:
            if name is not None:
                try:
                    ipaddress.ip_address(name)
                except ValueError:
                    raise InvalidRequestError("Illegal IP address " + name) from None
        elif kind not in (USER, CLIENT_ID):
            raise InvalidRequestError(f"Unhandled client quota entity type: {kind}")
        if name is not None and name == "":
            raise InvalidRequestError(f"Empty {kind} not supported")
        entity[kind] = name
    if set(entity) not in ({USER}, {CLIENT_ID}, {USER, CLIENT_ID}, {IP}):
        raise InvalidRequestError("Invalid entity combination")
    return entity


def validate_value(types: dict[str, str], key: str, value: float) -> None:
    kind = types.get(key)
    if kind is None:
        raise InvalidRequestError(f"Invalid configuration key {key}")
    if value <= 0.0:
        raise InvalidRequestError(f"Quota {key} must be greater than 0")
    if kind in _LIMITS:
        if value > _LIMITS[kind]:
            raise InvalidRequestError(f"Proposed value for {key} is too large for a {kind}.")
        if abs(value % 1.0) > 1e-6:
            raise InvalidRequestError(f"{key} cannot be a fractional value.")


class ClientQuotaApis:
    def __init__(self, controller: Controller, *, authorization: ApiAuthorization = ALLOW_ALL):
        self.controller = controller
        self.authorization = authorization

    def register(self, registry) -> None:
        registry.register(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1, self.describe_client_quotas)
        registry.register(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1, self.alter_client_quotas)

    async def describe_client_quotas(self, ctx: RequestContext):
        if (refused := self.authorization.cluster(ctx, AclOperation.DESCRIBE_CONFIGS)) is not None:
            return refused
        req = ctx.request
        try:
            exact, specified = parse_filter(req.components, bool(req.strict))
        except KafkaError as e:
            return build_response(ctx, {"throttle_time_ms": 0, "error_code": e.code, "error_message": e.message,
                                        "entries": None})
        entries = []
        for path, values in sorted(self.controller.image.client_quotas.items()):
            entity = _entity_of(path)
            if values and matches(entity, exact, specified, bool(req.strict)):
                entries.append({
                    "entity": [{"entity_type": k, "entity_name": n} for k, n in entity.items()],
                    "values": [{"key": k, "value": float(v)} for k, v in sorted(values.items())]})
        return build_response(ctx, {"throttle_time_ms": 0, "error_code": NO_ERROR, "error_message": None,
                                    "entries": entries})

    async def alter_client_quotas(self, ctx: RequestContext):
        """One answer per distinct entity, as Kafka's controller keys its results by entity: an entity named again
        is answered "Ignoring duplicate entity" (so is one whose ops repeat a key, Kafka's quirk)."""
        if (refused := self.authorization.cluster(ctx, AclOperation.ALTER_CONFIGS)) is not None:
            return refused
        req = ctx.request
        results: dict[tuple, dict] = {}
        changes: dict[str, dict[str, float | None]] = {}
        for e in req.entries:
            named = {c.entity_type: c.entity_name for c in e.entity}  # Kafka's entity is a map of its components
            key = tuple(sorted(named.items(), key=lambda kv: kv[0]))
            ops: dict[str, float | None] = {}
            for op in e.ops:
                if op.key in ops:
                    results[key] = _failed(named, f"Duplicate quota key {op.key} not updating quota for this entity "
                                                  f"{_entity_text(named)}")
                else:
                    ops[op.key] = None if op.remove else float(op.value)
            if key in results:
                results[key] = _failed(named, f"Ignoring duplicate entity {_entity_text(named)}")
                continue
            try:
                entity = validate_entity(named)
                types = _IP_TYPES if IP in entity else _QUOTA_TYPES
                for k, value in ops.items():
                    if value is not None:
                        validate_value(types, k, value)
                if IP in entity:  # stored and described (ips/<ip>), not enforced
                    path = "ips/" + (DEFAULT if entity[IP] is None else sanitize(entity[IP]))
                else:
                    user, client = entity.get(USER), entity.get(CLIENT_ID)
                    path = entity_path(user, client, default_user=USER in entity and user is None,
                                       default_client=CLIENT_ID in entity and client is None)
                changes[path] = ops
                results[key] = {"error_code": NO_ERROR, "error_message": None, "entity": _components(named)}
            except KafkaError as err:
                results[key] = _failed(named, err.message, err.code)
        if changes:
            try:
                await self.controller.call(self.controller.alter_client_quotas, changes, bool(req.validate_only))
            except KafkaError as err:
                for item in results.values():
                    if item["error_code"] == NO_ERROR:
                        item["error_code"], item["error_message"] = err.code, err.message
        return build_response(ctx, {"throttle_time_ms": 0, "entries": list(results.values())})


def _components(named: dict) -> list[dict]:
    return [{"entity_type": k, "entity_name": v} for k, v in named.items()]


def _failed(named: dict, message: str, code: int = InvalidRequestError.code) -> dict:
    return {"error_code": code, "error_message": message, "entity": _components(named)}


def _entity_text(named: dict) -> str:
    """ClientQuotaEntity's toString: its map in Java's HashMap order (client-id, then user)."""
    order = {CLIENT_ID: 0, USER: 1}
    items = sorted(named.items(), key=lambda kv: (order.get(kv[0], 2), kv[0]))
    return "ClientQuotaEntity(entries={" + ", ".join(f"{k}={'null' if v is None else v}" for k, v in items) + "})"


__all__ = ["ClientQuotaApis", "matches", "parse_filter", "validate_entity", "validate_value"]
