"""The composition roots: each handler's service built on the AWS adapters, from its
settings (the only place besides the CLI where services and backends meet)."""
