# `make help`: every target with its one line, from the `## ...` comment on the target's
# own line (Makefile and mk/*.mk). A new target gets a `## ...` too
# (tests/local/test_newcomer_hints.py checks every .PHONY target is listed).
# The report reads var/events; after `make demo` it says that the demo's log is
# var/demo/events and how to report that (mailqueue_local.eventlogs).

.PHONY: help report-events-note

help:  ## this list
	@awk -F':.*## ' '/^[A-Za-z0-9_.-]+:.*## / { printf "  %-18s  %s\n", $$1, $$2 }' \
		$(filter-out %.installed,$(MAKEFILE_LIST)) | sort

report: report-events-note
report-events-note: $(STAMP)  ## say which event log make report reads when make demo's is newer
	@$(PY) -m mailqueue_local.eventlogs $(EVENTS)
