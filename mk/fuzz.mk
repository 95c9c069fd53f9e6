# `make fuzz`: 10,000 generated submissions to the local stack over HTTP (make test runs 300).
FUZZ_COUNT ?= 10000
FUZZ_SEED  ?= 14
# the suite's per-test timeout (300 s) is for make test's slice; 10,000 need longer
FUZZ_TIMEOUT ?= 5400

.PHONY: fuzz
fuzz: $(STAMP)  ## 10,000 generated submissions to the local stack (FUZZ_COUNT, FUZZ_SEED)
	@mkdir -p var
	FUZZ_COUNT=$(FUZZ_COUNT) FUZZ_SEED=$(FUZZ_SEED) FUZZ_REPORT=var/fuzz-report.json \
		$(PY) -m pytest -q -p no:cacheprovider -s --timeout=$(FUZZ_TIMEOUT) tests/fuzz
	@cat var/fuzz-report.json
