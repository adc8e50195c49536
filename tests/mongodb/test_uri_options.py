"""Connection strings (issue 18, point 1): ``poolkit.mongodb.uri.parse_uri``.

Every case of the uri-options spec files (``uri_spec`` finds and judges them) is its own test;
then the rules the files do not cover: passwords never shown, the pool options a URI makes, the
load-balanced rules, the SRV checks made without DNS and the seed list made from DNS answers.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import pytest

from poolkit import PoolOptions
from poolkit.mongodb.uri import (
    InvalidURIError,
    MongoURI,
    URIOptions,
    URIOptionWarning,
    parse_uri,
)
from services import skip_or_fail
from uri_spec import (
    SPEC_CASES,
    URI_DIR,
    Case,
    check_parsed,
    load_cases,
    missing_reason,
    needs_dns,
)

CASES = load_cases(URI_DIR) if URI_DIR.is_dir() else []


def parse_quietly(uri: str) -> MongoURI:
    """``parse_uri`` asserting that it warns nothing."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parsed = parse_uri(uri)
    assert [str(w.message) for w in caught] == []
    return parsed


def parse_warning(uri: str) -> tuple[MongoURI, list[str]]:
    """``parse_uri`` asserting that it warns, with the messages."""
    with pytest.warns(URIOptionWarning) as caught:
        parsed = parse_uri(uri)
    return parsed, [str(w.message) for w in caught]


# ------------------------------------------------------------------------------ the spec files


def test_spec_files_present() -> None:
    """The one place that reports missing spec files: skipped with the count of cases that did
    not run, or failed under POOLKIT_REQUIRE_SERVICES=1."""
    if not CASES:
        skip_or_fail(missing_reason(URI_DIR))
    assert len(CASES) == SPEC_CASES


if CASES:

    @pytest.mark.parametrize("case", [pytest.param(case, id=case.id) for case in CASES])
    def test_spec_case(case: Case) -> None:
        reason = needs_dns(case)
        if reason is not None:
            pytest.skip(reason)
        if not case.valid:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with pytest.raises(InvalidURIError):
                    parse_uri(case.uri)
            assert caught == []
            return
        parsed = parse_warning(case.uri)[0] if case.warning else parse_quietly(case.uri)
        check_parsed(case, parsed)


def test_no_spec_case_needs_dns() -> None:
    """Every srv-options case is judged without a lookup: none expects hosts or a TXT option."""
    assert [case.id for case in CASES if needs_dns(case)] == []
    dns = Case("f", "d", "mongodb+srv://a.b.c/?tls=true", True, False, None, None, {"x": 1})
    assert needs_dns(dns) == "needs DNS: the expected options ['x'] come from the TXT record"
    assert needs_dns(dataclasses.replace(dns, hosts=[], options=None)) is not None


# ----------------------------------------------------------------------------- passwords hidden

SECRET = "hunter2-SECRET"
INVALID_WITH_PASSWORD = [
    f"mongodb://user:{SECRET}@example.com/?srvMaxHosts=2",
    f"mongodb://user:{SECRET}@a,b/?loadBalanced=true",
    f"mongodb://user:{SECRET}@example.com/?loadBalanced=true&replicaSet=rs",
    f"mongodb://user:{SECRET}@example.com/?directConnection=true&loadBalanced=true",
    f"mongodb://user:{SECRET}@example.com/?minPoolSize=9&maxPoolSize=3",
    f"mongodb://user:{SECRET}@example.com/?authMechanism=MONGODB-X509",
    f"mongodb://user:{SECRET}@example.com/?authMechanism=NOPE",
    f"mongodb://user:{SECRET}@example.com:99999/",
    f"mongodb://user:{SECRET}@/",
    f"mongodb://user:{SECRET}@example.com/bad$db",
    f"mongodb://user:{SECRET}@example.com/?tls=true&ssl=false",
    f"mongodb+srv://user:{SECRET}@a.example.com:27017/",
    f"mongodb+srv://user:{SECRET}@a.example.com/?directConnection=true",
    # malformed user information: the password must not leak as a host, port, path or option
    f"mongodb://user:{SECRET}:x@example.com/",
    f"mongodb://user:{SECRET}%zz@example.com/",
    f"mongodb://user:{SECRET}#@example.com/",
    f"mongodb://user:{SECRET}@x@example.com/",
    f"mongodb://user:{SECRET} x@example.com/",
    "mongodb://user:hunter2/SECRET@example.com/",
    "mongodb://user:hunter2?SECRET@example.com/",
    "mongodb://user:hunter2?SECRET=x@example.com/",
    "mongodb://user:hunter2-SECRET/x@example.com/",
    "mongodb+srv://user:hunter2/SECRET@a.example.com/",
]


