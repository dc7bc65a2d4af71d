"""Certificates made at test time with ``cryptography`` (no key is committed): a CA, broker certificates for
127.0.0.1 / localhost, client certificates, each written as Kafka's settings read them (PEM key and chain in
one file, encrypted PEM, PKCS12) and as the other clients want them (separate key and certificate files)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEY_PASSWORD = "key-secret"
STORE_PASSWORD = "store-secret"


def _name(**parts: str) -> x509.Name:
    """RDNs in certificate order: C, O, OU, CN (so RFC 2253 writes CN first)."""
    oids = (("C", NameOID.COUNTRY_NAME), ("O", NameOID.ORGANIZATION_NAME),
            ("OU", NameOID.ORGANIZATIONAL_UNIT_NAME), ("CN", NameOID.COMMON_NAME))
    return x509.Name([x509.NameAttribute(oid, parts[k]) for k, oid in oids if k in parts])


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _key_pem(key, password: str | None = None) -> bytes:
    enc = (serialization.BestAvailableEncryption(password.encode()) if password
           else serialization.NoEncryption())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


@dataclass
class Identity:
    """One key and certificate (signed by the CA) in every form the tests hand out."""

    subject: str  # RFC 2253, as Kafka's principal builder sees it
    key: Path  # PEM, clear
    cert: Path  # PEM, the certificate alone
    pem: Path  # PEM key then chain (certificate, CA): ssl.keystore.type=PEM's file
    encrypted_pem: Path  # the same with the key encrypted by KEY_PASSWORD
    p12: Path  # PKCS12, STORE_PASSWORD
    key_text: str
    chain_text: str


@dataclass
class Pki:
    folder: Path
    ca: Path  # the CA certificate, PEM (truststore)
    ca_p12: Path  # the CA certificate in a PKCS12 truststore, STORE_PASSWORD
    other_ca: Path  # a CA that signed nothing the brokers use
    broker: Identity
    broker_next: Identity  # the broker's next certificate: a new key, the same subject and names (reload)
    broker_renamed: Identity  # a certificate with another subject (a reload Kafka refuses by default)
    client: Identity
    stranger: Identity  # a client certificate signed by other_ca
    outsider: Identity  # signed by the CA, but with a subject the tests' mapping rules do not name

    def ca_text(self) -> str:
        return self.ca.read_text()


class _Ca:
    def __init__(self, name: str):
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = _name(O="tierlog tests", CN=name)
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - datetime.timedelta(days=1))
                     .not_valid_after(now + datetime.timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                  content_commitment=False, key_encipherment=False,
                                                  data_encipherment=False, key_agreement=False,
                                                  encipher_only=False, decipher_only=False), critical=True)
                     .sign(self.key, hashes.SHA256()))

    def issue(self, folder: Path, stem: str, subject: x509.Name, server: bool, addresses: tuple[str, ...] = ()
              ) -> Identity:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(self.name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(days=1))
                   .not_valid_after(now + datetime.timedelta(days=30))
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                         ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                *(x509.IPAddress(ipaddress.ip_address(a)) for a in addresses)]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        chain = _pem(cert) + _pem(self.cert)
        paths = {s: folder / f"{stem}{s}" for s in (".key", ".crt", ".pem", "-encrypted.pem", ".p12")}
        paths[".key"].write_bytes(_key_pem(key))
        paths[".crt"].write_bytes(_pem(cert))
        paths[".pem"].write_bytes(_key_pem(key) + chain)
        paths["-encrypted.pem"].write_bytes(_key_pem(key, KEY_PASSWORD) + chain)
        paths[".p12"].write_bytes(pkcs12.serialize_key_and_certificates(
            stem.encode(), key, cert, [self.cert], serialization.BestAvailableEncryption(STORE_PASSWORD.encode())))
        return Identity(subject.rfc4514_string(), paths[".key"], paths[".crt"], paths[".pem"],
                        paths["-encrypted.pem"], paths[".p12"], _key_pem(key).decode(), chain.decode())


def make_pki(folder: Path, addresses: tuple[str, ...] = ()) -> Pki:
    """The test PKI; ``addresses``: IP addresses the brokers' certificates also name (brokers in network
    namespaces, whose peers verify the address they dial as Kafka's default https identification does)."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, other = _Ca("tierlog test CA"), _Ca("another CA")
    (folder / "ca.pem").write_bytes(_pem(ca.cert))
    (folder / "other-ca.pem").write_bytes(_pem(other.cert))
    (folder / "ca.p12").write_bytes(pkcs12.serialize_key_and_certificates(
        None, None, None, [ca.cert], serialization.BestAvailableEncryption(STORE_PASSWORD.encode())))
    return Pki(
        folder, folder / "ca.pem", folder / "ca.p12", folder / "other-ca.pem",
        broker=ca.issue(folder, "broker", _name(C="US", O="tierlog", OU="brokers", CN="broker"), server=True,
                        addresses=addresses),
        broker_next=ca.issue(folder, "broker-next", _name(C="US", O="tierlog", OU="brokers", CN="broker"),
                             server=True),
        broker_renamed=ca.issue(folder, "broker-renamed", _name(C="US", O="tierlog", OU="brokers",
                                                                 CN="broker-renamed"), server=True),
        client=ca.issue(folder, "client", _name(C="US", O="tierlog", OU="eng", CN="client"), server=False),
        stranger=other.issue(folder, "stranger", _name(C="US", O="elsewhere", CN="stranger"), server=False),
        outsider=ca.issue(folder, "outsider", _name(C="US", O="tierlog", OU="sales", CN="outsider"), server=False),
    )
