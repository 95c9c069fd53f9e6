"""A mail whose groups finish at once is cleaned once (issue 40, deliverable 6).

Delivery runs a batch's records on lanes, so the groups of a three-domain mail often
finish together; each finisher reads the mail's items (strongly consistent, after its own
write) and, seeing all done, cleaned the mail: the bench's 3-domain run issued 88 item
deletes for 40 items. The deletes are counted with botocore hooks on moto in server mode.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from mailqueue.core.model import Claim, MailRef, Result, utcnow

from tests.support import factories as f
from tests.support.aws import AwsEnv

OK = Result(250, "2.0.0", "Ok", "mx.example.net")


class Deletes:
    """Per item key, the delete requests sent and the ones DynamoDB carried out."""

    def __init__(self, client: Any) -> None:
        self.sent: Counter[tuple[str, str]] = Counter()
        self.done: Counter[tuple[str, str]] = Counter()
        self.failed_conditions = 0
        self.lock = threading.Lock()
        client.meta.events.register("before-parameter-build.dynamodb.DeleteItem", self.before)
        client.meta.events.register("before-parameter-build.dynamodb.BatchWriteItem", self.before)
        client.meta.events.register("before-parameter-build.dynamodb.PutItem", self.before)
        client.meta.events.register("after-call.dynamodb.*", self.after)

    @staticmethod
    def _keys(model: Any, params: dict[str, Any]) -> list[tuple[str, str]]:
        if model.name == "DeleteItem":
            k = params["Key"]
            return [(k["pk"]["S"], k["sk"]["S"])]
        if model.name == "PutItem":  # a tombstone replacing a keyed mail's item
            it = params["Item"]
            return [(it["pk"]["S"], it["sk"]["S"])] if "tomb" in it else []
        out = []
        for reqs in params.get("RequestItems", {}).values():
            for r in reqs:
                if "DeleteRequest" in r:
                    k = r["DeleteRequest"]["Key"]
                    out.append((k["pk"]["S"], k["sk"]["S"]))
                elif "tomb" in r.get("PutRequest", {}).get("Item", {}):
                    it = r["PutRequest"]["Item"]
                    out.append((it["pk"]["S"], it["sk"]["S"]))
        return out

    def before(self, model: Any, params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        keys = self._keys(model, params)
        context["mq_deletes"] = keys
        with self.lock:
            self.sent.update(keys)

    def after(
        self,
        model: Any,
        http_response: Any,
        parsed: dict[str, Any],
        context: dict[str, Any],
        **_: Any,
    ) -> None:
        keys = context.get("mq_deletes") or []
        with self.lock:
            if http_response.status_code < 300:
                self.done.update(keys)
            elif parsed.get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                self.failed_conditions += 1


def _finish_together(aws: AwsEnv, keyed: bool) -> tuple[str, Deletes, list[Any]]:
    """A 3-domain mail whose three groups finish at once: each finisher's read of the
    mail waits until all three have written their result (a barrier before the Query),
    so each reads all of them done — the race of lanes finishing together."""
    st = aws.storage(inline_content_max_bytes=0)  # content in S3: the delete to count too
    env = f.envelope("a@x.example", "b@y.example", "c@z.example")
    q = st.enqueue(env, f.content(10 * 1024), idempotency_key="k-40" if keyed else None)
    claims = [st.send_start(MailRef(q.mail_id, g), utcnow(), lease_seconds=60) for g in q.groups]
    assert all(isinstance(c, Claim) for c in claims)
    barrier = threading.Barrier(3, timeout=20)

    def wait_for_all(**_: Any) -> None:
        barrier.wait()

    aws.clients.dynamodb.meta.events.register("before-call.dynamodb.Query", wait_for_all)
    deletes = Deletes(aws.clients.dynamodb)
    results: list[Any] = [None] * 3
    errors: list[BaseException] = []

    def finish(i: int) -> None:
        c = claims[i]
        assert isinstance(c, Claim)
        try:
            results[i] = st.send_done(c, [r.rid for r in c.group.recipients], OK)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=finish, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    aws.clients.dynamodb.meta.events.unregister("before-call.dynamodb.Query", wait_for_all)
    assert not errors, errors
    return q.mail_id, deletes, results


@pytest.mark.parametrize("keyed", [False, True], ids=["plain", "idempotency-key"])
def test_groups_finishing_together_delete_each_item_once(aws: AwsEnv, keyed: bool) -> None:
    mail_id, deletes, results = _finish_together(aws, keyed)
    # every finisher saw the mail finished; the mail is gone (a keyed one: its tombstone)
    assert all(t.mail_finished for t in results)
    left = aws.mail_items(mail_id)
    assert set(left) == ({"M"} if keyed else set())
    if keyed:
        assert left["M"].get("tomb") == {"BOOL": True}
    items = {
        (f"M#{mail_id}", "M"),
        *((f"M#{mail_id}", f"G#{g}") for g in ("x.example", "y.example", "z.example")),
    }
    assert set(deletes.done) == items
    # each item removed by one request: the old cleanup sent 3 x 4 (every finisher all)
    assert all(n == 1 for n in deletes.done.values()), deletes.done
    group_deletes = {k: n for k, n in deletes.sent.items() if k[1].startswith("G#")}
    assert all(n == 1 for n in group_deletes.values()), deletes.sent
    # the other two finishers stop at a failed conditional write on the mail item
    assert deletes.sent[(f"M#{mail_id}", "M")] == 1 + deletes.failed_conditions
    assert deletes.failed_conditions <= 2
    assert not aws.storage().content_exists(mail_id)


def test_a_cleaner_that_died_after_taking_the_mail_item_is_finished_by_the_sweeper(
    aws: AwsEnv,
) -> None:
    """The mail item is taken first; the groups stay `done` in the index, so the
    sweeper's find_pending_cleanup still finds the mail and removes what is left."""
    from datetime import timedelta

    st = aws.storage(inline_content_max_bytes=0)
    q = st.enqueue(f.envelope("a@x.example", "b@y.example"), f.content(10 * 1024))
    claims = [st.send_start(MailRef(q.mail_id, g), utcnow(), lease_seconds=60) for g in q.groups]
    first, second = claims
    assert isinstance(first, Claim) and isinstance(second, Claim)
    st.send_done(first, [r.rid for r in first.group.recipients], OK)

    def die(**_: Any) -> None:
        raise KeyboardInterrupt("the cleaner dies after taking the mail item")

    aws.clients.dynamodb.meta.events.register("before-call.dynamodb.BatchWriteItem", die)
    try:
        with pytest.raises(KeyboardInterrupt):
            st.send_done(second, [r.rid for r in second.group.recipients], OK)
    finally:
        aws.clients.dynamodb.meta.events.unregister("before-call.dynamodb.BatchWriteItem", die)
    left = aws.mail_items(q.mail_id)
    assert "M" not in left and left  # the mail item taken, a group left
    later = utcnow() + timedelta(hours=1)
    pending = [p.mail_id for p in st.find_pending_cleanup(later, orphans=False)]
    assert q.mail_id in pending
    assert st.cleanup(q.mail_id)
    assert aws.mail_items(q.mail_id) == {}
    assert not st.content_exists(q.mail_id)
