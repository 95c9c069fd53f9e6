# AWS SAM: validate, build, deploy, delete (template.yaml). Included by the Makefile.
#
# aws-sam-cli pins boto3 exactly (boto3[crt]==1.43.x), which the project's .venv cannot
# share (boto3==1.44.5), so SAM lives in its own virtual environment, .venv-sam.
# `sam build` builds the python3.12 layers and functions with a python3.12 interpreter:
# pyenv's is put first on PATH when there is one. No Docker: never --use-container.

SAM_VENV    := .venv-sam
SAM         := $(SAM_VENV)/bin/sam
CFN_LINT    := $(SAM_VENV)/bin/cfn-lint
SAM_STAMP   := $(SAM_VENV)/.installed
SAM_PYTHON  ?= $(PYTHON)
SAM_PINS    := aws-sam-cli==1.170.0 cfn-lint==1.58.0 aws-sam-translator==1.115.0
STACK       ?= mailqueue
SAM_BUILD_DIR ?= .aws-sam/build
PY312_BIN   := $(lastword $(sort $(wildcard $(HOME)/.pyenv/versions/3.12*/bin)))
# offline and quiet: no telemetry; a region for the commands that want one
SAM_ENV     := SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=$${AWS_DEFAULT_REGION:-$${AWS_REGION:-us-east-1}}
BUILD_PATH  := $(if $(PY312_BIN),$(PY312_BIN):)$$PATH

.PHONY: sam-venv validate build deploy delete sam-sizes

$(SAM_STAMP): mk/sam.mk
	@test -x $(SAM_VENV)/bin/python || $(SAM_PYTHON) -m venv $(SAM_VENV) || python3 -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install -q --disable-pip-version-check --upgrade pip==25.3
	$(SAM_VENV)/bin/python -m pip install -q --disable-pip-version-check $(SAM_PINS)
	@touch $(SAM_STAMP)

sam-venv: $(SAM_STAMP)  ## AWS SAM and cfn-lint in their own .venv-sam

# Both are offline (no AWS call, no credentials): `sam validate --lint` checks the SAM
# transform and lints the result; cfn-lint also lints the SAM template itself.
validate: $(SAM_STAMP)  ## sam validate + cfn-lint on template.yaml
	$(SAM_ENV) $(SAM) validate --lint --template-file template.yaml
	$(SAM_ENV) $(CFN_LINT) template.yaml

build: $(SAM_STAMP)  ## sam build (python3.12 layers and functions, no Docker)
	@test -n "$(PY312_BIN)" || command -v python3.12 >/dev/null || \
		{ echo "sam build needs python3.12 (pyenv install 3.12)"; exit 1; }
	PATH="$(BUILD_PATH)" $(SAM_ENV) $(SAM) build --template-file template.yaml --parallel \
		--build-dir $(SAM_BUILD_DIR)

# The first deploy asks (stack name, region, parameters) and writes samconfig.toml; later
# ones read it. Needs AWS credentials.
deploy: build  ## sam deploy (needs AWS credentials; STACK=mailqueue)
	@if [ -f samconfig.toml ]; then \
		$(SAM_ENV) $(SAM) deploy; \
	else \
		$(SAM_ENV) $(SAM) deploy --guided --stack-name $(STACK) --capabilities CAPABILITY_IAM; \
	fi

# The bucket and the table are retained (DeletionPolicy: Retain): see docs/deploy.md.
delete: $(SAM_STAMP)  ## sam delete the stack (STACK=mailqueue)
	@if [ -f samconfig.toml ]; then $(SAM_ENV) $(SAM) delete; \
	else $(SAM_ENV) $(SAM) delete --stack-name $(STACK); fi

# Sizes of what `make build` produced (each function and layer, unpacked).
sam-sizes:  ## the built functions' and layers' sizes against Lambda's limits
	@du -sh $(SAM_BUILD_DIR)/*/ 2>/dev/null || echo "no $(SAM_BUILD_DIR): run make build"
