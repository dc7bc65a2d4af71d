"""ACL helpers of the security tests: clients bound to a source address, bindings, grants and revokes."""

from __future__ import annotations

import socket

from tests.harness.rawclient import RawClient
from tests.harness.waiting import wait_until
from tierlog.protocol import ApiKey

LITERAL = 3


ALLOW = 3


def client_from(bootstrap: str, source: str) -> RawClient:
    host, port = bootstrap.rsplit(":", 1)
    c = RawClient.__new__(RawClient)
    c.sock = socket.create_connection((host, int(port)), timeout=30, source_address=(source, 0))
    c.correlation_id = 0
    return c


def binding(rt: int, name: str, op: int, host: str) -> dict:
    return {"resource_type": rt, "resource_name": name, "resource_pattern_type": LITERAL,
            "principal": "User:ANONYMOUS", "host": host, "operation": op, "permission_type": ALLOW}


def _filter(b: dict) -> dict:
    return {"resource_type_filter": b["resource_type"], "resource_name_filter": b["resource_name"],
            "pattern_type_filter": b["resource_pattern_type"], "principal_filter": b["principal"],
            "host_filter": b["host"],
            "operation": b["operation"], "permission_type": b["permission_type"]}


def _described(admin: RawClient, b: dict) -> bool:
    resp = admin.request(ApiKey.DESCRIBE_ACLS, 3, _filter(b))
    assert resp.error_code == 0, resp
    return any(r.acls for r in resp.resources)


def _wait_acl(admin: RawClient, b: dict, present: bool) -> None:
    """Until the broker's authorizer has (or no longer has) the binding: Kafka applies ACLs through its
    metadata log, after CreateAcls answered."""
    wait_until(lambda: _described(admin, b) == present, 30, interval=0.1,
               what=f"ACL {b} {'present' if present else 'gone'}")


def grant(admin: RawClient, *bindings: dict) -> None:
    resp = admin.request(ApiKey.CREATE_ACLS, 3, {"creations": list(bindings)})
    assert [r.error_code for r in resp.results] == [0] * len(bindings), resp
    for b in bindings:
        _wait_acl(admin, b, True)


def revoke(admin: RawClient, *bindings: dict) -> None:
    resp = admin.request(ApiKey.DELETE_ACLS, 3, {"filters": [_filter(b) for b in bindings]})
    assert all(r.error_code == 0 for r in resp.filter_results), resp
    for b in bindings:
        _wait_acl(admin, b, False)
