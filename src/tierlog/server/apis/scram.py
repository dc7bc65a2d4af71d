"""AlterUserScramCredentials (v0) and DescribeUserScramCredentials (v0), Kafka's KIP-554.

The client salts and hashes the password (kafka-configs --add-config 'SCRAM-SHA-256=[password=...]' sends the
salt, the iteration count and SaltedPassword); the broker derives StoredKey and ServerKey and keeps those
(:meth:`Controller.alter_user_scram`), never the password. The checks and messages are Kafka's: a
mechanism it does not know, an empty user name, fewer than 4096 or more than 16384 iterations, the same
user twice in one request, deleting a credential that does not exist.
"""

from __future__ import annotations

from collections import Counter

from tierlog.cluster import Controller
from tierlog.cluster.acls import AclOperation
from tierlog.errors import (
    DuplicateResourceError,
    ResourceNotFoundError,
    UnacceptableCredentialError,
    UnsupportedSaslMechanismError,
)
from tierlog.protocol import ApiKey, RequestContext, build_response
from tierlog.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_BY_TYPE,
    MECHANISMS,
    ScramCredential,
    credential_from_salted,
)
from tierlog.server.apis.authorization import ALLOW_ALL, ApiAuthorization


class ScramApis:
    def __init__(self, controller: Controller, *, authorization: ApiAuthorization = ALLOW_ALL):
        self.controller = controller
        self.authorization = authorization

    def register(self, registry) -> None:
        registry.register(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, self.describe)
        registry.register(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, 0, self.alter)

    async def describe(self, ctx: RequestContext):
        if (refused := self.authorization.cluster(ctx, AclOperation.DESCRIBE)) is not None:
            return refused
        stored = self.controller.image.user_scram
        users = ctx.request.users
        results = []
        if users is None or len(users) == 0:  # every user with a credential
            names = sorted(stored)
            counts: Counter = Counter()
        else:
            names = [u.name for u in users]
            counts = Counter(names)
        seen = set()
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            if counts[name] > 1:
                results.append({"user": name, "error_code": DuplicateResourceError.code,
                                "error_message": f"Cannot describe SCRAM credentials for the same user twice in a "
                                                 f"single request: {name}"})
                continue
            creds = stored.get(name)
            if not creds:
                results.append({"user": name, "error_code": ResourceNotFoundError.code,
                                "error_message": f"Attempt to describe a user credential that does not exist: {name}"})
                continue
            infos = [{"mechanism": MECHANISMS[m][1], "iterations": ScramCredential.from_text(t).iterations}
                     for m, t in sorted(creds.items()) if m in MECHANISMS]
            results.append({"user": name, "credential_infos": infos})
        return build_response(ctx, {"throttle_time_ms": 0, "results": results})

    async def alter(self, ctx: RequestContext):
        if (refused := self.authorization.cluster(ctx, AclOperation.ALTER)) is not None:
            return refused
        req = ctx.request
        stored = self.controller.image.user_scram
        ops = [(d.name, d.mechanism, None) for d in req.deletions] + [(u.name, u.mechanism, u) for u in req.upsertions]
        per_user = Counter(name for name, _, _ in ops)
        errors: dict[str, tuple[int, str]] = {}
        changes: dict[tuple[str, str], str | None] = {}
        for name, mech_type, upsert in ops:
            if name in errors:
                continue
            mechanism = MECHANISM_BY_TYPE.get(mech_type)
            if not name:
                errors[name] = (UnacceptableCredentialError.code, "Username must not be empty")
            elif mechanism is None:
                errors[name] = (UnsupportedSaslMechanismError.code, "Unknown SCRAM mechanism")
            elif per_user[name] > 1 and len({m for n, m, _ in ops if n == name}) < per_user[name]:
                errors[name] = (DuplicateResourceError.code,
                                "A user credential cannot be altered twice in the same request")
            elif upsert is None:
                if mechanism not in stored.get(name, {}):
                    errors[name] = (ResourceNotFoundError.code,
                                    "Attempt to delete a user credential that does not exist")
                else:
                    changes[(name, mechanism)] = None
            elif upsert.iterations < MECHANISMS[mechanism][2]:
                errors[name] = (UnacceptableCredentialError.code, "Too few iterations")
            elif upsert.iterations > MAX_ITERATIONS:
                errors[name] = (UnacceptableCredentialError.code, "Too many iterations")
            elif not upsert.salt or not upsert.salted_password:
                errors[name] = (UnacceptableCredentialError.code, "Credential must have a salt and a salted password")
            else:
                cred = credential_from_salted(mechanism, bytes(upsert.salted_password), bytes(upsert.salt),
                                              upsert.iterations)
                changes[(name, mechanism)] = cred.to_text()
        changes = {k: v for k, v in changes.items() if k[0] not in errors}
        if changes:
            self.controller.alter_user_scram(changes)
        results = []
        for name in dict.fromkeys(n for n, _, _ in ops):
            code, message = errors.get(name, (0, None))
            results.append({"user": name, "error_code": code, "error_message": message})
        return build_response(ctx, {"throttle_time_ms": 0, "results": results})


__all__ = ["ScramApis"]
