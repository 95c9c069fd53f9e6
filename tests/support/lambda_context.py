"""A Lambda context for handler tests: the attributes Powertools reads."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LambdaContext:
    function_name: str = "mailqueue-ingress"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:mailqueue-ingress"
    aws_request_id: str = "52fdfc07-2182-454f-963f-5f0f9a621d72"
    function_version: str = "$LATEST"
    log_group_name: str = "/aws/lambda/mailqueue-ingress"
    log_stream_name: str = "2026/11/21/[$LATEST]0123456789abcdef"
    remaining_ms: int = 30_000

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms
