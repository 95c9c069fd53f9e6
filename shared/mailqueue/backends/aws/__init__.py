"""The AWS backend: S3 for content, DynamoDB for state, SQS for triggers."""
