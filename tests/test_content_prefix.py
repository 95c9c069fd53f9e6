"""Content objects under hashed prefixes (issue 25): S3 partitions request rates by key
prefix, and mail ids grow with time, so the content keys are spread over
`CONTENT_PREFIXES` prefixes instead of one (`content/<2 hex>/<mail_id>`).

Against moto under the limits guard; keys read back from the bucket.
"""

from __future__ import annotations

from datetime import timedelta

from mailqueue.backends.aws.items import CONTENT_PREFIXES
from mailqueue.core.model import utcnow

from tests.support import factories as f
from tests.support.aws import AwsEnv


def _keys(aws: AwsEnv) -> list[str]:
    got = aws.clients.s3.list_objects_v2(Bucket=aws.resources.bucket, Prefix="content/")
    return sorted(o["Key"] for o in got.get("Contents", []))


def test_content_keys_spread_over_hashed_prefixes(aws: AwsEnv) -> None:
    st = aws.storage(inline_content_max_bytes=0)  # every mail's content in S3
    ids = [st.enqueue(f.envelope(), f.content(200)).mail_id for _ in range(40)]
    keys = _keys(aws)
    assert keys == sorted(st.content_key(m) for m in ids)
    prefixes = {k.rsplit("/", 1)[0] for k in keys}
    # 40 ids over 256 prefixes: all but a few distinct (ULIDs of one millisecond share
    # their leading characters, which is what the hash undoes)
    assert len(prefixes) >= 30, prefixes
    assert all(len(p.split("/")) == 2 and len(p.split("/")[1]) == 2 for p in prefixes)
    assert CONTENT_PREFIXES == 256
    for m in ids:  # each reads back through the key its items name
        assert st.read_content(m).read() == f.content(200)


def test_an_orphan_under_the_old_flat_key_is_still_found_and_removed(aws: AwsEnv) -> None:
    """Content written before the hashed prefixes (`content/<id>`) with no state left: the
    orphan finder lists it and the cleanup removes it."""
    st = aws.storage()
    mail_id = "01J0000000000000000000OLD1"
    aws.clients.s3.put_object(Bucket=aws.resources.bucket, Key=f"content/{mail_id}", Body=b"x")
    found = [p.mail_id for p in st.find_orphans(utcnow() + timedelta(minutes=1))]
    assert found == [mail_id]
    assert st.content_exists(mail_id)  # there until cleaned (the flat key is looked at too)
    st.cleanup(mail_id)
    assert _keys(aws) == []
    assert not st.content_exists(mail_id)
