"""The mailbox grammar (mailqueue.core.address): RFC 5321 §4.1.2/§4.1.3 + RFC 6531.

Examples pin the decisions documented in the module; the properties generate mailboxes
from the RFC's ABNF (every production, not only the common ones) and check that each is
accepted and round-trips through its wire form, and that an independent transcription
of the ABNF agrees with the parser on arbitrary ASCII strings.
"""

from __future__ import annotations

import ipaddress
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mailqueue.core import address
from mailqueue.core.address import AddressError, parse, parse_path, wire_path
from mailqueue.core.errors import InvalidInput
from mailqueue.core.validate import validate_address

# ------------------------------------------------------------------ examples

VALID = [
    # address, local (meaning), wire, key, smtputf8
    ("john.smith@example.org", "john.smith", "john.smith@example.org",
     "john.smith@example.org", False),
    ('"john"@Example.ORG', "john", "john@Example.ORG", "john@example.org", False),
    ('"a<b>c"@example.net', "a<b>c", '"a<b>c"@example.net', "a<b>c@example.net", False),
    ('"a\\b"@example.net', "ab", "ab@example.net", "ab@example.net", False),
    ('"a\\"b"@example.net', 'a"b', '"a\\"b"@example.net', 'a"b@example.net', False),
    ('"a\\\\b"@example.net', "a\\b", '"a\\\\b"@example.net', "a\\b@example.net", False),
    ('"x@y z"@example.net', "x@y z", '"x@y z"@example.net', "x@y z@example.net", False),
    ('"a..b"@example.net', "a..b", '"a..b"@example.net', "a..b@example.net", False),
    ("!#$%&'*+/=?^_`{|}~-@example.net", "!#$%&'*+/=?^_`{|}~-",
     "!#$%&'*+/=?^_`{|}~-@example.net", "!#$%&'*+/=?^_`{|}~-@example.net", False),
    ("u@[192.0.2.1]", "u", "u@[192.0.2.1]", "u@[192.0.2.1]", False),
    ("u@[IPv6:2001:DB8::1]", "u", "u@[IPv6:2001:DB8::1]", "u@[ipv6:2001:db8::1]", False),
    ("u@[ipv6:::ffff:192.0.2.1]", "u", "u@[ipv6:::ffff:192.0.2.1]",
     "u@[ipv6:::ffff:c000:201]", False),
    ("jörg@bücher.example", "jörg", "jörg@bücher.example", "jörg@xn--bcher-kva.example", True),
    ('"jö rg"@example.net', "jö rg", '"jö rg"@example.net', "jö rg@example.net", True),
    ("a@xn--bcher-kva.example", "a", "a@xn--bcher-kva.example", "a@xn--bcher-kva.example",
     False),
    ("a@BÜCHER.example", "a", "a@BÜCHER.example", "a@xn--bcher-kva.example", True),
]


@pytest.mark.parametrize(("addr", "local", "wire", "key", "utf8"), VALID)
def test_valid_addresses(addr: str, local: str, wire: str, key: str, utf8: bool) -> None:
    box = parse(addr)
    assert (box.local, box.wire, box.key, box.smtputf8) == (local, wire, key, utf8)
    assert wire_path(addr) == f"<{wire}>"
    assert validate_address(addr, "a", smtputf8=True) == addr
    if addr.isascii():
        assert validate_address(addr, "a") == addr


INVALID = [
    ("", "invalid_address"),
    ("no-at-sign", "invalid_address"),
    ("@example.org", "invalid_address"),
    ("a@", "invalid_address"),
    ('""@example.org', "invalid_address"),  # an empty local part
    ("a..b@example.org", "invalid_address"),
    (".a@example.org", "invalid_address"),
    ("a<b@example.org", "invalid_address"),  # unquoted specials
    ("a b@example.org", "invalid_address"),
    ('"a"b"@example.org', "invalid_address"),
    ('"a\\"@example.org', "invalid_address"),  # the escape eats the closing quote
    ('"a\tb"@example.org', "invalid_address"),
    ("a@localhost", "invalid_address"),  # not fully qualified
    ("a@example.org.", "invalid_address"),
    ("a@-x.example", "invalid_address"),
    ("a@x-.example", "invalid_address"),
    ("a@x_y.example", "invalid_address"),
    ("a@" + "x" * 64 + ".example", "invalid_address"),
    ("a@[256.0.0.1]", "invalid_address"),
    ("a@[010.0.0.1]", "invalid_address"),  # leading zero: octal to some parsers
    ("a@[192.0.2.1", "invalid_address"),
    ("a@[IPv6:1:2:3:4:5:6:7::]", "invalid_address"),  # "::" must stand for >= 2 groups
    ("a@[IPv6:1:2:3:4:5:6:7]", "invalid_address"),
    ("a@[IPv6:1:2:3:4:5:6:7:8:9]", "invalid_address"),
    ("a@[IPv6:1::2::3]", "invalid_address"),
    ("a@[IPv6:fe80::1%eth0]", "invalid_address"),
    ("a@[IPv6:1.2.3.4]", "invalid_address"),
    ("a@[IPv6:1:2:3:4:5::1.2.3.4]", "invalid_address"),  # v4-comp: at most 4 groups
    ("a@[x400:c=gb;a=x]", "invalid_address"),  # General-address-literal: no such tag
    ("a@[192.0.2.1]x", "invalid_address"),
    ("jörg@example.org\x85", "invalid_address"),  # C1 control
    ("jö\x85rg@example.org", "invalid_address"),
    ("a\x7fb@example.org", "invalid_address"),  # DEL
    ('"a\x7fb"@example.org', "invalid_address"),
    ("a\ud800@example.org", "invalid_address"),  # a lone surrogate is not UTF-8
    ("x" * 65 + "@example.org", "address_too_long"),
    ('"' + " " * 63 + '"@example.org', "address_too_long"),  # 65 octets on the wire
    ("a@" + ".".join(["x" * 60] * 5) + ".example", "address_too_long"),
    ("x" * 64 + "@" + ".".join(["y" * 60] * 3) + ".example.org", "address_too_long"),
    ("a" * 2000 + "@example.org", "address_too_long"),
]


