"""The domain: mails, groups, recipients and their states, the storage protocol and the
ports the services stand on, retry policy, validation, DSN building, the event vocabulary.
Imports nothing else of the package, and no AWS SDK."""
