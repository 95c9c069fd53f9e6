# Postfix from Debian as a strict SMTP peer (tests/delivery/test_postfix_peer.py).
# `make test` installs the package when it can (root + apt-get); debconf is told "No
# configuration", so the system instance is neither configured nor started: the tests run
# their own private instance on 127.0.0.1 and stop it by its PID.
POSTFIX_BIN := /usr/sbin/postfix
# root with apt-get: the Postfix tests must run (a missing Postfix fails them); else they skip
REQUIRE_POSTFIX := $(shell [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && echo 1)

.PHONY: postfix-peer
postfix-peer:  ## install Debian's postfix for the strict-peer tests (root only)
	@if [ -x $(POSTFIX_BIN) ]; then :; \
	elif [ "$(REQUIRE_POSTFIX)" = 1 ]; then \
	  echo "installing Debian's postfix (strict SMTP peer for the delivery tests)"; \
	  echo "postfix postfix/main_mailer_type select No configuration" | debconf-set-selections; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq --no-install-recommends postfix >/dev/null 2>&1 \
	    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends postfix >/dev/null; }; \
	else echo "postfix is not installed and this is not root with apt-get:" \
	  "tests/delivery/test_postfix_peer.py will be skipped"; fi

# swaks (with Net::SSLeay for STARTTLS/AUTH) as an SMTP client of `mailqueue smtpd`
# (tests/smtpd/test_swaks.py; the README's example). Same rule: installed when root.
SWAKS_BIN := /usr/bin/swaks
.PHONY: swaks-client
swaks-client:  ## Debian's swaks and SASL modules (the SMTP front door tests), when root
	@if [ -x $(SWAKS_BIN) ] && perl -MNet::SSLeay -e1 2>/dev/null; then :; \
	elif [ "$(REQUIRE_POSTFIX)" = 1 ]; then \
	  echo "installing swaks (SMTP client for the smtpd tests)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq --no-install-recommends swaks libnet-ssleay-perl \
	    libio-socket-ssl-perl libauthen-sasl-perl libsasl2-modules >/dev/null 2>&1 \
	    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends swaks \
	      libnet-ssleay-perl libio-socket-ssl-perl libauthen-sasl-perl libsasl2-modules >/dev/null; }; \
	else echo "swaks is not installed and this is not root with apt-get:" \
	  "tests/smtpd/test_swaks.py will be skipped"; fi
