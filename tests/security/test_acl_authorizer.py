"""The authorizer's decisions (Kafka's ACL semantics) and the ACL model's filters and ZooKeeper forms."""

from __future__ import annotations

import pytest

from tierlog.cluster import acls
from tierlog.cluster.acls import AclBinding, AclBindingFilter
from tierlog.cluster.acls import AclOperation as Op
from tierlog.cluster.acls import PatternType as Pt
from tierlog.cluster.acls import PermissionType as Perm
from tierlog.cluster.acls import ResourceType as Rt
from tierlog.security.principal import KafkaPrincipal
from tierlog.security.session import Session
from tierlog.server.authorizer import Authorizer


def user(name: str, host: str = "") -> Session:
    return Session(principal=KafkaPrincipal("User", name), client_host=host)


ALICE = user("alice", "10.0.0.1")
BOB = user("bob", "10.0.0.2")


def acl(rt, name, op, perm=Perm.ALLOW, principal="User:alice", host="*", pattern=Pt.LITERAL) -> AclBinding:
    return AclBinding(rt, name, pattern, principal, host, op, perm)


class Box:
    """The image's ACL tuple, replaced (a new object) on every change, as the controller does."""

    def __init__(self, *bindings):
        self.acls = acls.add_bindings((), bindings)

    def add(self, *bindings):
        self.acls = acls.add_bindings(self.acls, bindings)


def authorizer(*bindings, super_users="", allow_if_none=False) -> tuple[Authorizer, Box]:
    box = Box(*bindings)
    return Authorizer(lambda: box.acls, super_users, allow_if_none), box


def test_literal_allow_applies_to_its_name_only():
    a, _ = authorizer(acl(Rt.TOPIC, "orders", Op.READ))
    assert a.authorize(ALICE, Op.READ, Rt.TOPIC, "orders")
    assert not a.authorize(ALICE, Op.READ, Rt.TOPIC, "orders2")
    assert not a.authorize(BOB, Op.READ, Rt.TOPIC, "orders")
    assert not a.authorize(ALICE, Op.WRITE, Rt.TOPIC, "orders")
    assert not a.authorize(ALICE, Op.READ, Rt.GROUP, "orders")  # another resource type


def test_prefixed_and_wildcard_patterns():
    a, _ = authorizer(acl(Rt.TOPIC, "pay-", Op.WRITE, pattern=Pt.PREFIXED), acl(Rt.GROUP, "*", Op.READ))
    assert a.authorize(ALICE, Op.WRITE, Rt.TOPIC, "pay-eu")
    assert a.authorize(ALICE, Op.WRITE, Rt.TOPIC, "pay-")
    assert not a.authorize(ALICE, Op.WRITE, Rt.TOPIC, "pa")
    assert a.authorize(ALICE, Op.READ, Rt.GROUP, "any-group")


def test_deny_wins_over_allow_and_all():
    a, _ = authorizer(acl(Rt.TOPIC, "*", Op.ALL), acl(Rt.TOPIC, "secret", Op.READ, Perm.DENY))
    assert a.authorize(ALICE, Op.READ, Rt.TOPIC, "public")
    assert not a.authorize(ALICE, Op.READ, Rt.TOPIC, "secret")
    assert a.authorize(ALICE, Op.WRITE, Rt.TOPIC, "secret")  # the deny names READ only
    # a DENY READ does not deny DESCRIBE, which ALL still grants
    assert a.authorize(ALICE, Op.DESCRIBE, Rt.TOPIC, "secret")
    a2, _ = authorizer(acl(Rt.TOPIC, "t", Op.READ), acl(Rt.TOPIC, "t", Op.ALL, Perm.DENY, principal="User:*"))
    assert not a2.authorize(ALICE, Op.READ, Rt.TOPIC, "t")


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER])
def test_describe_is_implied(granted):
    a, _ = authorizer(acl(Rt.TOPIC, "t", granted))
    assert a.authorize(ALICE, Op.DESCRIBE, Rt.TOPIC, "t")
    assert not a.authorize(ALICE, Op.DESCRIBE_CONFIGS, Rt.TOPIC, "t")


def test_describe_configs_implied_by_alter_configs_only():
    a, _ = authorizer(acl(Rt.TOPIC, "t", Op.ALTER_CONFIGS))
    assert a.authorize(ALICE, Op.DESCRIBE_CONFIGS, Rt.TOPIC, "t")
    assert not a.authorize(ALICE, Op.DESCRIBE, Rt.TOPIC, "t")
    b, _ = authorizer(acl(Rt.TOPIC, "t", Op.DESCRIBE))
    assert not b.authorize(ALICE, Op.READ, Rt.TOPIC, "t")  # implication goes one way


def test_host_matching():
    a, _ = authorizer(acl(Rt.TOPIC, "t", Op.READ, host="10.0.0.1"))
    assert a.authorize(ALICE, Op.READ, Rt.TOPIC, "t")
    assert not a.authorize(user("alice", "10.0.0.9"), Op.READ, Rt.TOPIC, "t")


