"""Fixtures of the TLS tests: the certificates, made once per session at test time."""

import pytest

from tests.security.pki import Pki, make_pki


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))
