# sslscan as an outside TLS scanner of `mailqueue smtpd` (tests/smtpd/test_sslscan.py,
# issue 43 items 3 and 4: its STARTTLS probe reads the EHLO reply in one read, and it
# lists the suites the server accepts). Installed when root, as postfix and swaks are.
SSLSCAN_BIN := /usr/bin/sslscan
.PHONY: sslscan-client
sslscan-client:  ## Debian's sslscan (the SMTP front door's TLS scan), when root
	@if [ -x $(SSLSCAN_BIN) ]; then :; \
	elif [ "$(REQUIRE_POSTFIX)" = 1 ]; then \
	  echo "installing sslscan (TLS scanner for the smtpd tests)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq --no-install-recommends sslscan >/dev/null 2>&1 \
	    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends sslscan >/dev/null; }; \
	else echo "sslscan is not installed and this is not root with apt-get:" \
	  "tests/smtpd/test_sslscan.py will be skipped"; fi
