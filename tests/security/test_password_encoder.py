"""Kafka's encoding of dynamic password configs (password.encoder.*): the stored text's fields, round trips with
both ciphers and every key factory, and the refusals (another secret, damaged text)."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest

from tests.harness import apache_kafka
from tierlog.config import BrokerConfig
from tierlog.errors import InvalidConfigError
from tierlog.security.password_encoder import KEY_FACTORIES, PasswordEncoder, PasswordEncoderError


def _fields(text: str) -> dict[str, str]:
    return dict(item.split(":", 1) for item in text.split(","))


def test_the_stored_text_has_kafkas_fields():
    text = PasswordEncoder("the-secret").encode("key-password")
    fields = _fields(text)
    assert set(fields) == {"keyFactoryAlgorithm", "cipherAlgorithm", "keyLength", "salt", "iterations",
                           "encryptedPassword", "passwordLength", "initializationVector"}
    assert fields["keyFactoryAlgorithm"] == "PBKDF2WithHmacSHA512"
    assert fields["cipherAlgorithm"] == "AES/CBC/PKCS5Padding"
    assert (fields["keyLength"], fields["iterations"], fields["passwordLength"]) == ("128", "4096", "12")
    assert len(base64.b64decode(fields["salt"])) == 256
    assert len(base64.b64decode(fields["initializationVector"])) == 16
    assert len(base64.b64decode(fields["encryptedPassword"])) == 16  # 12 bytes padded to one AES block
    assert "key-password" not in text


@pytest.mark.parametrize("factory", sorted(KEY_FACTORIES))
@pytest.mark.parametrize("cipher,bits", [("AES/CBC/PKCS5Padding", 128), ("AES/CBC/PKCS5Padding", 256),
                                         ("AES/GCM/NoPadding", 128), ("AES/GCM/NoPadding", 192)])
def test_round_trip(factory, cipher, bits):
    encoder = PasswordEncoder("s3cret", factory, cipher, bits, 1024)
    for password in ("", "a", "p" * 16, "pässwörd 😀 with, commas: and colons"):
        text = encoder.encode(password)
        assert encoder.decode(text) == password
        # another encoder with the same secret but other settings reads it: the stored fields say how
        assert PasswordEncoder("s3cret").decode(text) == password
    assert _fields(encoder.encode("x"))["cipherAlgorithm"] == cipher


def test_two_encodings_of_one_password_differ():
    encoder = PasswordEncoder("s3cret")
    assert encoder.encode("same") != encoder.encode("same")


@pytest.mark.parametrize("cipher", ["AES/CBC/PKCS5Padding", "AES/GCM/NoPadding"])
def test_another_secret_cannot_decode(cipher):
    text = PasswordEncoder("right", cipher_algorithm=cipher).encode("a-long-enough-password")
    with pytest.raises(PasswordEncoderError, match="could not be decoded"):
        PasswordEncoder("wrong").decode(text)


@pytest.mark.parametrize("text", ["plain-password", "", "salt:abc", "keyFactoryAlgorithm:MD5,cipherAlgorithm:x"])
def test_text_that_is_not_an_encoded_password_is_refused(text):
    with pytest.raises(PasswordEncoderError):
        PasswordEncoder("s3cret").decode(text)


def test_a_damaged_length_is_noticed():
    text = PasswordEncoder("s3cret").encode("password")
    fields = _fields(text)
    fields["passwordLength"] = "9"
    with pytest.raises(PasswordEncoderError, match="sanity check of length"):
        PasswordEncoder("s3cret").decode(",".join(f"{k}:{v}" for k, v in fields.items()))


@pytest.mark.parametrize("settings,reason", [
    ({"password.encoder.cipher.algorithm": "DES/CBC/PKCS5Padding"}, "password.encoder.cipher.algorithm"),
    ({"password.encoder.key.length": "100"}, "password.encoder.key.length"),
    ({"password.encoder.iterations": "10"}, "password.encoder.iterations"),
    ({"password.encoder.keyfactory.algorithm": "MD5"}, "password.encoder.keyfactory.algorithm"),
])
def test_settings_no_encoder_can_use_are_refused(settings, reason):
    with pytest.raises(InvalidConfigError, match=reason):
        BrokerConfig({"password.encoder.secret": "s", **settings})


# ------------------------------------------------------------------ Kafka 3.9's own encoder reads ours and we read its

_PEER = Path(__file__).resolve().parents[1] / "harness" / "java" / "PasswordEncoderPeer.java"


@pytest.fixture(scope="module")
def kafka_encoder():
    """``kafka_encoder(*args)``: Kafka 3.9's PasswordEncoder (tests/harness/java/PasswordEncoderPeer.java, run by
    Java's source launcher on 3.9's jars); its output line."""
    apache_kafka.resolve_zk_jars()  # skips locally without Java or the jars
    classpath = apache_kafka.kafka_peer_module.classpath(apache_kafka.ZK_KAFKA_VERSION)

    def run(*args: str) -> str:
        proc = subprocess.run(["java", "-cp", classpath, str(_PEER), *args], capture_output=True, text=True,
                              timeout=180)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.rstrip("\n")
    return run


def test_kafka_decodes_what_tierlog_encoded(kafka_encoder):
    password = "ks-pässword, with: separators"
    cbc = PasswordEncoder("shared-secret").encode(password)
    assert kafka_encoder("decode", "shared-secret", "AES/CBC/PKCS5Padding", "128", cbc) == password
    gcm = PasswordEncoder("shared-secret", cipher_algorithm="AES/GCM/NoPadding", key_length=256).encode(password)
    assert kafka_encoder("decode", "shared-secret", "AES/GCM/NoPadding", "256", gcm) == password


@pytest.mark.parametrize("cipher,bits", [("AES/CBC/PKCS5Padding", 128), ("AES/GCM/NoPadding", 256)])
def test_tierlog_decodes_what_kafka_encoded(kafka_encoder, cipher, bits):
    text = kafka_encoder("encode", "shared-secret", cipher, str(bits), "kafka's password")
    assert _fields(text)["cipherAlgorithm"] == cipher
    assert PasswordEncoder("shared-secret").decode(text) == "kafka's password"
    with pytest.raises(PasswordEncoderError):
        PasswordEncoder("another-secret").decode(text)
