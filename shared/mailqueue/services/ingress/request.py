"""Parsing of `POST /v1/messages` bodies into an envelope: pure, raises InvalidInput.

Only the shape of the request is checked here (types, required fields, base64, enums),
and that it is text: bounded in size and depth before the parser runs, every string
encodable (no lone surrogate) and free of control characters. RFC 5321/5322 rules stay in
`mailqueue.core.validate` and `AwsStorage.validate`, which the service calls, so each rule
lives in one place.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from mailqueue.core.errors import InvalidInput, MailqueueError
from mailqueue.core.jsonbody import MAX_JSON_DEPTH as MAX_JSON_DEPTH  # re-exported
from mailqueue.core.jsonbody import parse_body as parse_body  # re-exported (tests, callers)
from mailqueue.core.model import Envelope, Notify, Priority, Recipient, Ret
from mailqueue.core.transitions import RESERVED_TAG_PREFIXES
from mailqueue.core.validate import check_text

T = TypeVar("T")

FIELDS = frozenset(
    {
        "sender",
        "recipients",
        "content",
        "upload_id",
        "ret",
        "envid",
        "not_before",
        "smtputf8",
        "tags",
        "priority",
    }
)
RECIPIENT_FIELDS = frozenset({"address", "notify", "orcpt"})
UPLOAD_ID_RE = re.compile(r"^[0-9a-f]{32}$")
IDEMPOTENCY_KEY_RE = re.compile(r"^[\x21-\x7e]{1,255}$")
_ORCPT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*;\S.*$")
_PRINTABLE_RE = re.compile(r"^[\x20-\x7e]*$")

# body allowance per recipient on top of the content's base64: address (≤ 256), ORCPT
# (≤ 500 characters, 6 octets each when \u-escaped), NOTIFY, JSON punctuation
RECIPIENT_ALLOWANCE = 4096
BODY_OVERHEAD = 64 * 1024


@dataclass(frozen=True, slots=True)
class Submission:
    """A parsed request: the envelope and either inline content or an upload to fetch."""

    envelope: Envelope
    content: bytes | None
    upload_id: str | None
    not_before: datetime | None
    priority: Priority | None = None  # None: the caller's default (IngressSettings)


def _type_error(field: str, expected: str) -> InvalidInput:
    return InvalidInput("invalid_type", f"{field} must be {expected}", field)


def body_limit(max_size: int, max_recipients: int) -> int:
    """The largest body a valid request can need: the content's base64, every recipient
    with its longest parameters, the rest. Larger is refused before it is parsed."""
    return (max_size + 2) // 3 * 4 + max_recipients * RECIPIENT_ALLOWANCE + BODY_OVERHEAD


def guard_parse(fn: Callable[[], T]) -> T:
    """Run a parsing/validation step; whatever it raises is the client's input, not ours.

    The last line of defence behind the explicit checks: a parser or validator that fails
    in an unforeseen way answers 400 ``invalid_request`` rather than 500. Storage errors
    (a `MailqueueError`) pass through unchanged: they are not the client's doing.
    """
    try:
        return fn()
    except MailqueueError:
        raise
    except RecursionError as e:
        raise InvalidInput("json_too_deep", "request is nested too deeply", None) from e
    except Exception as e:  # the last line of defence, see the docstring
        raise InvalidInput("invalid_request", "the request could not be read", None) from e


def _text(value: Any, field: str, expected: str) -> str:
    """A string field: the right type, then encodable text without controls."""
    if not isinstance(value, str):
        raise _type_error(field, expected)
    check_text(value, field)
    return value


def parse_submission(
    doc: dict[str, Any],
    *,
    max_size: int,
    now: datetime,
    max_delay_seconds: int,
    max_recipients: int | None = None,
) -> Submission:
    unknown = sorted(set(doc) - FIELDS)
    if unknown:
        raise InvalidInput("unknown_field", f"unknown field {unknown[0]!r}", unknown[0])
    if "sender" not in doc:
        raise InvalidInput("missing_field", 'sender is required ("" for the null sender)', "sender")
    sender = _text(doc["sender"], "sender", "a string")
    smtputf8 = doc.get("smtputf8", False)
    if not isinstance(smtputf8, bool):
        raise _type_error("smtputf8", "true or false")
    if "recipients" not in doc:
        raise InvalidInput("missing_field", "recipients is required", "recipients")
    raw_rcpts = doc["recipients"]
    if not isinstance(raw_rcpts, list):
        raise _type_error("recipients", "a list")
    if max_recipients is not None and len(raw_rcpts) > max_recipients:
        # before each is parsed: a million-entry list costs nothing more than the count
        raise InvalidInput(
            "too_many_recipients", f"at most {max_recipients} recipients", "recipients"
        )
    recipients = tuple(_recipient(r, i) for i, r in enumerate(raw_rcpts))
    envelope = Envelope(
        sender=sender,
        recipients=recipients,
        ret=_ret(doc.get("ret")),
        envid=_envid(doc.get("envid")),
        smtputf8=smtputf8,
        tags=_tags(doc.get("tags")),
    )
    content, upload_id = _content(doc, max_size)
    return Submission(
        envelope=envelope,
        content=content,
        upload_id=upload_id,
        not_before=_not_before(doc.get("not_before"), now, max_delay_seconds),
        priority=_priority(doc.get("priority")),
    )


def _recipient(raw: Any, i: int) -> Recipient:
    field = f"recipients[{i}]"
    if isinstance(raw, str):
        return Recipient(rid="", address=_text(raw, f"{field}.address", "a string"))
    if not isinstance(raw, dict):
        raise _type_error(field, "an address string or an object")
    unknown = sorted(set(raw) - RECIPIENT_FIELDS)
    if unknown:
        name = unknown[0]
        raise InvalidInput("unknown_field", f"unknown field {name!r}", f"{field}.{name}")
    if "address" not in raw:
        raise InvalidInput("missing_field", "address is required", f"{field}.address")
    address = _text(raw["address"], f"{field}.address", "a string")
    return Recipient(
        rid="",
        address=address,
        notify=_notify(raw.get("notify"), f"{field}.notify"),
        orcpt=_orcpt(raw.get("orcpt"), f"{field}.orcpt"),
    )


def _notify(raw: Any, field: str) -> tuple[Notify, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
        raise _type_error(field, "a list of NOTIFY keywords")
    for j, n in enumerate(raw):
        check_text(n, f"{field}[{j}]")
    if not raw:
        raise InvalidInput("invalid_notify", "notify must not be empty (omit it instead)", field)
    out: list[Notify] = []
    for n in raw:
        try:
            value = Notify(n.upper())
        except ValueError as e:
            raise InvalidInput(
                "invalid_notify", "notify values are NEVER, SUCCESS, FAILURE, DELAY", field
            ) from e
        if value not in out:
            out.append(value)
    return tuple(out)  # NEVER combined with others is refused by the storage's validate


def _orcpt(raw: Any, field: str) -> str | None:
    if raw is None:
        return None
    orcpt = _text(raw, field, "a string")
    if not _ORCPT_RE.match(orcpt):
        raise InvalidInput("invalid_orcpt", "orcpt must be '<addr-type>;<address>'", field)
    return orcpt


def _ret(raw: Any) -> Ret | None:
    if raw is None:
        return None
    _text(raw, "ret", "a string")
    try:
        return Ret(raw.upper())
    except ValueError as e:
        raise InvalidInput("invalid_ret", "ret must be FULL or HDRS", "ret") from e


def _priority(raw: Any) -> Priority | None:
    if raw is None:
        return None
    _text(raw, "priority", "a string")
    try:
        return Priority(raw.lower())
    except ValueError as e:
        raise InvalidInput(
            "invalid_priority", "priority must be transactional or bulk", "priority"
        ) from e


def _envid(raw: Any) -> str | None:
    if raw is None:
        return None
    envid = _text(raw, "envid", "a string")
    if not envid or not _PRINTABLE_RE.match(envid):
        raise InvalidInput("invalid_envid", "envid must be printable ASCII", "envid")
    return envid  # the length limit is the storage's


def _content(doc: dict[str, Any], max_size: int) -> tuple[bytes | None, str | None]:
    has_content = "content" in doc and doc["content"] is not None
    has_upload = "upload_id" in doc and doc["upload_id"] is not None
    if has_content and has_upload:
        raise InvalidInput(
            "ambiguous_content", "give either content or upload_id, not both", "upload_id"
        )
    if has_upload:
        upload_id = _text(doc["upload_id"], "upload_id", "a string")
        if not UPLOAD_ID_RE.match(upload_id):
            # checked strictly: the id becomes part of an S3 key we read and delete
            raise InvalidInput("unknown_upload", "no such upload", "upload_id")
        return None, upload_id
    if not has_content:
        raise InvalidInput("missing_field", "content (base64) or upload_id is required", "content")
    raw = doc["content"]
    if not isinstance(raw, str):
        raise _type_error("content", "a base64 string")
    if len(raw) > (max_size + 2) // 3 * 4:  # refuse before decoding
        raise InvalidInput("too_large", f"content exceeds {max_size} octets", "content")
    try:
        content = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as e:
        raise InvalidInput("invalid_base64", "content is not valid base64", "content") from e
    return content, None


def _tags(raw: Any) -> tuple[tuple[str, str], ...]:
    """`{"name": "value", ...}` (SES's MessageTags as an object); SES's rules are checked
    with the rest of the envelope (transitions.validate_tags)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise _type_error("tags", "an object of tag names to string values")
    out: list[tuple[str, str]] = []
    for name, value in raw.items():
        if not isinstance(value, str):
            raise _type_error("tags", "an object of tag names to string values")
        check_text(name, "tags")
        check_text(value, "tags")
        if name.lower().startswith(RESERVED_TAG_PREFIXES):  # ours are set by the queue
            raise InvalidInput(
                "reserved_tag",
                "tag names starting ses:, aws: or mailqueue: are reserved",
                f"tags.{name[:64]}",
            )
        out.append((name, value))
    return tuple(out)


def _not_before(raw: Any, now: datetime, max_delay_seconds: int) -> datetime | None:
    if raw is None:
        return None
    _text(raw, "not_before", "an ISO-8601 string")
    try:
        ts = datetime.fromisoformat(raw)
    except ValueError as e:
        raise InvalidInput(
            "invalid_not_before", "not_before is not an ISO-8601 timestamp", "not_before"
        ) from e
    if ts.tzinfo is None:
        raise InvalidInput(
            "invalid_not_before", "not_before needs a time zone (e.g. 'Z')", "not_before"
        )
    if ts - now > timedelta(seconds=max_delay_seconds):
        raise InvalidInput(
            "invalid_not_before",
            f"not_before lies more than {max_delay_seconds} s in the future",
            "not_before",
        )
    return ts


def check_idempotency_key(key: str, field: str = "Idempotency-Key") -> str:
    if not IDEMPOTENCY_KEY_RE.match(key):
        raise InvalidInput(
            "invalid_idempotency_key",
            f"{field} must be 1..255 printable ASCII characters without spaces",
            field,
        )
    return key


def parse_batch(doc: dict[str, Any], *, max_batch: int) -> list[Any]:
    """The mails of a `POST /v1/messages/batch` body, `{"messages": [...]}`, unparsed:
    each is taken by the single route's code, so a bad one is that mail's refusal. Only
    the request's own shape is checked here (its problems refuse the whole request)."""
    unknown = sorted(set(doc) - {"messages"})
    if unknown:
        raise InvalidInput("unknown_field", f"unknown field {unknown[0]!r}", unknown[0])
    if "messages" not in doc:
        raise InvalidInput("missing_field", "messages is required", "messages")
    messages = doc["messages"]
    if not isinstance(messages, list):
        raise _type_error("messages", "a list of messages")
    if not messages:
        raise InvalidInput("empty_batch", "messages must not be empty", "messages")
    if len(messages) > max_batch:
        raise InvalidInput(
            "too_many_messages", f"at most {max_batch} messages per request", "messages"
        )
    return messages


def printable(value: str) -> str:
    """A client string made safe to store in an event: bounded, encodable."""
    return value[:320].encode("utf-8", "replace").decode("utf-8")


def preview(doc: Any) -> tuple[str, tuple[str, ...]]:
    """Sender and recipients of a (possibly invalid) request, bounded, for Reject events."""
    if not isinstance(doc, dict):
        return "", ()
    sender = doc.get("sender")
    rcpts = doc.get("recipients")
    out: list[str] = []
    if isinstance(rcpts, list):
        for r in rcpts[:50]:
            a = r.get("address") if isinstance(r, dict) else r
            if isinstance(a, str):
                out.append(printable(a))
    return (printable(sender) if isinstance(sender, str) else ""), tuple(out)
