"""Kafka's ACL model: resource patterns, access control entries, bindings and filters, and their forms.

An ACL binding is a resource pattern (resource type, name, LITERAL or PREFIXED) with an entry (principal,
host, operation, ALLOW or DENY). Bindings live in the cluster metadata image (``MetadataImage.acls``), so a
single node persists them with its topics and the ZooKeeper-mode controller writes them under Kafka's znodes
(``/kafka-acl/<Type>/<name>`` for literal patterns, ``/kafka-acl-extended/prefixed/<Type>/<name>`` for
prefixed ones, with change notifications) and pushes them to every broker with the rest of the image. The
codes are Kafka's wire codes; the names in ZooKeeper's JSON are Kafka's (``Read``, ``Allow``, ``Topic``).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from dataclasses import dataclass

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"  # a literal resource name or host matching every one
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Names as Kafka's ZooKeeper JSON and paths spell them.
_TYPE_NAMES = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
               ResourceType.TRANSACTIONAL_ID: "TransactionalId", ResourceType.DELEGATION_TOKEN: "DelegationToken",
               ResourceType.USER: "User"}
_TYPES_BY_NAME = {v: k for k, v in _TYPE_NAMES.items()}
_OP_NAMES = {op: "".join(w.capitalize() for w in op.name.split("_")) for op in AclOperation
             if op not in (AclOperation.UNKNOWN, AclOperation.ANY)}
_OPS_BY_NAME = {v: k for k, v in _OP_NAMES.items()}
_PERM_NAMES = {PermissionType.ALLOW: "Allow", PermissionType.DENY: "Deny"}
_PERMS_BY_NAME = {v: k for k, v in _PERM_NAMES.items()}

#: The operations Kafka lets an ACL name for each resource type (AclEntry.supportedOperations).
SUPPORTED_OPERATIONS: dict[ResourceType, frozenset[AclOperation]] = {
    ResourceType.TOPIC: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                                   AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                                   AclOperation.ALTER_CONFIGS}),
    ResourceType.GROUP: frozenset({AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                                   AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}),
    ResourceType.CLUSTER: frozenset({AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                                     AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                                     AclOperation.DESCRIBE}),
    ResourceType.TRANSACTIONAL_ID: frozenset({AclOperation.DESCRIBE, AclOperation.WRITE}),
    ResourceType.DELEGATION_TOKEN: frozenset({AclOperation.DESCRIBE}),
    ResourceType.USER: frozenset({AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS}),
}


def operations_bitfield(resource_type: ResourceType, allowed) -> int:
    """Kafka's authorized-operations bit field: bit ``op`` set for each supported operation ``allowed(op)``."""
    return sum(1 << op for op in SUPPORTED_OPERATIONS[resource_type] if allowed(op))


@dataclass(frozen=True, slots=True)
class AclBinding:
    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType  # LITERAL or PREFIXED
    principal: str
    host: str
    operation: AclOperation
    permission_type: PermissionType  # ALLOW or DENY

    def to_json(self) -> dict:
        return {"resourceType": self.resource_type.name, "name": self.resource_name,
                "patternType": self.pattern_type.name, "principal": self.principal, "host": self.host,
                "operation": self.operation.name, "permissionType": self.permission_type.name}

    @classmethod
    def from_json(cls, d: dict) -> AclBinding:
        return cls(ResourceType[d["resourceType"]], d["name"], PatternType[d["patternType"]], d["principal"],
                   d["host"], AclOperation[d["operation"]], PermissionType[d["permissionType"]])

    def sort_key(self) -> tuple:
        return (self.resource_type, self.pattern_type, self.resource_name, self.principal, self.host,
                self.operation, self.permission_type)


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A DescribeAcls/DeleteAcls filter: None matches any value of a field; ANY types match any type;
    MATCH finds the literal, wildcard and prefixed patterns that apply to one resource name."""

    resource_type: ResourceType
    resource_name: str | None
    pattern_type: PatternType
    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: PermissionType

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if not self._pattern_matches(b):
            return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != AclOperation.ANY and self.operation != b.operation:
            return False
        return self.permission_type == PermissionType.ANY or self.permission_type == b.permission_type

    def _pattern_matches(self, b: AclBinding) -> bool:
        pt, name = self.pattern_type, self.resource_name
        if pt == PatternType.MATCH:
            if name is None:
                return True
            if b.pattern_type == PatternType.LITERAL:
                return b.resource_name == name or b.resource_name == WILDCARD
            return name.startswith(b.resource_name)
        if pt != PatternType.ANY and pt != b.pattern_type:
            return False
        return name is None or name == b.resource_name

    def unknown_field(self) -> str | None:
        """Which field of the filter is UNKNOWN (Kafka refuses such a filter), or None."""
        for field, value in (("resource type", self.resource_type), ("pattern type", self.pattern_type),
                             ("operation", self.operation), ("permission type", self.permission_type)):
            if value == 0:
                return field
        return None


def binding_problem(b: AclBinding) -> str | None:
    """Why a binding cannot be created (Kafka's messages), or None."""
    if b.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY) or b.pattern_type not in (
            PatternType.LITERAL, PatternType.PREFIXED) or b.operation in (AclOperation.UNKNOWN, AclOperation.ANY) \
            or b.permission_type not in (PermissionType.ALLOW, PermissionType.DENY):
        return f"Invalid ACL creation: {describe(b)}"
    if b.resource_type == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not b.resource_name:
        return "Invalid empty resource name"
    if b.pattern_type == PatternType.PREFIXED and b.resource_name == WILDCARD:
        return f"Invalid ACL creation: {describe(b)}"
    if ":" not in b.principal:
        return f"Could not parse principal from `{b.principal}` (no colon is present separating the principal " \
               f"type from the principal name)"
    return None


