"""One request of a measured run as the scale model reads it (bench/model/trace.py)."""

from __future__ import annotations

from bench.model.trace import entry


def test_trace_entry_reads_the_key_condition_and_units() -> None:
    params = {
        "TableName": "x-state",
        "IndexName": "by_state",
        "KeyConditionExpression": "#s = :s AND due <= :d",
        "ExpressionAttributeNames": {"#s": "st"},
        "ExpressionAttributeValues": {":s": {"S": "queued"}, ":d": {"N": "5"}},
    }
    items = [{"pk": {"S": "a"}, "b": {"S": "x" * 5000}}]
    e = entry("sweeper", "dynamodb", "Query", params, {"Items": items}, 0.01)
    assert e["reads"][0]["attrs"] == {"st": "queued"}
    assert e["reads"][0]["ru"] == 1.0  # 5 KB eventually consistent: 2 x 0.5