@pytest.mark.parametrize("uri", INVALID_WITH_PASSWORD)
def test_errors_never_show_the_password(uri: str) -> None:
    with pytest.raises(InvalidURIError) as caught:
        parse_uri(uri)
    error = caught.value
    for shown in (str(error), repr(error), repr(error.args)):
        for fragment in ("hunter2", "SECRET"):
            assert fragment not in shown
    assert error.__cause__ is None
    assert error.__suppress_context__ or error.__context__ is None
    assert str(error)  # it names the part at fault


def test_repr_masks_the_password_and_secret_options() -> None:
    uri = parse_quietly(
        f"mongodb://user:{SECRET}@example.com/admin?tlsCertificateKeyFilePassword={SECRET}1"
        f"&proxyHost=proxy&proxyUsername=pu&proxyPassword={SECRET}2"
        f"&authMechanism=SCRAM-SHA-256&authMechanismProperties=TOKEN:{SECRET}3"
    )
    assert uri.password == SECRET
    assert uri.options["proxyPassword"] == SECRET + "2"
    assert uri.options["authMechanismProperties"] == {"TOKEN": SECRET + "3"}
    for shown in (repr(uri), str(uri), repr(uri.options), str(uri.options), f"{uri}"):
        assert SECRET not in shown
        assert "hunter2" not in shown
    assert "password='***'" in repr(uri)
    assert "username='user'" in repr(uri)
    assert "password=None" in repr(parse_quietly("mongodb://user@h/"))


def test_warnings_never_show_the_password() -> None:
    _, messages = parse_warning(
        f"mongodb://user:{SECRET}@example.com/?authMechanismProperties={SECRET}"
        f"&maxPoolSize=abc&connectTimeoutMS=-1&unknownOption={SECRET}&appname=a&appname=b"
        f"&proxyHost=p&proxyUsername=u&proxyPassword={SECRET}&proxyPassword={SECRET}"
    )
    assert len(messages) == 6
    assert all(SECRET not in message and "hunter2" not in message for message in messages)
    assert any("authMechanismProperties" in m and "not shown" in m for m in messages)
    assert any("unknownOption" in m for m in messages)
    assert any("proxyPassword given more than once" in m for m in messages)
    assert any("maxPoolSize: 'abc' is not an integer" in m for m in messages)  # others are shown


def test_warnings_point_at_the_caller() -> None:
    with pytest.warns(URIOptionWarning) as caught:
        parse_uri("mongodb://h/?maxPoolSize=x")
    assert caught[0].filename == __file__


def test_a_uri_that_raises_warns_nothing() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(InvalidURIError, match="loadBalanced"):
            parse_uri("mongodb://a,b/?unknown=1&loadBalanced=true")
    assert caught == []


# ------------------------------------------------------------------------------ pool options


def test_pool_options_from_every_pool_option() -> None:
    uri = parse_quietly(
        "mongodb://lb.example/?maxPoolSize=5&minPoolSize=3&maxIdleTimeMS=50000"
        "&waitQueueTimeoutMS=2500&maxConnecting=1&loadBalanced=true"
    )
    assert uri.pool_options == PoolOptions(
        max_size=5,
        min_size=3,
        max_idle_time=50.0,
        wait_queue_timeout=2.5,
        max_connecting=1,
        load_balanced=True,
    )
    assert uri.load_balanced is True
    assert uri.pool_options.cmap_options() == {
        "maxPoolSize": 5,
        "minPoolSize": 3,
        "maxIdleTimeMS": 50000,
        "waitQueueTimeoutMS": 2500,
        "maxConnecting": 1,
        "loadBalanced": True,
    }


