# The local stack (issue 9): `make run` (in the Makefile) and `make demo`, both on this
# machine only: moto in server mode, the real handlers, an SMTP sink on 127.0.0.1.
# See docs/local.md. Included by the Makefile, which defines PY and STAMP.
#
#   make run  RUN_ARGS="--fast-retries --port 0"      (the Makefile passes RUN_ARGS)
#   make demo                                         seven mails and their feedback, then stop
#   make bench-local BENCH_ARGS="--mails 500"         throughput on this machine

DEMO_ARGS  ?=
BENCH_ARGS ?=

.PHONY: demo bench-local

demo: $(STAMP)  ## seven mails and their feedback through a fresh local stack; log: var/demo/events
	$(PY) -m mailqueue_local.demo $(DEMO_ARGS)

bench-local: $(STAMP)  ## delivery throughput of the local stack (BENCH_ARGS="--mails 500")
	$(PY) -m mailqueue_local.bench $(BENCH_ARGS)

# SMTP front door vs HTTP API on the local stack (smtp-source from Debian's postfix):
#   make bench-smtp SMTP_BENCH_ARGS="--mails 2000"   → var/smtpbench/result.json
.PHONY: bench-smtp
bench-smtp: $(STAMP) postfix-peer  ## SMTP vs HTTP acceptance on the local stack (smtp-source)
	$(PY) -m mailqueue_local.smtpbench $(SMTP_BENCH_ARGS)
