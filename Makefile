# layerlab — LayerRAG-Bench. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.lock pyproject.toml | cksum | cut -d' ' -f1)

# litellm must not reach the network or read a stray .env; plots are headless.
export LITELLM_LOCAL_MODEL_COST_MAP := True
export LITELLM_OFFLINE_MODE := true
export LITELLM_MODE := PRODUCTION
export MPLBACKEND := Agg
export PYTHONHASHSEED := 0

.DEFAULT_GOAL := help
.PHONY: help venv reproduce quick test lab archives lint bench coverage lock clean

help: ## Show this help.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "layerlab needs Python >= 3.11 (set PYTHON=...)")'
	rm -f $(VENV)/.installed-*
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

venv: $(STAMP) ## Create .venv from the hash-locked requirements (done by the targets below).

reproduce: $(STAMP) ## Regenerate the corpus and every table and figure (all notebooks), offline.
	$(BIN)/layerlab corpus build
	$(BIN)/layerlab reproduce

quick: $(STAMP) ## A fast reproduce (fewer bootstrap resamples) into out/quick, leaving the repo untouched.
	$(BIN)/layerlab reproduce --quick

NBVAL_ARTIFACTS := $(CURDIR)/out/nbval-artifacts

test: $(STAMP) ## Lint, unit tests, notebooks under nbval, and the freshness check of tables and figures.
	$(BIN)/ruff check layerlab tests
	$(BIN)/python -m pytest
	rm -rf $(NBVAL_ARTIFACTS)
	LAYERLAB_ARTIFACTS=$(NBVAL_ARTIFACTS) $(BIN)/python -m pytest --nbval --nbval-current-env -p no:cacheprovider notebooks/
	$(BIN)/layerlab reproduce --compare $(NBVAL_ARTIFACTS)

lab: $(STAMP) ## Open the notebooks in JupyterLab from the project environment.
	$(BIN)/jupyter lab notebooks/

archives: $(STAMP) ## Re-run the reference agents (live harness) and the LangChain study into data/archives/.
	rm -rf out/reference_agents
	$(BIN)/layerlab run live -m layerlab/extractive -m layerlab/cautious --out out/reference_agents --no-progress --concurrency 16
	mkdir -p data/archives/reference_agents
	cp out/reference_agents/records.parquet out/reference_agents/manifest.json data/archives/reference_agents/
	$(BIN)/layerlab study langchain --out data/archives/langchain_study
	cd data/archives && sha256sum */*.parquet */manifest.json > SHA256SUMS

lint: $(STAMP) ## ruff and mypy over the package.
	$(BIN)/ruff check layerlab tests
	$(BIN)/mypy

bench: $(STAMP) ## Benchmarks (ratios and medians, not timed unit tests); the bootstrap's ratio to the plain loop.
	$(BIN)/python -m layerlab.bench

coverage: $(STAMP) ## Full coverage suite of the intervals -> data/coverage/coverage.csv (minutes).
	$(BIN)/python -m layerlab.coverage --full --write

lock: ## Regenerate requirements.lock from pyproject.toml (needs uv).
	uv pip compile pyproject.toml --extra dev --extra study --generate-hashes --universal --python-version 3.11 -o requirements.lock

clean: ## Remove the virtual environment and caches.
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