def test_pool_options_defaults_and_zeros() -> None:
    assert parse_quietly("mongodb://h").pool_options == PoolOptions()
    zeros = parse_quietly("mongodb://h/?maxPoolSize=0&maxIdleTimeMS=0&waitQueueTimeoutMS=0")
    assert zeros.pool_options == PoolOptions(max_size=0, max_idle_time=None)
    # maxPoolSize=0 means no limit: any minPoolSize goes
    assert parse_quietly("mongodb://h/?maxPoolSize=0&minPoolSize=500").pool_options.min_size == 500


@pytest.mark.parametrize(
    ("query", "option"),
    [
        ("maxPoolSize=-1", "maxPoolSize"),
        ("minPoolSize=x", "minPoolSize"),
        ("maxIdleTimeMS=1.5", "maxIdleTimeMS"),
        ("waitQueueTimeoutMS=-5", "waitQueueTimeoutMS"),
        ("maxConnecting=0", "maxConnecting"),
        ("loadBalanced=yes", "loadBalanced"),
        ("maxPoolSize=99999999999", "maxPoolSize"),
    ],
)
def test_invalid_pool_option_warns_and_keeps_the_default(query: str, option: str) -> None:
    uri, messages = parse_warning(f"mongodb://h/?{query}")
    assert uri.pool_options == PoolOptions()
    assert option not in uri.options
    assert len(messages) == 1 and option in messages[0] and "ignored" in messages[0]


def test_min_pool_size_above_max_pool_size_raises() -> None:
    with pytest.raises(InvalidURIError, match=r"minPoolSize \(9\) must be <= maxPoolSize \(3\)"):
        parse_uri("mongodb://h/?minPoolSize=9&maxPoolSize=3")


# ---------------------------------------------------------------------------- load balanced

LB_INVALID = {
    "two hosts": ("mongodb://a,b/?loadBalanced=true", "more than one host"),
    "replicaSet": ("mongodb://a/?loadBalanced=true&replicaSet=rs", "replicaSet"),
    "directConnection": ("mongodb://a/?loadBalanced=true&directConnection=true", "directConn"),
    "srvMaxHosts": ("mongodb+srv://a.b.c/?loadBalanced=true&srvMaxHosts=1", "srvMaxHosts"),
    "case of names": ("mongodb://a,b/?LOADBALANCED=TRUE", "more than one host"),
}


@pytest.mark.parametrize(("uri", "words"), LB_INVALID.values(), ids=list(LB_INVALID))
def test_load_balanced_rules_raise(uri: str, words: str) -> None:
    with pytest.raises(InvalidURIError, match="loadBalanced=true") as caught:
        parse_uri(uri)
    assert words in str(caught.value)


@pytest.mark.parametrize(
    "uri",
    [
        "mongodb://lb:27017/?loadBalanced=true",
        "mongodb://lb/?loadBalanced=true&directConnection=false",
        "mongodb://a,b/?loadBalanced=false&replicaSet=rs",
        "mongodb+srv://a.b.c/?loadBalanced=true&srvMaxHosts=0",
        "mongodb+srv://a.b.c/?loadBalanced=true",
    ],
)
def test_load_balanced_allowed(uri: str) -> None:
    parsed = parse_quietly(uri)
    assert parsed.load_balanced is parsed.pool_options.load_balanced
    assert parsed.load_balanced is ("loadBalanced=true" in uri)


def test_load_balanced_seed_list_from_srv_must_be_one_host() -> None:
    uri = parse_quietly("mongodb+srv://cluster.example.com/?loadBalanced=true")
    assert uri.hosts == ()
    assert uri.srv_name == "_mongodb._tcp.cluster.example.com"
    one = uri.seeded([("lb.example.com.", 27017)])
    assert one.hosts == (("lb.example.com", 27017),)
    assert one.load_balanced and one.tls
    with pytest.raises(InvalidURIError, match=r"loadBalanced=true .* more than one host"):
        uri.seeded([("a.example.com", 27017), ("b.example.com", 27017)])
    # the TXT record can turn it on, and the rules apply to the result
    plain = parse_quietly("mongodb+srv://cluster.example.com/")
    with pytest.raises(InvalidURIError, match="more than one host"):
        plain.seeded([("a.example.com", 1), ("b.example.com", 2)], "loadBalanced=true")
    with pytest.raises(InvalidURIError, match="replicaSet"):
        uri.seeded([("a.example.com", 1)], "replicaSet=rs")


