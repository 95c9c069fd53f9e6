"""mailqueue: a crash-safe, serverless mail transfer agent queue (docs/architecture.md maps
the packages: core, outbound, services, backends, compose, cli)."""
