"""Implementations of the storage protocol and the ports: AWS (S3 + DynamoDB + SQS and
the DynamoDB stores), a crash-safe filesystem queue, in-process queues and stores."""
