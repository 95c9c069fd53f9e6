"""Transcribe Sympa's t/tools_bounce.t into ../expected.jsonl (run from anywhere).

The test holds two Perl hashes, %tests_rfc1891 (what parse_rfc1891_notification
returns per file) and %tests (what parse_notification returns): each maps a sample's
file name to undef or to { recipient => status or diagnostic }. They are read as
literals (the test is not run) and written unchanged, one line per file, in the
order the test lists them: {"file", "rfc1891", "notification"} (null for undef; a file
absent from one hash is written "absent" there, which no file is at this commit).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEST = HERE.parent / "t" / "tools_bounce.t"
OUT = HERE.parent / "expected.jsonl"

_STR = r"'((?:[^'\\]|\\.)*)'"
_ENTRY = re.compile(rf"\s*{_STR}\s*=>\s*(undef|\{{(.*?)\}})\s*,", re.S)
_PAIR = re.compile(rf"{_STR}\s*=>\s*{_STR}", re.S)


def _unquote(s: str) -> str:
    return re.sub(r"\\(.)", r"\1", s)


def read_hash(text: str, name: str) -> dict[str, dict[str, str] | None]:
    body = re.search(rf"my %{name} = \((.*?)\n\);", text, re.S)
    if body is None:
        raise SystemExit(f"no %{name} in {TEST}")
    out: dict[str, dict[str, str] | None] = {}
    pos = 0
    src = body.group(1)
    while True:
        m = _ENTRY.match(src, pos)
        if m is None:
            break
        pos = m.end()
        if m.group(2) == "undef":
            out[_unquote(m.group(1))] = None
        else:
            pairs = {_unquote(k): _unquote(v) for k, v in _PAIR.findall(m.group(3))}
            out[_unquote(m.group(1))] = pairs
    if src[pos:].strip():
        raise SystemExit(f"%{name}: could not read from: {src[pos : pos + 80]!r}")
    return out


def main() -> int:
    text = TEST.read_text(encoding="utf-8")
    rfc = read_hash(text, "tests_rfc1891")
    notif = read_hash(text, "tests")
    files = list(rfc) + [f for f in notif if f not in rfc]
    with OUT.open("w", encoding="utf-8") as fh:
        for f in files:
            line = {
                "file": f,
                "rfc1891": rfc[f] if f in rfc else "absent",
                "notification": notif[f] if f in notif else "absent",
            }
            fh.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"{len(files)} files ({len(rfc)} in %tests_rfc1891, {len(notif)} in %tests)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
