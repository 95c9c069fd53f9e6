"""The DATA phase's lines → the mail's octets, with Postfix's rules for odd line endings.

What ends DATA is only <CR><LF>.<CR><LF> (RFC 5321 §4.1.1.4). With
``smtpd_forbid_bare_newline = normalize`` (Postfix 3.9's default, and what "yes" means
since) a line ending in a bare <LF> is taken as if it ended in <CR><LF>, but a "." line
next to a bare <LF> (<LF>.<LF>, <CR><LF>.<LF>, <LF>.<CR><LF>) does not end DATA: the
sequences of SMTP smuggling stay content. With "reject" a bare <LF> refuses the mail
and the server closes the session, as Postfix does.

A bare <CR> (one not followed by <LF>) refuses the mail in both modes. Postfix passes it
on; here it is refused, because delivery sends the stored octets as they are and a
receiver that takes <CR> as a line end could be made to see a second mail.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# RFC 5321 §4.5.3.1.6: 1000 octets with CRLF, plus the transparency dot
MAX_DATA_LINE = 1001


@dataclass
class DataReader:
    """Feed it the lines `readuntil(b"\\n")` returns (or the pieces of an overrun with
    `overrun=True`); `feed` says True at the end of DATA. Then `problem` is None and
    `content()` the mail, or `problem` says why the mail is refused."""

    max_size: int
    bare_newline: str = "normalize"
    size: int = 0
    problem: str | None = None  # too_large | line_too_long | bare_lf | bare_cr
    smuggling: bool = False  # a non-standard end of data was seen (and taken as content)
    _parts: list[bytes] = field(default_factory=list)
    _prev_bare: bool = False  # the previous line ended in a bare LF
    _continued: bool = False  # the next piece continues an overrun line
    _cr: bool = False  # the last overrun piece ended in CR

    def _refuse(self, why: str) -> None:
        if self.problem is None:
            self.problem = why
        self._parts.clear()

    def feed(self, line: bytes, *, overrun: bool = False) -> bool:
        if overrun or self._continued:
            # a piece of a line longer than the reader's limit: never the end of DATA
            self._continued = overrun
            self._refuse("line_too_long")
            self.size += len(line)
            if overrun:
                self._cr = line.endswith(b"\r")
            else:  # the last piece: its line ends in CRLF even when split between them
                self._prev_bare = not (line.endswith(b"\r\n") or line == b"\n" and self._cr)
            return False
        crlf = line.endswith(b"\r\n")
        body = line[:-2] if crlf else line[:-1]
        if body == b"." and crlf and not self._prev_bare:
            return True
        bare = not crlf
        if body == b"." and (bare or self._prev_bare):
            self.smuggling = True  # <LF>.<LF>, <CR><LF>.<LF> or <LF>.<CR><LF>: content
        if bare and self.bare_newline == "reject":
            self._refuse("bare_lf")
        self._prev_bare = bare
        self.size += len(line)
        if b"\r" in body:
            self._refuse("bare_cr")
        if len(line) > MAX_DATA_LINE + (0 if crlf else -1):
            self._refuse("line_too_long")
        if self.size > self.max_size:
            self._refuse("too_large")
        if self.problem is None:
            if body.startswith(b"."):
                body = body[1:] if len(body) > 1 else body
            self._parts.append(body + b"\r\n")
        return False

    def content(self) -> bytes:
        assert self.problem is None
        return b"".join(self._parts)