def test_wildcard_principal():
    a, _ = authorizer(acl(Rt.GROUP, "g", Op.READ, principal="User:*"))
    assert a.authorize(BOB, Op.READ, Rt.GROUP, "g")


def test_super_users_and_no_acl_found():
    a, _ = authorizer(acl(Rt.TOPIC, "t", Op.READ, Perm.DENY, principal="User:admin"), super_users="User:admin;User:x")
    assert a.authorize(user("admin"), Op.READ, Rt.TOPIC, "t")  # a super user ignores even a DENY
    assert not a.authorize(ALICE, Op.READ, Rt.TOPIC, "other")  # no ACL: refused (Kafka's default)
    open_, _ = authorizer(acl(Rt.TOPIC, "t", Op.READ), allow_if_none=True)
    assert open_.authorize(BOB, Op.WRITE, Rt.TOPIC, "nothing-here")
    assert not open_.authorize(BOB, Op.READ, Rt.TOPIC, "t")  # an ACL exists for t: only it decides


def test_cache_follows_acl_changes():
    a, box = authorizer()
    assert not a.authorize(ALICE, Op.READ, Rt.TOPIC, "t")
    box.add(acl(Rt.TOPIC, "t", Op.READ))
    assert a.authorize(ALICE, Op.READ, Rt.TOPIC, "t")
    box.add(acl(Rt.TOPIC, "t", Op.READ, Perm.DENY))
    assert not a.authorize(ALICE, Op.READ, Rt.TOPIC, "t")


def test_write_on_any_topic_for_idempotent_producers():
    a, _ = authorizer(acl(Rt.TOPIC, "pay-", Op.WRITE, pattern=Pt.PREFIXED))
    assert a.authorize_any(ALICE, Op.WRITE, Rt.TOPIC)
    assert not a.authorize_any(BOB, Op.WRITE, Rt.TOPIC)
    denied, _ = authorizer(acl(Rt.TOPIC, "pay-", Op.WRITE, pattern=Pt.PREFIXED),
                           acl(Rt.TOPIC, "*", Op.WRITE, Perm.DENY))
    assert not denied.authorize_any(ALICE, Op.WRITE, Rt.TOPIC)


def test_filters_match_as_kafka():
    lit = acl(Rt.TOPIC, "foo", Op.READ)
    wild = acl(Rt.TOPIC, "*", Op.READ)
    pre = acl(Rt.TOPIC, "fo", Op.READ, pattern=Pt.PREFIXED)
    other = acl(Rt.TOPIC, "bar", Op.READ)

    def matching(f):
        return [b for b in (lit, wild, pre, other) if f.matches(b)]
    match = AclBindingFilter(Rt.TOPIC, "foo", Pt.MATCH, None, None, Op.ANY, Perm.ANY)
    assert matching(match) == [lit, wild, pre]
    anyp = AclBindingFilter(Rt.ANY, None, Pt.ANY, None, None, Op.ANY, Perm.ANY)
    assert matching(anyp) == [lit, wild, pre, other]
    literal = AclBindingFilter(Rt.TOPIC, "foo", Pt.LITERAL, "User:alice", "*", Op.READ, Perm.ALLOW)
    assert matching(literal) == [lit]
    assert AclBindingFilter(Rt.TOPIC, None, Pt.UNKNOWN, None, None, Op.ANY, Perm.ANY).unknown_field() == \
        "pattern type"


def test_binding_problems_with_kafkas_messages():
    assert acls.binding_problem(acl(Rt.CLUSTER, "x", Op.ALTER)) == \
        "The only valid name for the CLUSTER resource is kafka-cluster"
    assert acls.binding_problem(acl(Rt.TOPIC, "", Op.READ)) == "Invalid empty resource name"
    assert acls.binding_problem(acl(Rt.CLUSTER, "kafka-cluster", Op.ALTER)) is None


def test_zookeeper_forms_round_trip():
    bindings = [acl(Rt.TOPIC, "t", Op.READ), acl(Rt.TOPIC, "t", Op.DESCRIBE_CONFIGS, Perm.DENY, host="1.2.3.4")]
    data = acls.resource_entry_json(bindings)
    assert data.startswith(b'{"version":1,"acls":[')
    assert b'"operation":"DescribeConfigs"' in data and b'"permissionType":"Deny"' in data
    assert sorted(acls.parse_resource_entry("Topic", Pt.LITERAL, "t", data), key=AclBinding.sort_key) == \
        sorted(bindings, key=AclBinding.sort_key)
    assert acls.znode_path(Rt.TRANSACTIONAL_ID, Pt.PREFIXED, "tx-") == \
        "/kafka-acl-extended/prefixed/TransactionalId/tx-"
    assert acls.change_notification(Rt.GROUP, Pt.LITERAL, "g") == ("/kafka-acl-changes", b"Group:g")
