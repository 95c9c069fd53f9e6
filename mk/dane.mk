# DNSSEC tools from Debian for the DANE tests (tests/dane): ldnsutils signs a test zone,
# nsd serves it, unbound validates it, all on loopback ports the tests choose and stop by
# PID. `make test` installs them when it can (root + apt-get); the system services are not
# started (policy-rc.d, or stopped: the tests never use port 53). Else the tests skip.
DANE_BINS := /usr/sbin/unbound /usr/sbin/nsd /usr/bin/ldns-signzone
REQUIRE_DANE_DNS := $(shell [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && echo 1)

.PHONY: dane-dns
dane-dns:  ## unbound, nsd, ldnsutils from Debian (the DANE signed-zone tests), when root
	@if ls $(DANE_BINS) >/dev/null 2>&1; then :; \
	elif [ "$(REQUIRE_DANE_DNS)" = 1 ]; then \
	  echo "installing Debian's unbound, nsd and ldnsutils (DNSSEC zone for the DANE tests)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq --no-install-recommends unbound nsd ldnsutils >/dev/null 2>&1 \
	    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends unbound nsd ldnsutils >/dev/null; }; \
	else echo "unbound/nsd/ldnsutils are not installed and this is not root with apt-get:" \
	  "tests/dane will be skipped"; fi
