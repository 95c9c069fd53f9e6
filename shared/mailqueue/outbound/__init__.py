"""Talking to the rest of the mail world: the SMTP client, routing (MX, relay, egress
guard), MTA-STS, DKIM signing, per-site shaping, suppression and suspensions, the DNS
checks of `mailqueue doctor`. Depends on core only; stores are protocols here."""
