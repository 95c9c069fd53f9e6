"""A retry's trigger never comes back before its `next_attempt_at` (issue 25, finding 5).

`reschedule` re-arms the received trigger with ChangeMessageVisibility for the seconds
left until the next attempt. Rounded down, the trigger came back up to a second early:
its claim was refused as not due and the visibility changed once more. Against moto's
SQS in server mode (real visibility timers) under the limits guard.
"""

from __future__ import annotations

import time
from datetime import timedelta

from mailqueue.core.model import Claim, MailRef, Result, utcnow
from mailqueue.core.storage import ClaimRefused

from tests.support import factories as f
from tests.support.aws import AwsEnv

TEMP = Result(451, "4.7.1", "4.7.1 try again later", "mx.example.net")
# fractional delays: rounded down, each came back 0.3-0.8 s early
DELAYS = (1.3, 1.5, 1.8, 1.6)


def test_rescheduled_triggers_arrive_at_or_after_next_attempt(aws: AwsEnv) -> None:
    st = aws.storage()
    sqs = aws.clients.sqs
    url = aws.resources.delivery_queue_url
    mails = [st.enqueue(f.envelope(), f.content(512)) for _ in DELAYS]
    received: dict[str, str] = {}
    deadline = time.monotonic() + 10
    while len(received) < len(mails) and time.monotonic() < deadline:
        for m in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
            received[m["Body"]] = m["ReceiptHandle"]
    assert len(received) == len(mails)
    due_at: dict[str, float] = {}
    for m, delay in zip(mails, DELAYS, strict=True):
        ref = MailRef(m.mail_id, m.groups[0])
        handle = next(h for b, h in received.items() if m.mail_id in b)
        claim = st.send_start(ref, utcnow(), lease_seconds=60, receipt_handle=handle)
        assert isinstance(claim, Claim)
        # the policy counts the next attempt from the attempt's start, and the attempt
        # took a while (an SMTP dialogue): the time left is not a whole number of seconds
        nxt = claim.started_at + timedelta(seconds=delay)
        st.reschedule(claim, {"r0": TEMP}, nxt)
        due_at[m.mail_id] = nxt.timestamp()
    aws.counter.reset()
    early = refused = 0
    back: set[str] = set()
    deadline = time.monotonic() + 8
    while len(back) < len(mails) and time.monotonic() < deadline:
        resp = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        for msg in resp.get("Messages", []):
            now = utcnow()
            mail_id = next(k for k in due_at if k in msg["Body"])
            if now.timestamp() < due_at[mail_id]:
                early += 1
            got = st.send_start(
                MailRef(mail_id, next(m.groups[0] for m in mails if m.mail_id == mail_id)),
                now,
                lease_seconds=60,
                receipt_handle=msg["ReceiptHandle"],
            )
            if isinstance(got, ClaimRefused):
                assert got.reason == "not_due"
                refused += 1
                sqs.change_message_visibility(
                    QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"], VisibilityTimeout=1
                )
                continue
            back.add(mail_id)
    assert back == set(due_at), "every retry came back"
    assert early == 0, f"{early} trigger(s) came back before next_attempt_at"
    assert refused == 0, f"{refused} claim(s) refused as not due"
