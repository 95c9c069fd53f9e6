"""A received report's header block with broken folding mended. A pure function.

Why: some relays unfold long fields badly and leave a continuation line flush left
(`Received-SPF: pass (...)` / `envelope-from=postmaster@b;` / `helo=b;`). A MIME parser
ends the header block at the first line that is no field, so the rest of the header --
the report's own From, Subject and Received lines, an `Envelope-To:` -- is read as the
start of its body, and the addresses in it as the bounce's prose (Dada Mail's
`bouncing_email_with_brackets.eml`: `envelope-from=postmaster@...` and a `for x@y`
clause reported as failed recipients). A line that is no field, inside a block where a
field still follows before the blank line, can only be a continuation: it gets the
leading space it lost. A block where no field follows (a body that starts with no blank
line) is left as it was.
"""

from __future__ import annotations

import re

_FIELD = re.compile(rb"^[!-9;-~]+[ \t]*:")
_MBOX_FROM = re.compile(rb"^From ")
# the header block: up to the first empty line (LF or CRLF)
_END = re.compile(rb"\r?\n\r?\n")
MAX_HEADER = 256 * 1024  # past this the block is left alone: no report has a header so long


def mend_folding(raw: bytes) -> bytes:
    """`raw` with each flush-left non-field line of its header block that a field follows
    made a continuation line; unchanged when there is nothing to mend."""
    end = _END.search(raw, 0, MAX_HEADER)
    if end is None:
        return raw
    lines = raw[: end.start()].split(b"\n")
    if not lines or not (_FIELD.match(lines[0]) or _MBOX_FROM.match(lines[0])):
        return raw
    is_field = [bool(_FIELD.match(x)) for x in lines]
    last = max(i for i, f in enumerate(is_field) if f) if any(is_field) else 0
    broken = [
        i
        for i, x in enumerate(lines[:last])
        if i and not is_field[i] and x[:1] not in (b" ", b"\t") and x.strip()
    ]
    if not broken:
        return raw
    for i in broken:
        lines[i] = b" " + lines[i]
    return b"\n".join(lines) + raw[end.start() :]
