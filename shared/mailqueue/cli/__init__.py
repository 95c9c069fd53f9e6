"""The `mailqueue` command line: one module per command family, `cli.common` for what
they share, `cli.main` to parse and dispatch (it imports the commands, never the reverse)."""
