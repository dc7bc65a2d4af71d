"""Failures a user can cause, as the one line ``tierlog: error: <what>; <what to do>``.

Kafka errors are named by their code's name (TOPIC_ALREADY_EXISTS, NON_EMPTY_GROUP, ...) with advice
for the ones a person runs into; a broker that does not answer in time is named with its address and
the time waited. Anything else is a bug: one line naming it and pointing at ``--debug``.
"""

from __future__ import annotations

import argparse

from tierlog import errors
from tierlog.client.errors import BrokersUnavailableError, KafkaConnectionError, KafkaTimeoutError

#: What to do about a Kafka error a person can cause, by the error's name.
ADVICE = {
    "TOPIC_ALREADY_EXISTS": "choose another name, or add --if-not-exists",
    "UNKNOWN_TOPIC_OR_PARTITION": "check the name with `tierlog topic list`",
    "INVALID_TOPIC_EXCEPTION": "topic names are at most 249 characters of a-z, A-Z, 0-9, '.', '_' and '-'",
    "INVALID_CONFIG": "see docs/configuration.md for the topic settings and their allowed values",
    "INVALID_PARTITIONS": "give a larger partition count (partitions can be added, never removed)",
    "INVALID_REPLICATION_FACTOR": "a single broker holds one replica: use --replication-factor 1",
    "INVALID_REQUEST": "check the command's arguments with --help",
    "POLICY_VIOLATION": "the broker's policy refuses it; see its log",
    "NON_EMPTY_GROUP": "stop the group's consumers (or wait until their session times out) and run it again",
    "GROUP_ID_NOT_FOUND": "check the name with `tierlog group list`",
    "UNKNOWN_MEMBER_ID": "the group has members: stop its consumers first",
    "COORDINATOR_NOT_AVAILABLE": "the broker is still loading its groups: try again in a moment",
    "RECORD_LIST_TOO_LARGE": "send smaller records (one line per record), or raise max.request.size",
    "MESSAGE_TOO_LARGE": "send smaller records, or raise the topic's max.message.bytes",
    "UNSUPPORTED_VERSION": "the broker is too old for this request",
    "TOPIC_AUTHORIZATION_FAILED": "the broker refuses this client: check its ACLs",
    "GROUP_AUTHORIZATION_FAILED": "the broker refuses this client: check its ACLs",
    "CLUSTER_AUTHORIZATION_FAILED": "the broker refuses this client: check its ACLs",
    "SASL_AUTHENTICATION_FAILED": "check sasl.mechanism and the credentials (sasl.username and sasl.password, or "
                                  "sasl.jaas.config) given with --command-config or -X",
    "UNSUPPORTED_SASL_MECHANISM": "give a sasl.mechanism the listener enables (--command-config or -X)",
    "ILLEGAL_SASL_STATE": "the listener does not speak SASL this way: check security.protocol (--command-config or -X)",
}


class CliError(Exception):
    """A failure already phrased as ``<what>; <what to do>``."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _chain_text(exc: BaseException | None) -> str:
    seen, parts = set(), []
    while exc is not None and id(exc) not in seen:  # the last attempt's error may sit in the chain
        seen.add(id(exc))
        parts.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return " ".join(parts)


def _tls_failure(text: str) -> str | None:
    """The line for a TLS handshake that failed because of the broker's certificate, else None."""
    if "CERTIFICATE_VERIFY_FAILED" not in text and "certificate verify failed" not in text:
        return None
    why = "its certificate does not match the host name" if "Hostname mismatch" in text or "IP address mismatch" \
        in text else "its certificate is not signed by a trusted CA"
    return (f"TLS handshake failed: {why} (certificate verify failed); check ssl.truststore.location (or "
            "ssl.ca.location) names the CA that signed the broker's certificate, and "
            "ssl.endpoint.identification.algorithm")


def _cause(exc: BaseException | None) -> str:
    """Why a connection failed, in a few words, from the client's message."""
    first = exc
    text = _chain_text(exc)
    if "Connect call failed" in text or "Connection refused" in text or "Errno 111" in text:
        return "connection refused"
    if "Name or service not known" in text or "nodename nor servname" in text or "Errno -2" in text:
        return "unknown host"
    if "cannot connect" in text or isinstance(first, BrokersUnavailableError):
        return "cannot connect"
    return "no answer to requests"


def describe(exc: BaseException, args: argparse.Namespace) -> str:
    """The one line (after ``tierlog: error: ``) for a failure of a command."""
    if isinstance(exc, CliError):
        return _one_line(str(exc))
    bootstrap = getattr(args, "resolved_bootstrap", None)
    timeout = getattr(args, "resolved_timeout", None)
    if isinstance(exc, (KafkaTimeoutError, KafkaConnectionError)) and bootstrap:
        text = _chain_text(exc)
        tls = _tls_failure(text)
        if tls:
            return f"cannot connect to the broker at {bootstrap}: {tls}"
        client = getattr(args, "resolved_client_config", None) or {}
        protocol = str(client.get("security.protocol", "PLAINTEXT")).upper()
        has_certificate = any(k in client for k in ("ssl.keystore.location", "ssl.keystore.key"))
        if protocol in ("SSL", "SASL_SSL") and "closed the connection" in text and not has_certificate:
            # TLS 1.3: a listener that requires a client certificate closes the connection after the handshake
            return (f"the broker at {bootstrap} closed the TLS connection; if its listener requires client "
                    "certificates (ssl.client.auth=required), give one with ssl.keystore.location, or "
                    "ssl.certificate.location and ssl.key.location (--command-config or -X)")
        return (f"cannot reach the broker at {bootstrap} within {timeout:g} s ({_cause(exc)}); check that it "
                f"is running and that --bootstrap-server (or -c) names its listener, or raise --timeout")
    if isinstance(exc, errors.KafkaError):
        advice = ADVICE.get(exc.name)
        message = _one_line(exc.message.rstrip("."))
        if not message:
            message = exc.name
        elif exc.name not in message:
            message = f"{message} ({exc.name})"
        return f"{message}; {advice or 'run again with --debug for details'}"
    if isinstance(exc, ValueError):  # bad input found after parsing (an offset spec, a time)
        return _one_line(str(exc))
    if isinstance(exc, OSError):
        name = getattr(exc, "filename", None)
        return _one_line(f"{name + ': ' if name else ''}{exc.strerror or exc}; check the path and permissions")
    return _one_line(f"unexpected {type(exc).__name__}: {exc}; run again with --debug for the traceback "
                     f"and report it")