# ---------------------------------------------------------------------- SRV without resolving


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("mongodb+srv://a.example.com:27017/", "no port"),
        ("mongodb+srv://a.example.com,b.example.com/", "exactly one host"),
        ("mongodb+srv://a.example.com/?directConnection=true", "directConnection"),
        ("mongodb+srv://[::1]/", "DNS name"),
        ("mongodb+srv://%2Ftmp%2Fm.sock/", "DNS name"),
        ("mongodb+srv://a..com/", "not a DNS name"),
        ("mongodb+srv:///", "no host"),
        ("mongodb+srv://a.example.com/?srvMaxHosts=2&replicaSet=rs", "srvMaxHosts"),
        ("mongodb://example.com/?srvServiceName=x", r"only for mongodb\+srv"),
        ("mongodb://example.com/?srvMaxHosts=0", r"only for mongodb\+srv"),
    ],
)
def test_srv_rules_raise(uri: str, words: str) -> None:
    with pytest.raises(InvalidURIError, match=words):
        parse_uri(uri)


def test_srv_uri_fields() -> None:
    uri = parse_quietly("mongodb+srv://Cluster0.Example.com/?srvServiceName=custom&srvMaxHosts=2")
    assert (uri.scheme, uri.srv_host, uri.hosts) == ("mongodb+srv", "cluster0.example.com", ())
    assert (uri.srv_service_name, uri.srv_max_hosts) == ("custom", 2)
    assert uri.srv_name == "_custom._tcp.cluster0.example.com"
    assert uri.tls is True  # implied by mongodb+srv
    assert parse_quietly("mongodb+srv://a.example.com/?tls=false").tls is False
    assert parse_quietly("mongodb+srv://localhost/").srv_host == "localhost"  # 1 part is allowed
    assert parse_quietly("mongodb://h").srv_name is None


def test_seeded_checks_the_domain_txt_options_and_srv_max_hosts() -> None:
    uri = parse_quietly("mongodb+srv://cluster0.example.com/?authSource=own")
    seeded = uri.seeded(
        [("a.example.com", 27017), ("b.example.com", 27018)], "replicaSet=rs&authSource=txt"
    )
    assert seeded.hosts == (("a.example.com", 27017), ("b.example.com", 27018))
    assert seeded.replica_set == "rs"
    assert seeded.auth_source == "own"  # the URI's options override the TXT record's
    with pytest.raises(InvalidURIError, match="not within the domain"):
        uri.seeded([("a.evil.com", 27017)])
    with pytest.raises(InvalidURIError, match="not allowed"):
        uri.seeded([("a.example.com", 27017)], "ssl=false")
    with pytest.raises(InvalidURIError, match="no hosts"):
        uri.seeded([])
    short = parse_quietly("mongodb+srv://mongo.local/")
    with pytest.raises(InvalidURIError, match="not within the domain"):
        short.seeded([("mongo.local", 27017)])  # needs one more level than the SRV name
    assert short.seeded([("a.mongo.local", 1)]).hosts == (("a.mongo.local", 1),)
    limited = parse_quietly("mongodb+srv://c.example.com/?srvMaxHosts=2")
    records = [(f"h{n}.example.com", 27017) for n in range(5)]
    chosen = limited.seeded(records).hosts
    assert len(chosen) == 2 and set(chosen) <= set(records)
    with pytest.raises(InvalidURIError, match="only"):
        parse_quietly("mongodb://h").seeded(records)


# --------------------------------------------------------------------------- hosts and parts


def test_hosts_ipv6_sockets_and_default_port() -> None:
    uri = parse_quietly(
        "mongodb://Example.COM,[::1]:27018,[fe80::1%25eth0],%2Ftmp%2Fmongodb-27017.sock,h:1/"
    )
    assert uri.hosts == (
        ("example.com", 27017),
        ("::1", 27018),
        ("fe80::1%eth0", 27017),
        ("/tmp/mongodb-27017.sock", None),
        ("h", 1),
    )
    assert uri.addresses == (
        "example.com:27017",
        "[::1]:27018",
        "[fe80::1%eth0]:27017",
        "/tmp/mongodb-27017.sock",
        "h:1",
    )
    assert uri.database is None


