# Every target bootstraps what it needs: a newcomer types only `make run` or `make test`.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: venv test run lint typecheck bench clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip==25.3
	$(PY) -m pip install -q -e '.[dev,analytics]'
	@touch $(STAMP)

venv: $(STAMP)

test: $(STAMP) postfix-peer
	MAILQUEUE_REQUIRE_POSTFIX=$(REQUIRE_POSTFIX) $(PY) -m pytest -q -p no:cacheprovider
	$(MAKE) --no-print-directory test-emr-spark

run: $(STAMP)
	$(PY) -m mailqueue_local.run $(RUN_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check shared functions tests pipeline
	$(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) -m bench.run
	$(PY) -m bench.shaping
	$(PIPELINE_ENV) $(PY) -m bench.report_speed

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache

# Per-area targets (pipeline, sam, local stack) live in mk/*.mk.
-include mk/*.mk
