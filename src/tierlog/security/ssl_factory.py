"""TLS contexts from Kafka's ``ssl.*`` settings (Kafka's ``DefaultSslEngineFactory``), for both sides.

What is read, with Kafka's names and meaning:

- the keystore (this side's key and certificate chain): ``ssl.keystore.type`` PEM, with
  ``ssl.keystore.location`` a PEM file holding the private key and the chain, or the key and the chain
  inline in ``ssl.keystore.key`` / ``ssl.keystore.certificate.chain``; ``ssl.key.password`` decrypts an
  encrypted key. PKCS12 (and a "JKS" file that is really PKCS12, as keytool has written since Java 9):
  ``ssl.keystore.location`` and ``ssl.keystore.password``. A real Java KeyStore file cannot be read and is
  refused with the keytool command that converts it.
- the truststore (who to trust): ``ssl.truststore.type`` PEM (``ssl.truststore.location`` or the inline
  ``ssl.truststore.certificates``) or PKCS12 (``ssl.truststore.location``, ``ssl.truststore.password``);
  without one, the system's certificate authorities.
- ``ssl.client.auth`` (server side): none, requested or required (mutual TLS).
- ``ssl.enabled.protocols`` and ``ssl.protocol``: the TLS versions; ``ssl.cipher.suites``: IANA names
  (Java's) or OpenSSL names. TLS 1.3 suites cannot be narrowed with Python's ``ssl``: a list without any
  TLS 1.3 suite disables TLS 1.3, as it does in Java.
- ``ssl.endpoint.identification.algorithm`` (client side): ``https`` (Kafka's default) checks that the
  broker's certificate names the host connected to; empty turns the check off.

Secrets never touch the disk in clear: a key that comes inline or from PKCS12 is handed to OpenSSL through
a private temporary file, encrypted with a one-time password, and removed at once.
"""

from __future__ import annotations

import os
import secrets
import ssl
import tempfile
from collections.abc import Mapping
from typing import Any

from tierlog.errors import InvalidConfigError

#: The settings this module reads (a listener's or a client's view of them).
SSL_SETTINGS: tuple[str, ...] = (
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.key", "ssl.keystore.certificate.chain",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates",
    "ssl.client.auth", "ssl.enabled.protocols", "ssl.protocol", "ssl.cipher.suites",
    "ssl.endpoint.identification.algorithm",
)

#: Settings naming files whose content a reload must notice even when the setting's value stays the same.
FILE_SETTINGS = ("ssl.keystore.location", "ssl.truststore.location")

_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1, "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256",
                           "TLS_AES_128_CCM_SHA256", "TLS_AES_128_CCM_8_SHA256"})
_JKS_MAGIC = b"\xfe\xed\xfe\xed"


class SslConfigError(InvalidConfigError):
    """The ``ssl.*`` settings cannot make a TLS context; the message names the setting and why."""


def _text(value: Any) -> str | None:
    """A setting's text: passwords come as objects holding ``value``; blank means unset."""
    value = getattr(value, "value", value)
    if value is None:
        return None
    value = str(value)
    return value if value.strip() else None


def _list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return [str(v).strip() for v in value if str(v).strip()]