@pytest.mark.parametrize(("addr", "code"), INVALID)
def test_invalid_addresses(addr: str, code: str) -> None:
    with pytest.raises(AddressError) as exc:
        parse(addr)
    assert exc.value.code == code
    with pytest.raises(InvalidInput) as inv:
        validate_address(addr, "recipients[0].address", smtputf8=True)
    assert (inv.value.code, inv.value.field) == (code, "recipients[0].address")


def test_needless_quotes_within_limits_are_measured_on_the_wire() -> None:
    """64 octets on the wire, 66 as submitted: accepted, sent unquoted."""
    box = parse('"' + "x" * 64 + '"@example.org')
    assert box.wire == "x" * 64 + "@example.org"


def test_non_ascii_needs_smtputf8_declared() -> None:
    for addr in ("jörg@example.org", "a@bücher.example", '"jö"@example.org'):
        with pytest.raises(AddressError) as exc:
            parse(addr, smtputf8=False)
        assert exc.value.code == "smtputf8_required"
        parse(addr, smtputf8=True)


def test_parse_path_finds_the_closing_bracket_by_the_grammar() -> None:
    box, rest = parse_path('<"a>b\\">"@example.org> NOTIFY=NEVER')
    assert box is not None and box.local == 'a>b">' and rest == "NOTIFY=NEVER"
    assert parse_path("<> SIZE=10") == (None, "SIZE=10")
    for bad in ("a@example.org", '<"a>@example.org', "<a@example.org"):
        with pytest.raises(AddressError):
            parse_path(bad)


# ------------------------------------------------------------------ the ABNF, generated

