"""The admin service's job store and job launcher on AWS: job items in the queue table,
slices run by asynchronous invocations of the admin function."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from mailqueue.backends.aws.clients import error_code, translate
from mailqueue.core.errors import NotFound
from mailqueue.core.model import from_iso, to_iso
from mailqueue.services.admin.jobs import CANCELLED, RUNNING, Job, _ms

__all__ = ["DynamoJobStore", "LambdaLauncher", "job_from_item", "job_to_item"]

_ser = TypeSerializer()
_deser = TypeDeserializer()


def job_to_item(self: Job, ttl_seconds: int) -> dict[str, Any]:
    """A job as its DynamoDB item (typed attribute values)."""
    doc: dict[str, Any] = {
        "pk": f"J#{self.job_id}",
        "sk": "J",
        "job_id": self.job_id,
        "action": self.action,
        "filter": json.dumps(self.filter, sort_keys=True),
        "all": self.all,
        "actor": self.actor,
        "job_state": self.state,
        "phase": self.phase,
        "created_at": to_iso(self.created_at),
        "updated_at": to_iso(self.updated_at),
        "finished_at": to_iso(self.finished_at),
        "cursor": json.dumps(self.cursor) if self.cursor is not None else None,
        "counts": dict(self.counts),
        "busy": json.dumps(self.busy, sort_keys=True),
        "estimate": self.estimate,
        "last_error": self.last_error,
        "lease_token": self.lease_token,
        "lease_ms": _ms(self.lease_until) if self.lease_until else None,
    }
    if self.finished_at is not None:
        doc["expires_at"] = int(self.finished_at.timestamp()) + ttl_seconds
    return {k: _ser.serialize(v) for k, v in doc.items() if v is not None}


def job_from_item(item: dict[str, Any]) -> Job:
    """The job a DynamoDB item holds."""
    d = {k: _deser.deserialize(v) for k, v in item.items()}
    created = from_iso(d["created_at"])
    assert created is not None
    lease_ms = d.get("lease_ms")
    return Job(
        job_id=str(d["job_id"]),
        action=str(d["action"]),
        filter=json.loads(d.get("filter") or "{}"),
        all=bool(d.get("all", False)),
        actor=str(d.get("actor", "")),
        created_at=created,
        state=str(d.get("job_state", RUNNING)),
        phase=str(d.get("phase", "scan")),
        updated_at=from_iso(d.get("updated_at")),
        finished_at=from_iso(d.get("finished_at")),
        cursor=json.loads(d["cursor"]) if d.get("cursor") else None,
        counts={str(k): int(v) for k, v in (d.get("counts") or {}).items()},
        busy={str(k): int(v) for k, v in json.loads(d.get("busy") or "{}").items()},
        estimate=int(d["estimate"]) if d.get("estimate") is not None else None,
        last_error=d.get("last_error"),
        lease_token=d.get("lease_token"),
        lease_until=(
            datetime.fromtimestamp(int(lease_ms) / 1000, tz=created.tzinfo)
            if lease_ms is not None
            else None
        ),
    )


class DynamoJobStore:
    """Job items in the queue table (DynamoDB adapter)."""

    def __init__(self, table: str, dynamodb: Any, *, ttl_seconds: int = 30 * 86400) -> None:
        self.table = table
        self.ddb = dynamodb
        self.ttl_seconds = ttl_seconds

    def _key(self, job_id: str) -> dict[str, Any]:
        return {"pk": {"S": f"J#{job_id}"}, "sk": {"S": "J"}}

    def create(self, job: Job) -> None:
        with translate("dynamodb:PutItem"):
            self.ddb.put_item(
                TableName=self.table,
                Item=job_to_item(job, self.ttl_seconds),
                ConditionExpression="attribute_not_exists(pk)",
            )

    def get(self, job_id: str) -> Job:
        with translate("dynamodb:GetItem"):
            resp = self.ddb.get_item(
                TableName=self.table, Key=self._key(job_id), ConsistentRead=True
            )
        if "Item" not in resp:
            raise NotFound(f"job {job_id}")
        return job_from_item(resp["Item"])

    def acquire(self, job_id: str, token: str, now: datetime, until: datetime) -> Job | None:
        """Take the job's lease if it is running and nobody holds a live lease."""
        with translate("dynamodb:UpdateItem"):
            try:
                resp = self.ddb.update_item(
                    TableName=self.table,
                    Key=self._key(job_id),
                    UpdateExpression="SET lease_token = :t, lease_ms = :until",
                    ConditionExpression=(
                        "job_state = :running AND "
                        "(attribute_not_exists(lease_ms) OR lease_ms <= :now)"
                    ),
                    ExpressionAttributeValues={
                        ":t": {"S": token},
                        ":until": {"N": str(_ms(until))},
                        ":now": {"N": str(_ms(now))},
                        ":running": {"S": RUNNING},
                    },
                    ReturnValues="ALL_NEW",
                )
            except ClientError as e:
                if error_code(e) == "ConditionalCheckFailedException":
                    return None
                raise
        return job_from_item(resp["Attributes"])

    def save(self, job: Job, token: str) -> bool:
        """Write progress under our lease; False if the lease is gone or the job cancelled."""
        with translate("dynamodb:PutItem"):
            try:
                self.ddb.put_item(
                    TableName=self.table,
                    Item=job_to_item(job, self.ttl_seconds),
                    ConditionExpression="lease_token = :t AND job_state = :running",
                    ExpressionAttributeValues={
                        ":t": {"S": token},
                        ":running": {"S": RUNNING},
                    },
                )
            except ClientError as e:
                if error_code(e) == "ConditionalCheckFailedException":
                    return False
                raise
        return True

    def cancel(self, job_id: str, now: datetime) -> Job:
        with translate("dynamodb:UpdateItem"):
            try:
                resp = self.ddb.update_item(
                    TableName=self.table,
                    Key=self._key(job_id),
                    UpdateExpression=(
                        "SET job_state = :c, finished_at = :now, updated_at = :now, "
                        "expires_at = :ttl"
                    ),
                    ConditionExpression="job_state = :running",
                    ExpressionAttributeValues={
                        ":running": {"S": RUNNING},
                        ":c": {"S": CANCELLED},
                        ":now": {"S": to_iso(now) or ""},
                        ":ttl": {"N": str(int(now.timestamp()) + self.ttl_seconds)},
                    },
                    ReturnValues="ALL_NEW",
                )
            except ClientError as e:
                if error_code(e) != "ConditionalCheckFailedException":
                    raise
                return self.get(job_id)  # finished already (or NotFound)
        return job_from_item(resp["Attributes"])


class LambdaLauncher:
    """Invokes the admin function asynchronously with a job event (needs
    lambda:InvokeFunction on itself); Lambda retries a failed async invocation twice, and
    a poll that finds the job's lease expired launches it again."""

    def __init__(self, lambda_client: Any, function_arn: str) -> None:
        self.client = lambda_client
        self.function_arn = function_arn

    def launch(self, job_id: str) -> None:
        with translate("lambda:Invoke"):
            self.client.invoke(
                FunctionName=self.function_arn,
                InvocationType="Event",
                Payload=json.dumps({"mailqueue": "run_job", "job_id": job_id}).encode(),
            )
