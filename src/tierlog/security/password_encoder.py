"""Kafka's encoding of dynamic password configs (ZooKeeper mode's ``password.encoder.*``).

A dynamic broker config of type PASSWORD (``ssl.keystore.password``,
``listener.name.<l>.ssl.key.password``, ...) is kept in ZooKeeper encrypted with a key derived from
``password.encoder.secret``: PBKDF2 (``password.encoder.keyfactory.algorithm``, PBKDF2WithHmacSHA512 by
default) over the secret with a random 256-byte salt, ``password.encoder.iterations`` rounds and a key of
``password.encoder.key.length`` bits, then AES (``password.encoder.cipher.algorithm``: AES/CBC/PKCS5Padding by
default, or AES/GCM/NoPadding) with a random IV.

The stored text is Kafka's, so brokers of either kind read each other's values: ``name:value`` pairs joined by
commas, with ``keyFactoryAlgorithm``, ``cipherAlgorithm``, ``keyLength``, ``salt`` (base64), ``iterations``,
``encryptedPassword`` (base64), ``passwordLength`` (the password's length in UTF-16 units, checked after
decryption) and the cipher's parameters: ``initializationVector`` (base64), and ``authenticationTagLength`` for
GCM (whose tag Java appends to the encrypted bytes, as ``cryptography`` does).
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes, padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

KEY_FACTORIES = {"PBKDF2WithHmacSHA512": hashes.SHA512, "PBKDF2WithHmacSHA256": hashes.SHA256,
                 "PBKDF2WithHmacSHA1": hashes.SHA1}
DEFAULT_KEY_FACTORY = "PBKDF2WithHmacSHA512"
CBC, GCM = "AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"
CIPHERS = (CBC, GCM)
SALT_BYTES = 256  # Kafka's
GCM_IV_BYTES, GCM_TAG_BITS = 12, 128


class PasswordEncoderError(Exception):
    """A password cannot be encoded or decoded (wrong secret, damaged text, unsupported algorithm)."""


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _utf16_length(text: str) -> int:
    """Java's String.length(): characters outside the BMP count twice."""
    return len(text.encode("utf-16-le")) // 2


@dataclass(frozen=True)
class PasswordEncoder:
    secret: str
    keyfactory_algorithm: str = DEFAULT_KEY_FACTORY
    cipher_algorithm: str = CBC
    key_length: int = 128
    iterations: int = 4096

    def __post_init__(self) -> None:
        if self.keyfactory_algorithm not in KEY_FACTORIES:
            raise PasswordEncoderError(f"password.encoder.keyfactory.algorithm={self.keyfactory_algorithm} is not "
                                       f"supported (one of {', '.join(KEY_FACTORIES)})")
        if self.cipher_algorithm not in CIPHERS:
            raise PasswordEncoderError(f"password.encoder.cipher.algorithm={self.cipher_algorithm} is not supported "
                                       f"(one of {', '.join(CIPHERS)})")
        if self.key_length not in (128, 192, 256):
            raise PasswordEncoderError(f"password.encoder.key.length={self.key_length}: AES keys are 128, 192 or "
                                       "256 bits")

    def _key(self, keyfactory: str, salt: bytes, iterations: int, key_length: int) -> bytes:
        kdf = PBKDF2HMAC(KEY_FACTORIES[keyfactory](), key_length // 8, salt, iterations)
        return kdf.derive(self.secret.encode())

    def encode(self, password: str) -> str:
        salt = os.urandom(SALT_BYTES)
        key = self._key(self.keyfactory_algorithm, salt, self.iterations, self.key_length)
        data = password.encode()
        if self.cipher_algorithm == CBC:
            iv = os.urandom(16)
            padder = padding.PKCS7(128).padder()
            encryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
            encrypted = encryptor.update(padder.update(data) + padder.finalize()) + encryptor.finalize()
            params = {"initializationVector": _b64(iv)}
        else:
            iv = os.urandom(GCM_IV_BYTES)
            encrypted = AESGCM(key).encrypt(iv, data, None)
            params = {"authenticationTagLength": str(GCM_TAG_BITS), "initializationVector": _b64(iv)}
        fields = {"keyFactoryAlgorithm": self.keyfactory_algorithm, "cipherAlgorithm": self.cipher_algorithm,
                  "keyLength": str(self.key_length), "salt": _b64(salt), "iterations": str(self.iterations),
                  "encryptedPassword": _b64(encrypted), "passwordLength": str(_utf16_length(password)), **params}
        return ",".join(f"{k}:{v}" for k, v in fields.items())

    def decode(self, encoded: str) -> str:
        """The password; PasswordEncoderError when ``encoded`` is not Kafka's form or the secret is not the one
        it was encoded with. The algorithms, key length and iterations are the stored ones (values encoded
        before a change of password.encoder.* still decode)."""
        try:
            fields = dict(item.split(":", 1) for item in encoded.split(","))
            keyfactory, cipher = fields["keyFactoryAlgorithm"], fields["cipherAlgorithm"]
            key_length, iterations = int(fields["keyLength"]), int(fields["iterations"])
            salt, encrypted = base64.b64decode(fields["salt"]), base64.b64decode(fields["encryptedPassword"])
            iv = base64.b64decode(fields["initializationVector"])
            length = int(fields["passwordLength"])
        except (ValueError, KeyError) as e:
            raise PasswordEncoderError(f"not an encoded password ({type(e).__name__}: {e})") from None
        if keyfactory not in KEY_FACTORIES or cipher not in CIPHERS or key_length not in (128, 192, 256):
            raise PasswordEncoderError(f"unsupported encoding {keyfactory}, {cipher}, {key_length} bits")
        key = self._key(keyfactory, salt, iterations, key_length)
        try:
            if cipher == CBC:
                decryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
                padded = decryptor.update(encrypted) + decryptor.finalize()
                unpadder = padding.PKCS7(128).unpadder()
                data = unpadder.update(padded) + unpadder.finalize()
            else:
                tag_bits = int(fields.get("authenticationTagLength", GCM_TAG_BITS))
                if tag_bits != GCM_TAG_BITS:
                    raise PasswordEncoderError(f"GCM tags of {tag_bits} bits are not supported")
                data = AESGCM(key).decrypt(iv, encrypted, None)
            password = data.decode()
        except (ValueError, InvalidTag, UnicodeDecodeError):
            raise PasswordEncoderError("Password could not be decoded (a different password.encoder.secret?)") \
                from None
        if _utf16_length(password) != length:
            raise PasswordEncoderError("Password could not be decoded, sanity check of length failed")
        return password


def password_encoder(secret: str | None, keyfactory_algorithm: str | None, cipher_algorithm: str, key_length: int,
                     iterations: int) -> PasswordEncoder | None:
    """The encoder of the broker's ``password.encoder.*`` settings; None without a secret."""
    if not secret:
        return None
    return PasswordEncoder(secret, keyfactory_algorithm or DEFAULT_KEY_FACTORY, cipher_algorithm, key_length,
                           iterations)


__all__ = ["CIPHERS", "KEY_FACTORIES", "PasswordEncoder", "PasswordEncoderError", "password_encoder"]
