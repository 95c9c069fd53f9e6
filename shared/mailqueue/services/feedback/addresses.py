"""The addresses a bounce may name, normalised and validated. Pure functions.

Why a module of its own: an address read out of a receiver's report goes on the
suppression list, so a wrong one stops mail to someone who is fine. Reports write
addresses in many ways (`rfc822; <a@b>`, Exchange's `dda:SMTP=a@b`, `'a@b'`, `a@b...`
before a reply, `mailto:a@b`); what is left after the decoration is removed must be an
address the queue could have sent to (RFC 5321 dot-atom local part of ≤ 64 octets, a
host name of LDH labels with a non-numeric top label, ≤ 254 octets in all), or there is
no address. And the text a bounce quotes from the returned message (its header fields,
quoted lines) is not the bounce speaking: `own_text` removes it before addresses are
looked for, so a mailing list's List-Post or the original's From is never reported.
"""

from __future__ import annotations

import re

# RFC 5322 atext, as RFC 5321's Dot-string uses it
_ATEXT = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~-"
_LOCAL_RE = re.compile(rf"^[{_ATEXT}]+(?:\.[{_ATEXT}]+)*$")
_LABEL_RE = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_TOP_RE = re.compile(r"^(?:[A-Za-z]{2,63}|xn--[A-Za-z0-9-]{1,59})$")
# a typed or tagged address: `rfc822;`, `smtp;`, `SMTP=`, `dda:SMTP=`, `mailto:`, `RCPT TO:`
_PREFIX_RE = re.compile(
    r"^(?:(?:rfc822|smtp|x400|utf-8|unknown)\s*;\s*|(?:dda:)?smtp\s*[=:]\s*|"
    r"mailto:|(?:rcpt|mail)\s+(?:to|from)\s*:\s*)",
    re.I,
)
# wrapping characters a report puts around an address
_WRAP = "<>()[]{}\"'`,;:.!? \t\r\n*"
MAX_ADDRESS = 254  # RFC 5321 4.5.3.1.3: a path of 256 octets, its angle brackets included
MAX_LOCAL = 64


def clean_address(value: str) -> str:
    """The address in a field or a clipped mention, lower-cased; "" when what is left is
    not a valid address. Case is folded as the suppression list keys it."""
    v = value.strip()
    for _ in range(3):  # `rfc822; <SMTP=a@b>`: several layers
        w = _PREFIX_RE.sub("", v.strip(_WRAP))
        if w == v:
            break
        v = w
    v = v.strip(_WRAP)
    if v.count("@") != 1:
        return ""
    local, _, domain = v.rpartition("@")
    # junk stuck to the domain: `a@b.net...user` (sendmail's "... User unknown")
    domain = re.split(r"\.{2,}|[^A-Za-z0-9.-]", domain, maxsplit=1)[0].rstrip(".-")
    # a local part is never led by quoting or a comment mark left over: `'a`, `#a`
    local = local.lstrip("'\"#`")
    return f"{local}@{domain}".lower() if valid_address(local, domain) else ""


def valid_address(local: str, domain: str) -> bool:
    if not local or len(local) > MAX_LOCAL or not _LOCAL_RE.match(local):
        return False
    labels = domain.split(".")
    if len(labels) < 2 or len(local) + 1 + len(domain) > MAX_ADDRESS:
        return False
    return all(_LABEL_RE.match(x) for x in labels) and bool(_TOP_RE.match(labels[-1]))


# header fields of a returned message, when a bounce quotes them in its text
_QUOTED_FIELD = re.compile(
    r"^(?:from|to|cc|bcc|reply-to|sender|return-path|message-id|in-reply-to|"
    r"references|received|delivered-to|envelope-to|errors-to|resent-[a-z-]+|"
    r"list-[a-z-]+|authentication-results|arc-[a-z-]+|dkim-signature|"
    r"domainkey-signature|received-spf|x-[a-z0-9-]+|mail-followup-to|"
    r"disposition-notification-to|return-receipt-to|content-[a-z-]+|mime-version|"
    r"subject|date|thread-[a-z-]+|precedence|feedback-id)[ \t]*:",
    re.I,
)
# the returned message summarised, indented ("  From: a@b", "  Subject: ..."): one line
# each (an indented line is not folded into the next: transcripts indent their lines too)
_SUMMARY_FIELD = re.compile(
    r"^[ \t]+(?:from|to|cc|bcc|reply-to|sender|return-path|message-id|subject|date|sent)"
    r"[ \t]*:[ \t]",
    re.I,
)
_QUOTED_LINE = re.compile(r"^[ \t]*>(?!>>)")  # ">>> RCPT TO": a transcript, not a quote


def own_text(text: str) -> str:
    """A bounce's prose without what it quotes of the returned message: header field
    lines (and their folded continuations) and `>`-quoted lines become empty lines, so
    line positions and the text around the report's own mentions stay as they were."""
    lines = text.splitlines()
    quoted = sum(bool(_QUOTED_LINE.match(x)) for x in lines)
    if quoted * 2 > sum(bool(x.strip()) for x in lines):
        # most of it is quoted: a report forwarded whole, the quoting is not ours to drop
        lines = [re.sub(r"^[ \t]*>[ \t]?", "", x) for x in lines]
    out: list[str] = []
    in_field = False
    for line in lines:
        if _SUMMARY_FIELD.match(line):
            in_field = False
            out.append("")
            continue
        if _QUOTED_FIELD.match(line) or _QUOTED_LINE.match(line):
            in_field = not _QUOTED_LINE.match(line)
            out.append("")
            continue
        if in_field and line[:1] in (" ", "\t") and line.strip():
            out.append("")
            continue
        in_field = False
        out.append(line)
    return "\n".join(out)


_SUMMARY_TO = re.compile(r"^[ \t]*to[ \t]*:[ \t]*(.+)$", re.I | re.M)


def summary_recipient(text: str) -> str:
    """The one address of the `To:` lines a notice names the failed message by, in its own
    text ("I'm afraid I wasn't able to deliver the following message. ... Subject: s /
    To: a@b": Yahoo's), lower case; "" when there is none or more than one. Read only
    when the notice names no recipient otherwise: a To: line is the returned message's,
    and a list's address would be one, so the caller takes it as a last resort."""
    found = {
        a
        for m in _SUMMARY_TO.finditer(text)
        for a in (clean_address(x) for x in re.split(r"[,\s]+", m.group(1)))
        if a
    }
    return next(iter(found)) if len(found) == 1 else ""


def message_ids(text: str) -> set[str]:
    """Addresses that are message ids (`Message-ID: <x@y>`, "message id <x@y>"), lower
    case: the addr-spec form of an id is not a mailbox."""
    return {
        m.group(1).lower()
        for m in re.finditer(
            r"(?:message[- ]?id|in-reply-to|references)[\s:=]*<?([^\s<>@]+@[^\s<>]+?)>",
            text,
            re.I,
        )
    }
