# `make fuzz`: 10,000 generated submissions to the local stack over HTTP (make test runs 300),
# and 10,000 generated requests over every admin route (tests/fuzz/test_fuzz_admin.py; make
# test runs 200 of the same seed) → var/admin-fuzz-report.json
FUZZ_COUNT ?= 10000
FUZZ_SEED  ?= 14
ADMIN_FUZZ_COUNT ?= 10000
ADMIN_FUZZ_SEED  ?= 43
# the suite's per-test timeout (300 s) is for make test's slice; 10,000 need longer
FUZZ_TIMEOUT ?= 5400

.PHONY: fuzz
fuzz: $(STAMP)  ## 10,000 generated submissions and 10,000 admin requests to the local stack (FUZZ_COUNT, ADMIN_FUZZ_COUNT)
	@mkdir -p var
	FUZZ_COUNT=$(FUZZ_COUNT) FUZZ_SEED=$(FUZZ_SEED) FUZZ_REPORT=var/fuzz-report.json \
		ADMIN_FUZZ_COUNT=$(ADMIN_FUZZ_COUNT) ADMIN_FUZZ_SEED=$(ADMIN_FUZZ_SEED) \
		ADMIN_FUZZ_REPORT=var/admin-fuzz-report.json \
		$(PY) -m pytest -q -p no:cacheprovider -s --timeout=$(FUZZ_TIMEOUT) tests/fuzz
	@cat var/fuzz-report.json var/admin-fuzz-report.json

# `make fuzz` also runs the SMTP session fuzz long (tests/fuzz/test_fuzz_smtp.py; make test
# runs 25 sessions): SMTP_FUZZ_COUNT sessions from seed SMTP_FUZZ_SEED → var/smtp-fuzz-report.json
SMTP_FUZZ_COUNT ?= 2000
SMTP_FUZZ_SEED  ?= 26
fuzz: fuzz-smtp
.PHONY: fuzz-smtp
fuzz-smtp: $(STAMP)  ## the seeded SMTP session fuzz against mailqueue smtpd (SMTP_FUZZ_COUNT)
	@mkdir -p var
	SMTP_FUZZ_COUNT=$(SMTP_FUZZ_COUNT) SMTP_FUZZ_SEED=$(SMTP_FUZZ_SEED) \
		SMTP_FUZZ_REPORT=var/smtp-fuzz-report.json \
		$(PY) -m pytest -q -p no:cacheprovider -s --timeout=$(FUZZ_TIMEOUT) tests/fuzz/test_fuzz_smtp.py
	@cat var/smtp-fuzz-report.json

# `make fuzz` also walks every crash and fault point of tests/crash (make test skips reads
# that repeat a request pair already covered: tests/crash/harness.injection_points)
fuzz: fuzz-crash
.PHONY: fuzz-crash
fuzz-crash: $(STAMP)  ## crash and fault injection at every AWS request of each path (CRASH_POINTS=all)
	CRASH_POINTS=all $(PY) -m pytest -q -p no:cacheprovider -s --timeout=$(FUZZ_TIMEOUT) tests/crash

# `make fuzz` also runs the pipeline's cross-check on fresh random seeds (make test runs one
# fixed seed): PIPELINE_FUZZ_RUNS data sets, each against the pure-Python reference.
PIPELINE_FUZZ_RUNS ?= 3
fuzz: fuzz-pipeline
.PHONY: fuzz-pipeline
fuzz-pipeline: $(STAMP)  ## the pipeline cross-check on PIPELINE_FUZZ_RUNS random seeds
	for i in $$(seq $(PIPELINE_FUZZ_RUNS)); do \
		MQ_PIPELINE_SEED=random $(PY) -m pytest -q -p no:cacheprovider tests/pipeline/test_pipeline_crosscheck.py || exit 1; \
	done
