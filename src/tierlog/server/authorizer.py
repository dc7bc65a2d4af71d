"""The authorizer: Kafka's ACL decisions (AclAuthorizer / StandardAuthorizer semantics) over the image's ACLs.

Built only when ``authorizer.class.name`` names one of Kafka's authorizers; without it the API families
hold ``authorizer = None`` and check nothing. A decision, for a principal connected from a host, asking an
operation on a resource:

1. a super user (``super.users``) may do everything;
2. the ACLs of the resource are the literal ones of its name, the literal ``*`` of its type and the
   prefixed ones whose prefix starts its name; with none, ``allow.everyone.if.no.acl.found`` decides;
3. a DENY of the principal (or ``User:*``), from the host (or ``*``), for the operation (or ALL) refuses;
4. else an ALLOW so matching allows, where READ, WRITE, DELETE and ALTER imply DESCRIBE and ALTER_CONFIGS
   implies DESCRIBE_CONFIGS (an allowed operation implies the lesser one; a denied one does not deny it).

The principal and host are the request's :class:`~tierlog.security.session.Session`'s (``acl_principal``,
``client_host``). Decisions are cached per (principal, host, operation, resource type, name); the cache is
dropped whenever the image's ACL tuple changes (a new ACL, on any broker of a cluster, arrives as a new image).
"""

from __future__ import annotations

from collections.abc import Callable

from tierlog.cluster.acls import (
    CLUSTER_NAME,
    WILDCARD,
    WILDCARD_PRINCIPAL,
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from tierlog.security.session import ANONYMOUS_SESSION, Session

CACHE_LIMIT = 100_000  # decisions kept before the cache starts over

_IMPLIED_BY = {  # operation asked -> the allowed operations that grant it
    AclOperation.DESCRIBE: frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                                      AclOperation.DELETE, AclOperation.ALTER, AclOperation.ALL}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                                              AclOperation.ALL}),
}


def parse_super_users(value: str | None) -> frozenset[str]:
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


class Authorizer:
    def __init__(self, acls: Callable[[], tuple[AclBinding, ...]], super_users: str | None = "",
                 allow_everyone_if_no_acl_found: bool = False):
        """``acls()`` gives the current bindings (the metadata image's)."""
        self._acls_source = acls
        self.super_users = parse_super_users(super_users)
        self.allow_if_no_acl = allow_everyone_if_no_acl_found
        self._seen: tuple[AclBinding, ...] | None = None
        self._by_type: dict[ResourceType, list[AclBinding]] = {}
        self._cache: dict[tuple, bool] = {}

    def _current(self) -> dict[ResourceType, list[AclBinding]]:
        acls = self._acls_source()
        if acls is not self._seen:
            self._seen = acls
            self._cache = {}
            by_type: dict[ResourceType, list[AclBinding]] = {}
            for b in acls:
                by_type.setdefault(b.resource_type, []).append(b)
            self._by_type = by_type
        return self._by_type

    def authorize(self, session: Session | None, op: AclOperation, resource_type: ResourceType,
                  name: str = CLUSTER_NAME) -> bool:
        s = session if session is not None else ANONYMOUS_SESSION
        by_type = self._current()
        key = (s.acl_principal, s.client_host, op, resource_type, name)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        decision = self._decide(s.acl_principal, s.client_host, op, by_type.get(resource_type, ()), name)
        if len(self._cache) >= CACHE_LIMIT:
            self._cache = {}
        self._cache[key] = decision
        return decision

    def _decide(self, principal: str, host: str, op: AclOperation, acls, name: str) -> bool:
        if principal in self.super_users:
            return True
        matching = [b for b in acls if _pattern_applies(b, name)]
        if not matching:
            return self.allow_if_no_acl
        applies = [b for b in matching if _entry_applies(b, principal, host)]
        if any(b.permission_type == PermissionType.DENY and b.operation in (op, AclOperation.ALL) for b in applies):
            return False
        granting = _IMPLIED_BY.get(op) or (op, AclOperation.ALL)
        return any(b.permission_type == PermissionType.ALLOW and b.operation in granting for b in applies)

    def authorize_any(self, session: Session | None, op: AclOperation, resource_type: ResourceType) -> bool:
        """Kafka's authorizeByResourceType: may the principal do ``op`` on some resource of the type (an ALLOW
        of any pattern, not undone by a DENY of the whole type)? Used for IDEMPOTENT_WRITE's "WRITE on any
        topic" rule."""
        s = session if session is not None else ANONYMOUS_SESSION
        if s.acl_principal in self.super_users:
            return True
        acls = self._current().get(resource_type, ())
        if not acls:
            return self.allow_if_no_acl
        applies = [b for b in acls if _entry_applies(b, s.acl_principal, s.client_host)
                   and b.operation in (op, AclOperation.ALL)]
        if any(b.permission_type == PermissionType.DENY and b.pattern_type == PatternType.LITERAL
               and b.resource_name == WILDCARD for b in applies):
            return False
        return any(b.permission_type == PermissionType.ALLOW for b in applies)


def _pattern_applies(b: AclBinding, name: str) -> bool:
    if b.pattern_type == PatternType.LITERAL:
        return b.resource_name == name or b.resource_name == WILDCARD
    return name.startswith(b.resource_name)


def _entry_applies(b: AclBinding, principal: str, host: str) -> bool:
    return (b.principal == principal or b.principal == WILDCARD_PRINCIPAL) and (b.host == WILDCARD or b.host == host)


__all__ = ["Authorizer", "parse_super_users"]