@pytest.mark.parametrize(
    ("uri", "words"),
    [
        ("http://h/", "must begin with"),
        ("mongodb://", "no host"),
        ("mongodb:///tmp/mongodb-27017.sock", "percent-encoded"),
        ("mongodb://a,,b/", "host #2 is empty"),
        ("mongodb://::1/", "more than one ':'"),
        ("mongodb://[::1/", "IPv6 literal"),
        ("mongodb://[::1]x/", "IPv6 literal"),
        ("mongodb://[zz]/", "not an IPv6 address"),
        ("mongodb://h:0/", "1..65535"),
        ("mongodb://h:/", "1..65535"),
        ("mongodb://:27017/", "no host name"),
        ("mongodb://h%41/", "only for Unix domain socket"),
        ("mongodb://h o/", "not a host name"),
        ("mongodb://h/a b", "database name"),
        ("mongodb://h/a%2Fb", "database name"),
        ("mongodb://:pw@h/", "user name is empty"),
        ("mongodb://a:b:c@h/", "more than one ':'"),
        ("mongodb://a%@h/", "percent-encoding"),
        ("mongodb://a:b@c@h/", "holds an '@'"),
        ("mongodb://h/?a=1&b=2;c=3", "not both"),
        ("mongodb://h/?tlsInsecure=true&tlsAllowInvalidCertificates=true", "both"),
        ("mongodb://h/?proxyPort=1080", "needs proxyHost"),
        ("mongodb://h/?proxyHost=p&proxyUsername=u", "go together"),
        ("mongodb://h/?authSource=", "authSource"),
        ("mongodb://h/?authMechanism=SCRAM-SHA-256", "needs a user name"),
        ("mongodb://u@h/?authMechanism=PLAIN", "needs a password"),
        ("mongodb://u@h/?authMechanism=GSSAPI&authSource=db", r"\$external"),
        ("mongodb://u@h/?authMechanism=MONGODB-AWS", "user name and password or none"),
        ("mongodb://a,b/?directConnection=true", "more than one host"),
    ],
)
def test_invalid_uris(uri: str, words: str) -> None:
    with pytest.raises(InvalidURIError, match=words):
        parse_uri(uri)


def test_credentials_and_database() -> None:
    uri = parse_quietly("mongodb://us%40er:p%3Aw+d%2F@h/my%3Fdb?authMechanism=scram-sha-256")
    assert (uri.username, uri.password, uri.database) == ("us@er", "p:w+d/", "my?db")
    assert (uri.auth_mechanism, uri.auth_source) == ("SCRAM-SHA-256", "my?db")
    assert parse_quietly("mongodb://u:p@h").auth_source == "admin"
    assert parse_quietly("mongodb://u:p@h/db.coll").auth_source == "db"
    assert parse_quietly("mongodb://u:@h").password == ""
    assert parse_quietly("mongodb://u@h/?authSource=other").auth_source == "other"
    x509 = parse_quietly("mongodb://CN%3Dclient@h/?authMechanism=MONGODB-X509&tls=true")
    assert (x509.username, x509.password, x509.auth_source) == ("CN=client", None, "$external")
    plain = parse_quietly("mongodb://u:p@h/?authMechanism=PLAIN")
    assert plain.auth_source == "$external"
    anonymous = parse_quietly("mongodb://h/db")
    assert (anonymous.username, anonymous.auth_source, anonymous.database) == (None, None, "db")


