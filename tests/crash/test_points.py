"""The crash and fault suites' slice of injection points (make test) against every point
(make fuzz): what the slice keeps and what it may leave out."""

from __future__ import annotations

import pytest

from tests.crash.harness import READ_ONLY, injection_points

# the shape of a real path: ingress writes, delivery's claim and reads, the result, then
# the sweeper's quiet pass of reads
PATH = [
    "dynamodb:PutItem", "dynamodb:BatchWriteItem", "sqs:SendMessageBatch",
    "dynamodb:UpdateItem", "dynamodb:Query", "dynamodb:GetItem", "dynamodb:UpdateItem",
    "dynamodb:Query", "dynamodb:BatchWriteItem",
    "dynamodb:Query", "dynamodb:Query", "dynamodb:Query", "s3:ListObjectsV2",
    "dynamodb:Query", "dynamodb:Query", "dynamodb:Query", "s3:ListObjectsV2",
]  # fmt: skip


def test_the_slice_keeps_every_write_and_the_read_after_it() -> None:
    points = injection_points(PATH, every=False)
    for k, req in enumerate(PATH, start=1):
        if req.split(":")[1] not in READ_ONLY:
            assert k in points, f"write {k} ({req}) left out"
            if k < len(PATH):
                assert k + 1 in points, f"the request after write {k} left out"
    assert len(PATH) in points, "the last request left out"


def test_the_slice_leaves_out_only_reads_that_repeat_a_pair_already_covered() -> None:
    points = injection_points(PATH, every=False)
    left = [k for k in range(1, len(PATH) + 1) if k not in points]
    # 10 follows a write, 11 is the first Query -> Query, 12 repeats it; 13 is the first
    # Query -> ListObjectsV2, 14 the first ListObjectsV2 -> Query, 15 and 16 repeat
    # Query -> Query, 17 is the last request
    assert left == [12, 15, 16]
    for k in left:
        assert PATH[k - 1].split(":")[1] in READ_ONLY
        assert PATH[k - 2].split(":")[1] in READ_ONLY
        assert (PATH[k - 2], PATH[k - 1]) in set(zip(PATH[: k - 2], PATH[1 : k - 1], strict=False))


def test_crash_points_all_walks_every_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRASH_POINTS", "all")
    assert injection_points(PATH) == list(range(1, len(PATH) + 1))
    monkeypatch.delenv("CRASH_POINTS")
    assert injection_points(PATH) == injection_points(PATH, every=False)
