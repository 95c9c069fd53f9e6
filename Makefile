# Every target bootstraps what it needs: a newcomer types only `make run` or `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: help venv test run lint typecheck bench clean

# `make test` runs pytest on TEST_WORKERS processes (pytest-xdist), each test file whole on
# one worker (--dist loadfile: module fixtures are set up once); TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
TEST_XDIST := $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile,-p no:xdist)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip==25.3
	$(PY) -m pip install -q -e '.[dev,analytics]'
	@touch $(STAMP)

venv: $(STAMP)  ## create .venv with the project installed editable (every target does it first)

test: $(STAMP) postfix-peer swaks-client sslscan-client sisimai dane-dns  ## the test suite (installs Debian's postfix, swaks, sslscan, sisimai, the DNSSEC tools as root), then the pipeline on EMR's Spark
	MAILQUEUE_REQUIRE_POSTFIX=$(REQUIRE_POSTFIX) MAILQUEUE_REQUIRE_SISIMAI=$(REQUIRE_SISIMAI) $(PY) -m pytest -q -p no:cacheprovider --durations=30 $(TEST_XDIST)
	$(MAKE) --no-print-directory test-emr-spark

run: $(STAMP)  ## the whole queue on this machine (RUN_ARGS="--port 0 --fast-retries" ...)
	$(PY) -m mailqueue_local.run $(RUN_ARGS)

lint: $(STAMP)  ## ruff and mypy
	@echo "lint [1/2] ruff over shared functions tests pipeline"
	$(VENV)/bin/ruff check shared functions tests pipeline
	@echo "lint [2/2] mypy, strict, over the files pyproject.toml names: a minute on a quiet machine," \
		"several on a loaded one or without .mypy_cache (it prints nothing until it is done)"
	$(VENV)/bin/mypy

BENCH_MIX_MAILS ?= 20

typecheck: $(STAMP)  ## mypy alone (strict, the files pyproject.toml names)
	$(VENV)/bin/mypy

bench: $(STAMP)  ## request counts, cost per message, throughput -> docs/benchmarks.md
	$(PY) -m bench.run
	$(PY) -m bench.bounce_corpora
	$(PY) -m bench.shaping
	$(PY) -m bench.shaping --bursts 1,2,5 --mails 40 --rate 2 --concurrency 5
	$(PY) -m bench.mix $(BENCH_MIX_MAILS)
	$(PY) -m bench.dns
	$(PY) -m bench.browse
	$(MAKE) --no-print-directory bench-smtp
	$(PIPELINE_ENV) $(PY) -m bench.report_speed

clean:  ## remove .venv, var/ and the tool caches
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache

# Per-area targets (pipeline, sam, local stack) live in mk/*.mk.
-include mk/*.mk