def test_handshake_fields_and_defaults() -> None:
    default = parse_quietly("mongodb://h")
    assert (default.app_name, default.tls, default.direct_connection) == (None, False, False)
    assert (default.connect_timeout, default.server_selection_timeout) == (10.0, 30.0)
    assert default.options == {} and default.replica_set is None
    uri = parse_quietly(
        "mongodb://h/?appName=my%20app&ssl=true&connectTimeoutMS=2500"
        "&serverSelectionTimeoutMS=1500&directConnection=true&replicaSet=rs"
    )
    assert (uri.app_name, uri.tls, uri.direct_connection) == ("my app", True, True)
    assert (uri.connect_timeout, uri.server_selection_timeout) == (2.5, 1.5)
    assert uri.replica_set == "rs"
    assert dict(uri.options) == {
        "appname": "my app",
        "tls": True,
        "connectTimeoutMS": 2500,
        "serverSelectionTimeoutMS": 1500,
        "directConnection": True,
        "replicaSet": "rs",
    }
    assert parse_quietly("mongodb://h/?connectTimeoutMS=0").connect_timeout is None
    assert parse_quietly("mongodb://h/?tlsCAFile=ca.pem").tls is True  # implied
    assert parse_quietly("mongodb://h/?tls=true&ssl=true").tls is True  # agreeing is fine
    assert parse_quietly("mongodb://h?appname=x").app_name == "x"  # no '/' before '?'


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("readPreferenceTags=dc:ny,rack:1&readPreferenceTags=", ({"dc": "ny", "rack": "1"}, {})),
        ("compressors=zstd,ZLIB", ("zstd", "zlib")),
        ("w=majority", "majority"),
        ("w=2", 2),
        ("readPreference=SECONDARYpreferred", "secondaryPreferred"),
        (
            "authMechanismProperties=TOKEN_RESOURCE:mongodb://foo",
            {"TOKEN_RESOURCE": "mongodb://foo"},
        ),
        ("maxStalenessSeconds=-1", -1),
        ("zlibCompressionLevel=9", 9),
        ("wTimeoutMS=4294967296", 4294967296),
    ],
)
def test_option_kinds(query: str, expected: Any) -> None:
    uri = parse_quietly(f"mongodb://u:p@h/?{query}&authMechanism=SCRAM-SHA-1")
    name = query.partition("=")[0]
    assert uri.options[name] == expected


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("unknown=1", "unsupported URI option 'unknown'"),
        ("maxPoolSize=1&maxPoolSize=2", "more than once"),
        ("compressors=zstd,lz4", "unsupported ['lz4'] left out"),
        ("readPreference=fastest", "not one of"),
        ("heartbeatFrequencyMS=499", "from 500 to 2**31 - 1"),
        ("zlibCompressionLevel=10", "from -1 to 9"),
        ("srvServiceName=-bad", "service name"),
        ("appname=" + "x" * 129, "128 bytes"),
        ("w=-1", "from 0 to"),
        ("maxPoolSize=2147483648", "from 0 to 2**31 - 1"),  # (the upper limit too)
        ("retryWrites=1", "'true' or 'false'"),
    ],
)
def test_option_warnings(query: str, words: str) -> None:
    uri = "mongodb+srv://a.b.c/?" if "srv" in query else "mongodb://h/?"
    _, messages = parse_warning(uri + query)
    assert any(words in message for message in messages), messages


def test_empty_values_are_ignored_silently() -> None:
    uri = parse_quietly("mongodb://h/?maxPoolSize=&tls=&&replicaSet=")
    assert dict(uri.options) == {"replicaSet": ""}


def test_uri_options_mapping() -> None:
    options = URIOptions({"maxPoolSize": 5, "proxyPassword": "pw"})
    assert options["MAXPOOLSIZE"] == options["maxpoolsize"] == 5
    assert "maxPoolSize" in options and "MaxPoolSize" in options and "max" not in options
    assert list(options) == ["maxPoolSize", "proxyPassword"]
    assert options == {"maxPoolSize": 5, "proxyPassword": "pw"}
    assert "pw" not in repr(options)
    with pytest.raises(KeyError):
        options["minPoolSize"]
    with pytest.raises(TypeError):
        options["x"] = 1  # type: ignore[index]


def test_mongo_uri_is_frozen_and_hashable() -> None:
    uri = parse_quietly("mongodb://h/?maxPoolSize=5")
    with pytest.raises(dataclasses.FrozenInstanceError):
        uri.tls = True  # type: ignore[misc]
    assert hash(uri) == hash(parse_quietly("mongodb://h/?maxPoolSize=5"))
    assert uri == parse_quietly("mongodb://h/?maxPoolSize=5")
    assert not hasattr(uri, "__dict__")