ATEXT = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+/=?^_`{|}~-"
QTEXT = "".join(chr(c) for c in [32, 33, *range(35, 92), *range(93, 127)])
PRINTABLE = "".join(chr(c) for c in range(32, 127))
NON_ASCII = st.characters(min_codepoint=0xA0, max_codepoint=0x10FFFF, categories=["L", "N"])
LET_DIG = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

atoms = st.text(ATEXT, min_size=1, max_size=8)
dot_strings = st.lists(atoms, min_size=1, max_size=4).map(".".join)
qcontent = st.one_of(
    st.sampled_from(QTEXT), st.sampled_from(PRINTABLE).map(lambda c: "\\" + c)
)
quoted_strings = st.lists(qcontent, min_size=1, max_size=20).map(lambda x: '"' + "".join(x) + '"')
sub_domains = st.builds(
    lambda a, mid, b: a + (mid + b if b else ""),
    st.sampled_from(LET_DIG),
    st.text(LET_DIG + "-", max_size=10),
    st.one_of(st.just(""), st.sampled_from(LET_DIG)),
)
domains = st.lists(sub_domains, min_size=2, max_size=4).map(".".join)
octets = st.integers(0, 255).map(str)
ipv4 = st.lists(octets, min_size=4, max_size=4).map(".".join)
hex4 = st.integers(0, 0xFFFF).flatmap(
    lambda n: st.sampled_from([f"{n:x}", f"{n:X}", f"{n:04x}"])
)


@st.composite
def ipv6(draw: st.DrawFn) -> str:
    """The four IPv6-addr forms of RFC 5321 §4.1.3."""
    form = draw(st.sampled_from(["full", "comp", "v4-full", "v4-comp"]))
    if form == "full":
        return ":".join(draw(st.lists(hex4, min_size=8, max_size=8)))
    if form == "v4-full":
        return ":".join(draw(st.lists(hex4, min_size=6, max_size=6))) + ":" + draw(ipv4)
    most = 6 if form == "comp" else 4
    n = draw(st.integers(0, most))
    left = draw(st.integers(0, n))
    groups = draw(st.lists(hex4, min_size=n, max_size=n))
    text = ":".join(groups[:left]) + "::" + ":".join(groups[left:])
    if form == "v4-comp":
        text += (":" if n > left else "") + draw(ipv4)
    return text


literals = st.one_of(
    ipv4.map(lambda a: f"[{a}]"),
    st.builds(lambda tag, a: f"[{tag}:{a}]", st.sampled_from(["IPv6", "ipv6", "IPV6"]), ipv6()),
)
u_labels = st.text(NON_ASCII, min_size=1, max_size=6)


def _no_leading_zero(s: str) -> bool:
    return not re.search(r"(?:^|[.\[:])0\d", s)


@st.composite
def mailboxes(draw: st.DrawFn) -> str:
    """An RFC 5321 Mailbox (with RFC 6531 non-ASCII in a quarter), within the limits."""
    utf8 = draw(st.integers(0, 3)) == 0
    local = draw(st.one_of(dot_strings, quoted_strings))
    if utf8 and draw(st.booleans()):
        local = draw(st.text(NON_ASCII, min_size=1, max_size=5)) + "." + draw(dot_strings)
    domain = draw(st.one_of(domains, literals))
    if utf8 and not domain.startswith("["):
        domain = draw(u_labels) + "." + domain
    return f"{local}@{domain}"


@settings(max_examples=400)
@given(addr=mailboxes())
def test_every_abnf_mailbox_is_accepted_and_round_trips(addr: str) -> None:
    try:
        box = parse(addr)
    except AddressError as e:
        # only the documented refusals of valid ABNF: limits, IPv4 leading zeros, U-labels
        # IDNA 2003 refuses (e.g. unassigned code points)
        assert (
            e.code == "address_too_long"
            or not _no_leading_zero(addr.rpartition("@")[2])
            or e.reason == "domain has an invalid U-label"
        ), (addr, e.code, e.reason)
        return
    again = parse(box.wire)
    assert (again.local, again.domain, again.key, again.wire) == (
        box.local, box.domain, box.key, box.wire
    )
    assert parse_path(f"<{box.wire}> NOTIFY=NEVER") == (box, "NOTIFY=NEVER")
    assert box.smtputf8 == (not addr.isascii())
    assert len(box.wire.encode()) + 2 <= address.MAX_PATH


# an independent transcription of the ASCII ABNF (with this queue's documented profile)
_A = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_DOT = rf"{_A}+(?:\.{_A}+)*"
_QS = r'"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])+"'
_SUB = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_OCT = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_ORACLE = re.compile(
    rf"(?:{_DOT}|{_QS})@(?:{_SUB}(?:\.{_SUB})+|\[{_OCT}(?:\.{_OCT}){{3}}\])"
)
_ALPHABET = st.sampled_from(list(ATEXT + '".@[]\\<> ') + ["\x7f", ":", "-"])


@settings(max_examples=600)
@given(addr=st.one_of(st.text(_ALPHABET, max_size=24), mailboxes().filter(str.isascii)))
def test_ascii_parser_agrees_with_the_abnf(addr: str) -> None:
    if "[" in addr.rpartition("@")[2] and ":" in addr.rpartition("@")[2]:
        return  # IPv6 literals: checked against the generated forms above
    try:
        box = parse(addr, smtputf8=False)
    except AddressError as e:
        assert e.code == "address_too_long" or not _ORACLE.fullmatch(addr), (addr, e.reason)
        if e.code == "address_too_long":
            assert len(addr) > address.MAX_LOCAL_PART
        return
    assert _ORACLE.fullmatch(addr), addr
    assert all(len(lb) <= 63 for lb in box.domain_key.split("."))


def test_ipv6_keys_are_canonical() -> None:
    a = parse("u@[IPv6:2001:0db8:0000:0000:0000:0000:0000:0001]")
    b = parse("u@[ipv6:2001:db8::1]")
    assert a.key == b.key == f"u@[ipv6:{ipaddress.IPv6Address('2001:db8::1')}]"
    assert a.wire != b.wire  # sent as given


def test_the_non_ascii_classes_match_exactly_the_rfc_ranges() -> None:
    """The UTF8-non-ascii set is written as a negated class (it compiles in far less cold
    start time); every code point is classified as the positive ranges of RFC 3629 less the
    C1 controls would, for each class built from it."""
    everything = "".join(map(chr, range(0x110000)))
    ranges = "\u00a0-\ud7ff\ue000-\U0010ffff"
    for ours, rfc in (
        (address._DOT_ATOM_CHAR, f"[{address._ATEXT}{ranges}]"),
        (address._NON_ASCII, f"[{ranges}]"),
        (r"(?:[A-Za-z0-9-]|" + address._NON_ASCII + ")", f"[A-Za-z0-9{ranges}-]"),
    ):
        assert re.sub(ours, "", everything) == re.sub(rfc, "", everything)
    assert address._DOT_STRING_UTF8.fullmatch("jos\u00e9.d\U0001f600") is not None
    assert address._DOT_STRING_UTF8.fullmatch("a\x85b") is None  # C1 control
    assert address._QUOTED_UTF8.fullmatch('"a b\u00e9\\"c"') is not None
    assert address._U_LABEL.fullmatch("b\u00fccher") is not None
    assert address._U_LABEL.fullmatch("a" * 64) is None
