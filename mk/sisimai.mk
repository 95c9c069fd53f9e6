# Sisimai from Debian (libsisimai-perl), the reference the feedback parser is checked
# against (tests/feedback/test_sisimai.py), as mk/postfix.mk does for Postfix: `make test`
# installs the package when it can (root + apt-get); otherwise the test skips.
SISIMAI_PM := /usr/share/perl5/Sisimai.pm
# root with apt-get: the Sisimai test must run (a missing Sisimai fails it); else it skips
REQUIRE_SISIMAI := $(shell [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && echo 1)

.PHONY: sisimai
sisimai:  ## Debian's libsisimai-perl (the bounce-corpus agreement test), when root
	@if [ -f $(SISIMAI_PM) ]; then :; \
	elif [ "$(REQUIRE_SISIMAI)" = 1 ]; then \
	  echo "installing Debian's libsisimai-perl (reference for the bounce parser test)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq --no-install-recommends libsisimai-perl >/dev/null 2>&1 \
	    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends libsisimai-perl >/dev/null; }; \
	else echo "libsisimai-perl is not installed and this is not root with apt-get:" \
	  "tests/feedback/test_sisimai.py will be skipped"; fi
