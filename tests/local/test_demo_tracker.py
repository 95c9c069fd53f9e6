"""Issue 28, item 3: the demo's transition lines — a solo mail's recipients counted from
its item, and no mail shown by a truncated id before its label (stream records that
arrive before the submission's 202 wait for it)."""

from __future__ import annotations

from typing import Any

from boto3.dynamodb.types import TypeSerializer
from mailqueue_local.demo import Tracker

MAIL = "01JDEMO0000000000000000001"
_ser = TypeSerializer()


def _record(event: str, sk: str, new: dict[str, Any]) -> dict[str, Any]:
    keys = {"pk": f"M#{MAIL}", "sk": sk}
    return {
        "eventName": event,
        "dynamodb": {
            "Keys": {k: _ser.serialize(v) for k, v in keys.items()},
            "NewImage": {k: _ser.serialize(v) for k, v in {**keys, **new}.items()},
        },
    }


SOLO_INSERT = _record(
    "INSERT",
    "G#example.net",
    {
        "sender": "demo@example.org",
        "body": b"x",
        "size": 321,
        "st": "queued",
        "next_at": "2026-11-27T19:00:00+00:00",
        "rcpts": {"r0": {"address": "alice@example.net", "state": "queued", "attempts": 0}},
    },
)


def test_a_solo_mail_counts_its_one_recipient() -> None:
    t = Tracker(labels={MAIL: "deliverable"})
    lines = t.lines(SOLO_INSERT)
    assert ("deliverable", f"stored: {MAIL}, 1 recipient(s), 321 octets") in lines


def test_a_mail_waits_for_its_label_before_it_is_shown() -> None:
    t = Tracker()
    assert t.feed([SOLO_INSERT], submitted=False) == []  # the 202 has not been read yet
    t.labels[MAIL] = "deliverable"
    lines = t.feed([], submitted=False)
    assert lines and all(label == "deliverable" for label, _ in lines)
    assert not any(MAIL[:10] == label for label, _ in lines)


def test_once_all_are_submitted_nothing_waits() -> None:
    t = Tracker()
    lines = t.feed([SOLO_INSERT], submitted=True)
    assert lines and lines[0][0] == MAIL[:10]
