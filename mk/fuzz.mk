# `make fuzz`: 10,000 generated submissions to the local stack over HTTP (make test runs 300).
FUZZ_COUNT ?= 10000
FUZZ_SEED  ?= 14

.PHONY: fuzz
fuzz: $(STAMP)
	FUZZ_COUNT=$(FUZZ_COUNT) FUZZ_SEED=$(FUZZ_SEED) FUZZ_REPORT=var/fuzz-report.json \
		$(PY) -m pytest -q -p no:cacheprovider -s tests/fuzz
	@cat var/fuzz-report.json
