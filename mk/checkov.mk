# checkov (issue 43, item 10) in its own virtual environment, .venv-checkov: its
# dependencies (boto3, pydantic, ...) are pinned apart from the project's .venv.
# tests/template/test_checkov.py runs it on template.yaml with every Condition stripped,
# so the resources behind SmtpFrontDoor, EgressMode=direct, ... are checked too.

CHECKOV_VENV  := .venv-checkov
CHECKOV       := $(CHECKOV_VENV)/bin/checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
CHECKOV_PINS  := checkov==3.3.30

.PHONY: checkov-venv checkov

$(CHECKOV_STAMP): mk/checkov.mk
	@test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV) || python3 -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install -q --disable-pip-version-check --upgrade pip==25.3
	$(CHECKOV_VENV)/bin/python -m pip install -q --disable-pip-version-check $(CHECKOV_PINS)
	@touch $(CHECKOV_STAMP)

checkov-venv: $(CHECKOV_STAMP)  ## checkov in its own .venv-checkov (pinned)

checkov: $(STAMP) $(CHECKOV_STAMP)  ## checkov on template.yaml, conditions stripped, findings triaged
	$(PY) -m pytest -q -p no:cacheprovider -p no:xdist tests/template/test_checkov.py
