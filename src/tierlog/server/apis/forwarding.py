"""Requests only the controller can carry out, forwarded to it from any broker (Kafka's Envelope).

In a cluster, a client may send CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
IncrementalAlterConfigs, ElectLeaders, AlterPartitionReassignments, ListPartitionReassignments or
AlterClientQuotas, CreateAcls, DeleteAcls, AlterUserScramCredentials or UpdateFeatures to any broker
(Kafka's tools send configs to any broker). A broker that is not the active controller wraps the request,
header and body as the client sent them, in an Envelope to the controller's inter-broker listener, and answers
the client with the controller's answer, unchanged.
The controller runs the ordinary handler. With no controller known, or when the controller moved
meanwhile, every item of the answer carries NOT_CONTROLLER, which clients retry.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import struct
import time

from tierlog.cluster.acls import AclOperation, ResourceType
from tierlog.cluster.channel import NetworkBrokerChannel
from tierlog.cluster.zk_controller import ZkController
from tierlog.errors import (
    ClusterAuthorizationFailedError,
    InvalidRequestError,
    KafkaError,
    NotControllerError,
    error_for_code,
)
from tierlog.protocol import ApiKey, RequestContext, build_response, encode_request, encode_response, offload
from tierlog.protocol.registry import Handler, HandlerRegistry
from tierlog.security import ANONYMOUS, KafkaPrincipal
from tierlog.security.session import ANONYMOUS_SESSION, Session
from tierlog.server.authorizer import Authorizer
from tierlog.server.errors import error_response

log = logging.getLogger(__name__)

CONTROLLER_APIS = (ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS, ApiKey.CREATE_PARTITIONS, ApiKey.ALTER_CONFIGS,
                   ApiKey.INCREMENTAL_ALTER_CONFIGS, ApiKey.ELECT_LEADERS, ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                   ApiKey.LIST_PARTITION_REASSIGNMENTS, ApiKey.ALTER_CLIENT_QUOTAS, ApiKey.CREATE_ACLS,
                   ApiKey.DELETE_ACLS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.UPDATE_FEATURES)
#: How long a broker waits for a controller to be known before answering NOT_CONTROLLER.
CONTROLLER_WAIT_S = 5.0
_SIZE = struct.Struct(">i")


def not_controller_response(ctx: RequestContext, message: str):
    """The request's answer with NOT_CONTROLLER on every item (Kafka's getErrorResponse)."""
    code = NotControllerError.code
    req = ctx.request
    if ctx.api_key == ApiKey.CREATE_TOPICS:
        return build_response(ctx, {"topics": [{"name": t.name, "error_code": code, "error_message": message}
                                               for t in req.topics]})
    if ctx.api_key == ApiKey.DELETE_TOPICS:
        names = [(n, None) for n in getattr(req, "topic_names", ()) or ()]
        names += [(t.name, t.topic_id) for t in getattr(req, "topics", ()) or ()]
        return build_response(ctx, {"responses": [{"name": n, **({"topic_id": i} if i is not None else {}),
                                                   "error_code": code, "error_message": message}
                                                  for n, i in names]})
    if ctx.api_key == ApiKey.CREATE_PARTITIONS:
        return build_response(ctx, {"results": [{"name": t.name, "error_code": code, "error_message": message}
                                                for t in req.topics]})
    if ctx.api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        return build_response(ctx, {"responses": [{"resource_type": r.resource_type, "resource_name": r.resource_name,
                                                   "error_code": code, "error_message": message}
                                                  for r in req.resources]})
    if ctx.api_key == ApiKey.ALTER_CLIENT_QUOTAS:
        return build_response(ctx, {"entries": [
            {"error_code": code, "error_message": message,
             "entity": [{"entity_type": c.entity_type, "entity_name": c.entity_name} for c in e.entity]}
            for e in req.entries]})
    if ctx.api_key == ApiKey.CREATE_ACLS:
        return build_response(ctx, {"results": [{"error_code": code, "error_message": message}
                                                for _ in req.creations]})
    if ctx.api_key == ApiKey.DELETE_ACLS:
        return build_response(ctx, {"filter_results": [{"error_code": code, "error_message": message,
                                                        "matching_acls": []} for _ in req.filters]})
    if ctx.api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        names = dict.fromkeys([d.name for d in req.deletions] + [u.name for u in req.upsertions])
        return build_response(ctx, {"results": [{"user": n, "error_code": code, "error_message": message}
                                                for n in names]})
    return error_response(ctx, NotControllerError(message))


def encode_principal(principal: KafkaPrincipal) -> bytes:
    """Kafka's DefaultPrincipalData v0 (the Envelope's request_principal): type, name, token flag."""
    out = bytearray(b"\x00\x00")
    for text in (principal.principal_type, principal.name):
        raw = text.encode()
        n = len(raw) + 1  # compact string: unsigned varint of length + 1
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        out.append(n)
        out += raw
    return bytes(out + b"\x00\x00")  # not token-authenticated, no tagged fields


def decode_principal(data: bytes | None) -> KafkaPrincipal:
    if not data or len(data) < 3:
        return ANONYMOUS
    pos, parts = 2, []
    try:
        for _ in range(2):
            n = shift = 0
            while True:
                b = data[pos]
                pos += 1
                n |= (b & 0x7F) << shift
                shift += 7
                if not b & 0x80:
                    break
            parts.append(data[pos:pos + n - 1].decode())
            pos += n - 1
    except (IndexError, UnicodeDecodeError):
        return ANONYMOUS
    return KafkaPrincipal(parts[0], parts[1])


class ForwardingApis:
    """Wraps the controller APIs' handlers so a broker that is not the controller forwards them, and
    handles the Envelope a forwarding broker sends."""

    def __init__(self, controller: ZkController, channel: NetworkBrokerChannel, request_timeout_ms: int,
                 authorizer: Authorizer | None = None):
        self.controller = controller
        self.channel = channel
        self.request_timeout_ms = request_timeout_ms
        self.authorizer = authorizer  # an Envelope needs CLUSTER_ACTION (only brokers forward)
        self._local: dict[int, Handler] = {}

    def register(self, registry: HandlerRegistry) -> None:
        for key in CONTROLLER_APIS:
            if key in registry:
                self._local[key] = registry.wrap(key, self._forwarding)
        registry.register(ApiKey.ENVELOPE, 0, 0, self.envelope)

    def _forwarding(self, local: Handler) -> Handler:
        async def handle(ctx: RequestContext):
            deadline = time.monotonic() + CONTROLLER_WAIT_S
            while True:
                if self.controller.is_active:
                    return await local(ctx)
                target = self.controller.image.controller_id
                # a controller this broker does not list yet (no endpoint): wait for the controller's push
                if target >= 0 and target != self.controller.node_id and target in self.controller.image.brokers:
                    try:
                        return await self._forward(ctx, target)
                    except NotControllerError:
                        pass  # it resigned meanwhile: wait for the next one
                    except (KafkaError, OSError) as e:
                        log.info("Forwarding %s to controller %d failed: %s", ctx.api_name, target, e)
                if time.monotonic() >= deadline:
                    return not_controller_response(ctx, "No controller is available now; try again.")
                await asyncio.sleep(0.1)
        return handle

    async def _forward(self, ctx: RequestContext, controller_id: int):
        inner = encode_request(ctx.request, ctx.correlation_id, ctx.client_id)[4:]
        session = ctx.session or ANONYMOUS_SESSION
        response = await self.channel.request(controller_id, ApiKey.ENVELOPE, {
            "request_data": inner, "request_principal": encode_principal(session.principal),
            "client_host_address": _address_bytes(session.client_host)},
            timeout_ms=self.request_timeout_ms)
        code = int(response.error_code)
        if code:
            raise error_for_code(code)(f"controller {controller_id} refused the forwarded {ctx.api_name}")
        data = response.response_data or b""
        return offload.EncodedResponse(_SIZE.pack(len(data)) + data)

    async def envelope(self, ctx: RequestContext):
        """A request forwarded by another broker: run the local handler, answer its encoded response."""
        if self.authorizer is not None and not self.authorizer.authorize(
                ctx.session, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER):
            return build_response(ctx, {"response_data": None, "error_code": ClusterAuthorizationFailedError.code})
        if not self.controller.is_active:
            return build_response(ctx, {"response_data": None, "error_code": NotControllerError.code})
        try:
            inner = await offload.parse(ctx.request.request_data)
        except Exception as e:  # noqa: BLE001 - a malformed inner request
            log.warning("Envelope with an unreadable request: %s", e)
            return build_response(ctx, {"response_data": None, "error_code": InvalidRequestError.code})
        # The client's principal and address as the forwarding broker saw them, on the listener (and its security
        # protocol) the Envelope came in on, as Kafka's forwarded RequestContext has them.
        envelope = ctx.session or ANONYMOUS_SESSION
        inner.session = Session(principal=decode_principal(ctx.request.request_principal),
                                client_host=_address_text(ctx.request.client_host_address),
                                listener=envelope.listener, security_protocol=envelope.security_protocol)
        inner.timing = ctx.timing
        local = self._local.get(inner.api_key)
        if local is None:
            return build_response(ctx, {"response_data": None, "error_code": InvalidRequestError.code})
        try:
            response = await local(inner)
        except KafkaError as e:
            response = error_response(inner, e) or not_controller_response(inner, str(e))
        frame = response.frame if isinstance(response, offload.EncodedResponse) else encode_response(inner, response)
        return build_response(ctx, {"response_data": bytes(frame[4:]), "error_code": 0})


def _address_bytes(host: str) -> bytes:
    try:
        return ipaddress.ip_address(host).packed
    except ValueError:
        return b"\x7f\x00\x00\x01"


def _address_text(data: bytes | None) -> str:
    try:
        return str(ipaddress.ip_address(bytes(data or b"")))
    except ValueError:
        return ""


__all__ = ["CONTROLLER_APIS", "ForwardingApis", "not_controller_response"]
