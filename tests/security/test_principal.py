"""ssl.principal.mapping.rules as Kafka parses and applies them (Kafka's documented examples and the cases of its
SslPrincipalMapper tests), and the subject of a certificate as Java's X500Principal.getName() writes it."""

from __future__ import annotations

import pytest

from tierlog.config import BrokerConfig
from tierlog.errors import InvalidConfigError
from tierlog.security import ANONYMOUS, KafkaPrincipal, SslPrincipalMapper
from tierlog.security.principal import NoMatchingRule, parse_rules, ssl_principal, subject_name


def test_the_documented_example_rules():
    """docs/security.html: service users keep their CN, others become cn@ou lowercased."""
    mapper = SslPrincipalMapper(",".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
        "DEFAULT"]))
    assert mapper.name("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "serviceuser"
    assert mapper.name("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown") == "adminuser@admin"
    upper = SslPrincipalMapper("RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U")
    assert upper.name("CN=kafka.client,OU=x") == "KAFKA.CLIENT"


def test_rules_in_order_with_case_changes_and_default():
    mapper = SslPrincipalMapper(", ".join([
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
        "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
        "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
        "DEFAULT"]))
    assert mapper.name("CN=Duke,OU=ServiceUsers,O=Org,C=US") == "duke"
    assert mapper.name("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US") == "duke@sme"
    assert mapper.name("cn=duke,ou=sme,dc=mycp,dc=com") == "DUKE@SME"
    assert mapper.name("cN=duke,OU=JavaSoft,O=Sun Microsystems") == "DUKE"
    assert mapper.name("OU=JavaSoft,O=Sun Microsystems,C=US") == "OU=JavaSoft,O=Sun Microsystems,C=US"


def test_an_escaped_comma_in_a_common_name():
    mapper = SslPrincipalMapper(r"RULE:^CN=((\\, *|\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.name(r"CN=Tkac\, Adam,OU=ITZ,DC=geodis,DC=cz") == r"Tkac\, Adam"


@pytest.mark.parametrize("rules", [
    "DEFAULT", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L, DEFAULT",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/", "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L",
    "RULE:^cn=(.?),ou=(.?),dc=(.?),dc=(.?)$/$1@$2/U", "RULE:^CN=([^,ADEFLTU,]+)(,.*|$)/$1/",
    "RULE:^CN=([^,DEFAULT,]+)(,.*|$)/$1/"])
def test_valid_rules(rules):
    assert parse_rules(rules)
    BrokerConfig({"ssl.principal.mapping.rules": rules})


@pytest.mark.parametrize("rules", [
    "default", "DEFAUL", "DEFAULT/L", "DEFAULT/U", "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
    "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L", "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU"])
def test_invalid_rules_are_refused_by_the_broker_configuration(rules):
    with pytest.raises(ValueError):
        parse_rules(rules)
    with pytest.raises(InvalidConfigError, match="ssl.principal.mapping.rules"):
        BrokerConfig({"ssl.principal.mapping.rules": rules})


@pytest.mark.parametrize(("rules", "count"), [
    ("", 0), ("DEFAULT", 1), ("RULE://,DEFAULT", 2), ("  RULE:// ,  DEFAULT  ", 2), (",   , , ,      , , ,   ", 0),
    (",,RULE://,,,DEFAULT,,", 2), ("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ", 3)])
def test_rules_splitting(rules, count):
    assert len(parse_rules(rules)) == count


def test_no_matching_rule_refuses_the_name():
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper(r"RULE:^CN=([^,]*),OU=eng,.*$/$1/").name("CN=x,OU=sales,O=y")
    with pytest.raises(NoMatchingRule):
        SslPrincipalMapper("").name("CN=x")


def test_a_certificate_subject_and_its_principal(pki):
    der = _der(pki.client.cert)
    assert subject_name(der) == "CN=client,OU=eng,O=tierlog,C=US"
    assert ssl_principal(der, SslPrincipalMapper(r"RULE:^CN=([^,]*),OU=eng,.*$/$1/U")) == KafkaPrincipal("User",
                                                                                                         "CLIENT")
    assert str(ssl_principal(der, SslPrincipalMapper())) == "User:CN=client,OU=eng,O=tierlog,C=US"
    assert ssl_principal(None, SslPrincipalMapper()) is ANONYMOUS


def _der(path) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    return x509.load_pem_x509_certificate(path.read_bytes()).public_bytes(Encoding.DER)