def describe(b: AclBinding) -> str:
    return (f"(pattern=ResourcePattern(resourceType={b.resource_type.name}, name={b.resource_name}, "
            f"patternType={b.pattern_type.name}), entry=(principal={b.principal}, host={b.host}, "
            f"operation={b.operation.name}, permissionType={b.permission_type.name}))")


def add_bindings(current: tuple[AclBinding, ...], new: Iterable[AclBinding]) -> tuple[AclBinding, ...]:
    """``current`` with ``new`` added (adding an existing binding changes nothing, as in Kafka)."""
    out = dict.fromkeys(current)
    out.update(dict.fromkeys(new))
    return tuple(sorted(out, key=AclBinding.sort_key))


# ---------------------------------------------------------------------- Kafka's ZooKeeper layout

ACL_ROOT = "/kafka-acl"  # literal patterns (and the legacy notifications below)
ACL_EXTENDED_ROOT = "/kafka-acl-extended/prefixed"
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"


def znode_path(resource_type: ResourceType, pattern_type: PatternType, name: str) -> str:
    root = ACL_ROOT if pattern_type == PatternType.LITERAL else ACL_EXTENDED_ROOT
    return f"{root}/{_TYPE_NAMES[resource_type]}/{name}"


def resource_entry_json(bindings: Iterable[AclBinding]) -> bytes:
    """The znode of one resource pattern: Kafka's ``{"version":1,"acls":[...]}``."""
    acls = [{"principal": b.principal, "permissionType": _PERM_NAMES[b.permission_type],
             "operation": _OP_NAMES[b.operation], "host": b.host}
            for b in sorted(bindings, key=AclBinding.sort_key)]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def parse_resource_entry(resource_type_name: str, pattern_type: PatternType, name: str,
                         data: bytes) -> list[AclBinding]:
    """The bindings of one resource znode (what Kafka or tierlog wrote); unknown names are skipped."""
    rt = _TYPES_BY_NAME.get(resource_type_name)
    if rt is None or not data:
        return []
    out = []
    for a in json.loads(data).get("acls", ()):
        op, perm = _OPS_BY_NAME.get(a.get("operation")), _PERMS_BY_NAME.get(a.get("permissionType"))
        if op is not None and perm is not None:
            out.append(AclBinding(rt, name, pattern_type, a["principal"], a.get("host", WILDCARD), op, perm))
    return out


def change_notification(resource_type: ResourceType, pattern_type: PatternType, name: str) -> tuple[str, bytes]:
    """(parent znode, data) of the change notification Kafka writes for a changed resource pattern."""
    if pattern_type == PatternType.LITERAL:
        return ACL_CHANGES, f"{_TYPE_NAMES[resource_type]}:{name}".encode()
    return ACL_EXTENDED_CHANGES, json.dumps({"version": 1, "resourceType": _TYPE_NAMES[resource_type], "name": name,
                                             "patternType": pattern_type.name}, separators=(",", ":")).encode()


def resource_type_names() -> tuple[str, ...]:
    return tuple(_TYPE_NAMES.values())