def _read(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise SslConfigError(f"Cannot read {setting}={path}: {e.strerror or e}") from None


def file_stamps(settings: Mapping[str, Any]) -> tuple:
    """What changes when a keystore or truststore file is replaced (path, size, modification time): a
    context built from settings with other stamps is stale."""
    out = []
    for name in FILE_SETTINGS:
        path = _text(settings.get(name))
        if path:
            try:
                st = os.stat(path)
                out.append((path, st.st_size, st.st_mtime_ns, st.st_ino))
            except OSError:
                out.append((path, None))
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# keystore and truststore contents
# --------------------------------------------------------------------------------------------------


def _pkcs12(data: bytes, passwords: list[str | None], setting: str):
    from cryptography.hazmat.primitives.serialization import pkcs12

    last: Exception | None = None
    for password in passwords:
        try:
            return pkcs12.load_pkcs12(data, password.encode() if password is not None else None)
        except (ValueError, TypeError) as e:
            last = e
    raise SslConfigError(f"Cannot read the PKCS12 store {setting}: {last} (wrong password?)")


def _store_type(settings: Mapping[str, Any], kind: str, data: bytes | None) -> str:
    declared = (_text(settings.get(f"ssl.{kind}.type")) or "JKS").upper()
    if declared == "JKS":
        if data is not None and data.startswith(_JKS_MAGIC):
            location = _text(settings.get(f"ssl.{kind}.location"))
            raise SslConfigError(
                f"ssl.{kind}.location={location} is a Java KeyStore (JKS), which tierlog cannot read; convert it "
                f"with keytool -importkeystore -srckeystore {location} -destkeystore {kind}.p12 -deststoretype "
                f"PKCS12 and set ssl.{kind}.type=PKCS12 (or use PEM)")
        return "PKCS12"  # keytool has written PKCS12 by default since Java 9, whatever the file is called
    if declared not in ("PEM", "PKCS12"):
        raise SslConfigError(f"ssl.{kind}.type={declared} is not supported: use PEM or PKCS12")
    return declared


def _load_keystore(ctx: ssl.SSLContext, settings: Mapping[str, Any]):
    """Load this side's key and certificate chain into ``ctx``; its certificate (an x509 object), or None
    when no keystore is configured."""
    location = _text(settings.get("ssl.keystore.location"))
    inline_key = _text(settings.get("ssl.keystore.key"))
    inline_chain = _text(settings.get("ssl.keystore.certificate.chain"))
    key_password = _text(settings.get("ssl.key.password"))
    store_password = _text(settings.get("ssl.keystore.password"))
    if inline_key or inline_chain:
        if location:
            raise SslConfigError("Set either ssl.keystore.location or ssl.keystore.key and "
                                 "ssl.keystore.certificate.chain, not both")
        if not (inline_key and inline_chain):
            raise SslConfigError("ssl.keystore.key and ssl.keystore.certificate.chain must be set together")
        if (_text(settings.get("ssl.keystore.type")) or "PEM").upper() != "PEM":
            raise SslConfigError("ssl.keystore.key and ssl.keystore.certificate.chain need ssl.keystore.type=PEM")
        return _load_pem_key_and_chain(ctx, inline_key.encode(), inline_chain.encode(), key_password,
                                       "ssl.keystore.key")
    if not location:
        return None
    data = _read(location, "ssl.keystore.location")
    kind = _store_type(settings, "keystore", data)
    if kind == "PEM":
        if store_password:
            raise SslConfigError("ssl.keystore.password is not used with ssl.keystore.type=PEM (an encrypted key "
                                 "takes ssl.key.password)")
        return _load_pem_key_and_chain(ctx, data, data, key_password, "ssl.keystore.location")
    if not store_password:
        raise SslConfigError(f"ssl.keystore.password is required to read the PKCS12 keystore {location}")
    store = _pkcs12(data, [store_password, key_password] if key_password else [store_password],
                    "ssl.keystore.location")
    if store.key is None or store.cert is None:
        raise SslConfigError(f"ssl.keystore.location={location} holds no private key with its certificate")
    chain = [store.cert.certificate] + [c.certificate for c in store.additional_certs]
    return _load_objects(ctx, store.key, chain)


def _load_pem_key_and_chain(ctx: ssl.SSLContext, key_pem: bytes, chain_pem: bytes, password: str | None,
                            setting: str) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    key_block = _pem_blocks(key_pem, ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"))
    if not key_block:
        raise SslConfigError(f"{setting} holds no PEM private key")
    try:
        key = load_pem_private_key(key_block[0], password.encode() if password else None)
    except TypeError as e:  # encrypted without a password, or a password for a clear key
        raise SslConfigError(f"Cannot read the private key of {setting}: {e} (ssl.key.password)") from None
    except ValueError as e:
        raise SslConfigError(f"Cannot read the private key of {setting}: {e} (wrong ssl.key.password?)") from None
    try:
        chain = x509.load_pem_x509_certificates(chain_pem)
    except ValueError as e:
        raise SslConfigError(f"{setting} holds no readable PEM certificate chain: {e}") from None
    return _load_objects(ctx, key, chain)


def _pem_blocks(data: bytes, labels: tuple[str, ...]) -> list[bytes]:
    out = []
    for label in labels:
        begin, end = f"-----BEGIN {label}-----".encode(), f"-----END {label}-----".encode()
        start = data.find(begin)
        while start >= 0:
            stop = data.find(end, start)
            if stop < 0:
                break
            out.append(data[start:stop + len(end)] + b"\n")
            start = data.find(begin, stop)
    return out


def _load_objects(ctx: ssl.SSLContext, key, chain: list):
    """Hand a key and its chain to OpenSSL (which reads files only) through a private file, the key
    encrypted with a one-time password; the file is gone before this returns."""
    from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, Encoding, PrivateFormat

    one_time = secrets.token_urlsafe(24)
    blob = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, BestAvailableEncryption(one_time.encode()))
    blob += b"".join(c.public_bytes(Encoding.PEM) for c in chain)
    fd, path = tempfile.mkstemp(prefix="tierlog-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        ctx.load_cert_chain(path, password=one_time)
    except ssl.SSLError as e:
        raise SslConfigError(f"The keystore's key does not match its certificate or cannot be used: {e}") from None
    finally:
        os.unlink(path)
    return chain[0]


def _load_truststore(ctx: ssl.SSLContext, settings: Mapping[str, Any]) -> bool:
    """Load the trusted certificates into ``ctx``; False when no truststore is configured."""
    location = _text(settings.get("ssl.truststore.location"))
    inline = _text(settings.get("ssl.truststore.certificates"))
    if inline:
        if location:
            raise SslConfigError("Set either ssl.truststore.location or ssl.truststore.certificates, not both")
        _trust_pem(ctx, inline.encode(), "ssl.truststore.certificates")
        return True
    if not location:
        return False
    data = _read(location, "ssl.truststore.location")
    if _store_type(settings, "truststore", data) == "PEM":
        _trust_pem(ctx, data, "ssl.truststore.location")
        return True
    from cryptography.hazmat.primitives.serialization import Encoding

    password = _text(settings.get("ssl.truststore.password"))
    store = _pkcs12(data, [password] if password else [None, ""], "ssl.truststore.location")
    certs = ([store.cert] if store.cert is not None else []) + list(store.additional_certs)
    if not certs:
        raise SslConfigError(f"ssl.truststore.location={location} holds no certificate")
    ctx.load_verify_locations(cadata="".join(c.certificate.public_bytes(Encoding.PEM).decode() for c in certs))
    return True


def _trust_pem(ctx: ssl.SSLContext, data: bytes, setting: str) -> None:
    blocks = _pem_blocks(data, ("CERTIFICATE",))
    if not blocks:
        raise SslConfigError(f"{setting} holds no PEM certificate")
    try:
        ctx.load_verify_locations(cadata=b"".join(blocks).decode("ascii"))
    except (ssl.SSLError, ValueError) as e:
        raise SslConfigError(f"Cannot read the certificates of {setting}: {e}") from None


# --------------------------------------------------------------------------------------------------
# protocols and cipher suites
# --------------------------------------------------------------------------------------------------


def openssl_cipher_name(name: str) -> str:
    """An IANA (Java) TLS 1.2 suite name in OpenSSL's spelling; other names are returned unchanged.
    TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 -> ECDHE-RSA-AES128-GCM-SHA256."""
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name
    kx, _, cipher = name[4:].partition("_WITH_")
    kx = "" if kx == "RSA" else kx.replace("_", "-")
    parts = cipher.split("_")
    if parts[0] in ("AES", "CAMELLIA", "ARIA") and len(parts) >= 3:
        parts = [parts[0] + parts[1], *parts[2:]]
    if "CBC" in parts:
        parts.remove("CBC")
    if parts[0].startswith("CHACHA20"):
        parts = parts[:2]  # the MAC is implied
    text = "-".join(parts)  # a CBC suite keeps its MAC: ECDHE-RSA-AES128-SHA, ECDHE-RSA-AES128-SHA256
    return f"{kx}-{text}" if kx else text


def _configure_versions_and_ciphers(ctx: ssl.SSLContext, settings: Mapping[str, Any]) -> None:
    enabled = _list(settings.get("ssl.enabled.protocols")) or ["TLSv1.2", "TLSv1.3"]
    unknown = [p for p in enabled if p not in _VERSIONS]
    if unknown:
        raise SslConfigError(f"ssl.enabled.protocols: unknown protocol {', '.join(unknown)} (one of "
                             f"{', '.join(_VERSIONS)})")
    versions = sorted(_VERSIONS[p] for p in enabled)
    low, high = versions[0], versions[-1]
    protocol = _text(settings.get("ssl.protocol")) or "TLSv1.3"
    if protocol in _VERSIONS:
        high = min(high, _VERSIONS[protocol])  # an SSLContext for TLSv1.2 never speaks 1.3
    elif protocol.upper() not in ("TLS", "SSL"):
        raise SslConfigError(f"ssl.protocol={protocol} is not supported (TLS, TLSv1.2 or TLSv1.3)")
    suites = _list(settings.get("ssl.cipher.suites"))
    if suites:
        tls12 = [s for s in suites if s not in _TLS13_SUITES]
        if not tls12:
            low = max(low, ssl.TLSVersion.TLSv1_3)
        else:
            names = [openssl_cipher_name(s) for s in tls12]
            try:
                ctx.set_ciphers(":".join(names))
            except ssl.SSLError:
                raise SslConfigError(f"ssl.cipher.suites: none of {', '.join(tls12)} is available") from None
            have = {c["name"] for c in ctx.get_ciphers()}
            missing = [s for s, n in zip(tls12, names, strict=True) if n not in have]
            if missing:
                raise SslConfigError(f"ssl.cipher.suites: unknown or unavailable suites {', '.join(missing)}")
            if len(tls12) == len(suites):
                high = min(high, ssl.TLSVersion.TLSv1_2)  # no TLS 1.3 suite listed: no TLS 1.3, as in Java
    if low > high:
        raise SslConfigError(f"ssl.enabled.protocols ({', '.join(enabled)}), ssl.protocol ({protocol}) and "
                             "ssl.cipher.suites leave no TLS version to speak")
    ctx.minimum_version, ctx.maximum_version = low, high


# --------------------------------------------------------------------------------------------------
# the two sides
# --------------------------------------------------------------------------------------------------


def server_context(settings: Mapping[str, Any], where: str = "") -> ssl.SSLContext:
    """The context a TLS listener accepts connections with; SslConfigError (naming ``where``, e.g. the
    listener) when the settings are incomplete or unreadable."""
    return server_context_with_certificate(settings, where)[0]


def server_context_with_certificate(settings: Mapping[str, Any], where: str = ""):
    """:func:`server_context` and the certificate it serves (a ``cryptography`` x509 object)."""
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        _configure_versions_and_ciphers(ctx, settings)
        certificate = _load_keystore(ctx, settings)
        if certificate is None:
            raise SslConfigError("A TLS listener needs a keystore: set ssl.keystore.location (PEM or PKCS12) or "
                                 "ssl.keystore.key and ssl.keystore.certificate.chain")
        client_auth = (_text(settings.get("ssl.client.auth")) or "none").lower()
        if client_auth not in ("none", "requested", "required"):
            raise SslConfigError(f"ssl.client.auth={client_auth} is not one of none, requested, required")
        if client_auth != "none":
            if not _load_truststore(ctx, settings):
                ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
            ctx.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
        else:
            ctx.verify_mode = ssl.CERT_NONE
    except SslConfigError as e:
        if where:
            raise SslConfigError(f"{where}: {e.message}") from None
        raise
    return ctx, certificate


def identity_change(old, new, allow_dn_changes: bool, allow_san_changes: bool) -> str | None:
    """Why a listener may not switch from certificate ``old`` to ``new`` (Kafka's rule for a dynamic keystore
    update: same subject and same subject alternative names unless ``ssl.allow.dn.changes`` /
    ``ssl.allow.san.changes``), or None."""
    from cryptography import x509

    if not allow_dn_changes and old.subject != new.subject:
        return (f"Keystore DistinguishedName does not match: existing={old.subject.rfc4514_string()}, "
                f"new={new.subject.rfc4514_string()} (set ssl.allow.dn.changes=true to allow it)")

    def sans(cert) -> set[str]:
        try:
            names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return set()
        return {f"{type(n).__name__}:{n.value}" for n in names}

    if not allow_san_changes and sans(old) != sans(new):
        return (f"Keystore SubjectAltNames do not match: existing={sorted(sans(old))}, new={sorted(sans(new))} "
                "(set ssl.allow.san.changes=true to allow it)")
    return None


def client_context(settings: Mapping[str, Any], where: str = "") -> ssl.SSLContext:
    """The context a client (tierlog's client, or a broker towards another broker) connects with: the
    truststore (else the system's authorities), the keystore when one is set (mutual TLS), and hostname
    verification per ``ssl.endpoint.identification.algorithm``."""
    try:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        _configure_versions_and_ciphers(ctx, settings)
        algorithm = settings.get("ssl.endpoint.identification.algorithm", "https")
        algorithm = (_text(algorithm) or "").lower()
        if algorithm not in ("", "https"):
            raise SslConfigError(f"ssl.endpoint.identification.algorithm={algorithm} is not supported (https or "
                                 "empty)")
        ctx.check_hostname = algorithm == "https"
        ctx.verify_mode = ssl.CERT_REQUIRED
        if not _load_truststore(ctx, settings):
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        _load_keystore(ctx, settings)
    except SslConfigError as e:
        if where:
            raise SslConfigError(f"{where}: {e.message}") from None
        raise
    return ctx
