"""The local stack and test harness: moto in server mode, the local Lambda runtime, the
API gateway, stream pollers, the SMTP sink, the limit guard. Installed by `make venv`,
never part of the Lambda layer."""
