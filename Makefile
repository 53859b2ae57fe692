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
.PHONY: help venv local local-server models reproduce quick test test-wheel test-slow lab paper archives checksums local-archives local-mitigations local-agent user-pipeline user-pipeline-sized user-dense local-replicates local-surface local-conversations reference-surface reference-conversations lint bench coverage lock clean

help: ## Show this help.
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{ n = split($$2, w, " "); \
	  line = sprintf("  make %-16s", $$1); \
	  for (i = 1; i <= n; i++) { if (length(line) + length(w[i]) >= 80) { print line; line = sprintf("%23s", "") } \
	    line = line " " w[i] } print line }'

$(STAMP): requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "layerlab needs Python >= 3.11 (set PYTHON=...)")'
	rm -f $(VENV)/.installed-*
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	touch $@

venv: $(STAMP) ## Create .venv from the hash-locked requirements (done by the targets below).

# The local model runtime, llama-cpp-python[server], is a source package: its sdist (sha256 in
# requirements-llama.lock) is compiled once into a wheel kept in the user cache, then installed
# with its server dependencies from the hash-locked requirements-local.lock (installed first: the
# check of a fresh build loads the runtime, which imports diskcache). The wheel folder is
# keyed by the build flags and, for a native build, by this CPU's instruction sets
# (layerlab/models/runtime.py), so a wheel made for another CPU is rebuilt, never loaded; its
# build.json (flags, the CPU features it needs) is checked before it is installed, and the
# install ends with one real completion (`layerlab models check`).
CACHE := $(or $(LAYERLAB_CACHE),$(if $(XDG_CACHE_HOME),$(XDG_CACHE_HOME)/layerlab,$(HOME)/.cache/layerlab))
LLAMA_VERSION := $(shell sed -n 's/^llama-cpp-python==\([^ ]*\).*/\1/p' requirements-llama.lock)
# for the CPU here, without llama.cpp's AMX kernels (they crash with a general-protection fault
# on CPUs that list AMX), and no multimodal helpers (the benchmark is text only). On a CPU where
# it fails, `make local LLAMA_CMAKE_ARGS='-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON
# -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON ...'` builds the portable one.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=ON -DCMAKE_C_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' -DCMAKE_CXX_FLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' -DLLAVA_BUILD=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
LLAMA_KEY := $(shell $(PYTHON) layerlab/models/runtime.py key "$(LLAMA_CMAKE_ARGS)")
LLAMA_WHEELS := $(CACHE)/wheels/$(shell $(PYTHON) -c 'import platform,sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}-{platform.machine()}")')-$(LLAMA_KEY)
LOCAL_STAMP := $(VENV)/.local-$(shell cat requirements-local.lock requirements-llama.lock | cksum | cut -d' ' -f1)-$(LLAMA_KEY)

$(LOCAL_STAMP): $(STAMP) requirements-local.lock requirements-llama.lock
	$(BIN)/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements-local.lock
	@if ! [ -e $(LLAMA_WHEELS)/build.json ] || ! ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1; then \
	  echo "building llama-cpp-python $(LLAMA_VERSION) once (compiles llama.cpp for this CPU: about 6.5 min on 2 idle cores; cached in $(LLAMA_WHEELS))"; \
	  echo "  LLAMA_CMAKE_ARGS=$(LLAMA_CMAKE_ARGS)"; \
	  rm -rf $(LLAMA_WHEELS).part; began=$$(date +%s); \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(BIN)/pip wheel --quiet --disable-pip-version-check \
	    --no-cache-dir --no-deps --require-hashes -r requirements-llama.lock -w $(LLAMA_WHEELS).part || exit $$?; \
	  $(BIN)/pip install --quiet --disable-pip-version-check --force-reinstall --no-deps --no-index \
	    --find-links $(LLAMA_WHEELS).part llama-cpp-python==$(LLAMA_VERSION) || exit $$?; \
	  $(BIN)/python layerlab/models/runtime.py record $(LLAMA_WHEELS).part "$(LLAMA_CMAKE_ARGS)" $$(( $$(date +%s) - began )) || exit $$?; \
	  rm -rf $(LLAMA_WHEELS); mv $(LLAMA_WHEELS).part $(LLAMA_WHEELS); fi
	$(BIN)/python layerlab/models/runtime.py verify $(LLAMA_WHEELS)/build.json
	$(BIN)/pip install --quiet --disable-pip-version-check --force-reinstall --no-deps --no-index --find-links $(LLAMA_WHEELS) llama-cpp-python==$(LLAMA_VERSION)
	cp $(LLAMA_WHEELS)/build.json $(VENV)/llama-build.json
	$(BIN)/layerlab models fetch smollm2-135m
	$(BIN)/layerlab models check smollm2-135m
	rm -f $(VENV)/.local-*
	touch $@

local: $(LOCAL_STAMP) ## Install the local model runtime (llama.cpp server; built once for this CPU, cached; ends with one real completion).

# llama.cpp's own server, opt-in (docs/local-models.md "Runtimes"): compiled from the llama.cpp
# source the same llama-cpp-python sdist vendors (sha256 from requirements-llama.lock), with the
# wheel's LLAMA_CMAKE_ARGS plus a static, offline server build, once, into a cache folder keyed
# like the wheel's; its build.json is checked against the CPU and it ends with one real completion.
# Runs use it with LAYERLAB_LOCAL_RUNTIME=llama-server. Never part of `make local` or `make test`.
LLAMA_SERVER_DIR := $(CACHE)/llama-server/$(LLAMA_VERSION)-$(shell uname -m)-$(LLAMA_KEY)
local-server: $(LOCAL_STAMP) ## Build llama.cpp's llama-server from the same vendored source (opt-in; cached; ends with one real completion).
	@if ! [ -e $(LLAMA_SERVER_DIR)/build.json ] || ! [ -x $(LLAMA_SERVER_DIR)/llama-server ]; then \
	  echo "building llama-server from llama-cpp-python $(LLAMA_VERSION)'s llama.cpp once (about 10 min on 2 cores; cached in $(LLAMA_SERVER_DIR))"; \
	  sdist=$$(mktemp -d); trap 'rm -rf "$$sdist"' EXIT; \
	  $(BIN)/pip download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
	    --require-hashes -r requirements-llama.lock -d $$sdist || exit $$?; \
	  $(BIN)/python layerlab/models/llamaserver.py build $$sdist/llama_cpp_python-$(LLAMA_VERSION).tar.gz \
	    $(LLAMA_SERVER_DIR) "$(LLAMA_CMAKE_ARGS)" || exit $$?; fi
	$(BIN)/python layerlab/models/llamaserver.py verify $(LLAMA_SERVER_DIR)/build.json
	LAYERLAB_LOCAL_RUNTIME=llama-server $(BIN)/layerlab models check smollm2-135m

models: $(LOCAL_STAMP) ## Install the runtime and fetch the registered local models into the user cache.
	$(BIN)/layerlab models fetch

reproduce: $(STAMP) ## Regenerate the corpus and every table and figure (all notebooks), offline.
	$(BIN)/layerlab corpus build
	$(BIN)/layerlab reproduce

quick: $(STAMP) ## A fast reproduce (fewer resamples, no live-matrix re-run, 2 notebooks at a time; ~70 s) into out/quick.
	$(BIN)/layerlab reproduce --quick --jobs 2

NBVAL_ARTIFACTS := $(CURDIR)/out/nbval-artifacts

test: $(LOCAL_STAMP) ## Lint, unit tests (with a real-model smoke test), notebooks under nbval, freshness of tables and figures.
	$(BIN)/ruff check layerlab tests
	$(BIN)/layerlab models fetch smollm2-135m
	LAYERLAB_REQUIRE_LOCAL=1 $(BIN)/python -m pytest -m "not slow and not wheel" -n auto --durations=15
	rm -rf $(NBVAL_ARTIFACTS)
	LAYERLAB_ARTIFACTS=$(NBVAL_ARTIFACTS) $(BIN)/python -m pytest --nbval --nbval-current-env -p no:cacheprovider -n auto --dist loadfile notebooks/
	LAYERLAB_ARTIFACTS=$(NBVAL_ARTIFACTS) $(BIN)/python -m layerlab.reporting.paper.papervalues
	$(BIN)/layerlab reproduce --compare $(NBVAL_ARTIFACTS)

test-wheel: $(STAMP) ## Build the wheel and install it outside the repository (tests/test_wheel.py; CI runs it after make test).
	$(BIN)/python -m pytest -m wheel --durations=5

# A Phoenix server for the slow OpenTelemetry test (a run exported to it and read back): its own
# venv from its own lock (arize-phoenix needs tenacity<9.2, requirements.lock pins 9.2.1; 1.4 GB)
PHOENIX_VENV := .venv-phoenix
PHOENIX_STAMP := $(PHOENIX_VENV)/.installed-$(shell cat requirements-phoenix.lock | cksum | cut -d' ' -f1)

$(PHOENIX_STAMP): requirements-phoenix.lock
	rm -f $(PHOENIX_VENV)/.installed-*
	$(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/pip install --quiet --disable-pip-version-check --require-hashes --no-deps -r requirements-phoenix.lock
	touch $@

test-slow: $(LOCAL_STAMP) $(PHOENIX_STAMP) ## The full-size tests that `make test` runs on smaller inputs, Qwen on a few records, a run exported to Phoenix (marker `slow`).
	$(BIN)/layerlab models fetch qwen2.5-coder-1.5b
	LAYERLAB_REQUIRE_LOCAL=1 LAYERLAB_PHOENIX_PYTHON=$(CURDIR)/$(PHOENIX_VENV)/bin/python $(BIN)/python -m pytest -m slow

lab: $(STAMP) ## Open the notebooks in JupyterLab from the project environment.
	$(BIN)/jupyter lab notebooks/

# TeX for `make paper`: `apt-get install --no-install-recommends texlive-latex-base
# texlive-latex-recommended texlive-fonts-recommended latexmk` (layerlab.reporting.paper.build's hint)
# brings 14 TeX packages on Debian 12: 8,920 files of 158 MB, plus 42 MB of formats and font maps
# written at install (/var/lib/texmf); apt counts them as 164 MB (dpkg Installed-Size). Measured
# with dpkg -L, du -cb and du -s /var/lib/texmf (issue 35 item 7).
paper: $(STAMP) ## Build paper/main.pdf from paper/main.tex and the generated tables and figures (needs TeX; see README).
	$(BIN)/python -m layerlab.reporting.paper.build

archives: $(STAMP) ## Re-run the reference agents (live harness), the mitigation matrix and the LangChain study into data/archives/.
	rm -rf out/reference_agents out/reference_agents.cache
	$(BIN)/layerlab run live -m layerlab/extractive -m layerlab/cautious --out out/reference_agents --cache-dir out/reference_agents.cache --no-progress --concurrency 16
	mkdir -p data/archives/reference_agents
	cp out/reference_agents/records.parquet out/reference_agents/manifest.json data/archives/reference_agents/
	$(BIN)/layerlab study langchain --out data/archives/langchain_study
	rm -rf data/archives/mitigations
	$(BIN)/layerlab mitigation run --out data/archives/mitigations
	$(MAKE) --no-print-directory checksums

checksums: ## Rewrite data/archives/SHA256SUMS over every committed archive and manifest.
	cd data/archives && sha256sum $$(find * \( -name '*.parquet' -o -name manifest.json \) | sort) > SHA256SUMS

# Real language models over one question variant of every policy unit (80 tasks x 9 scenarios x
# 2 contract arms = 1,440 records per model), greedy (temperature 0, the default for local/
# models; identical prompts share one reply): about 40 min for Qwen2.5-Coder-1.5B on 2 cores.
# Resumable: rerun to continue. A model's archive is copied into data/archives/local_models/
# only once its run is complete.
LOCAL_MODELS ?= qwen2.5-coder-1.5b
local-archives: $(LOCAL_STAMP) ## Run the real local models (hours; resumable) into data/archives/local_models/.
	@for m in $(LOCAL_MODELS); do \
	  resume=; [ -e out/local_models/$$m/manifest.json ] && resume=--resume; \
	  $(BIN)/layerlab run live -m local/$$m --tasks data/specs/local_model_tasks.txt --out out/local_models/$$m \
	    --response-format json_schema --no-progress $$resume || exit $$?; \
	  mkdir -p data/archives/local_models/$$m; \
	  cp out/local_models/$$m/records.parquet out/local_models/$$m/manifest.json out/local_models/$$m/results.json data/archives/local_models/$$m/; \
	done
	$(MAKE) --no-print-directory checksums

# The same model over every arm of the mitigation matrix on 40 stratified tasks of those 80
# (12 arms x 9 scenarios x 40 tasks = 4,320 records; greedy, so an arm whose prompt is unchanged
# reuses the reply: about 240 calls beyond local-archives'), and sampled epochs (temperature
# 0.7, 3 epochs, 40 tasks, clean/stale_index/schema_drift/wrong_session: about 840 calls).
MATRIX_ARMS = $(shell $(BIN)/python -c 'from layerlab.mitigations import load_mitigations as l; s = l(); print(" ".join("--mitigation " + a for a in (s.baseline, *s.matrix_arms)))' 2>/dev/null)
define local_run
	@for m in $(LOCAL_MODELS); do \
	  resume=; [ -e out/$(1)/$$m/manifest.json ] && resume=--resume; \
	  $(BIN)/layerlab run live -m local/$$m --tasks data/specs/local_model_tasks.txt --limit 40 --out out/$(1)/$$m \
	    --response-format json_schema --no-progress $$resume $(2) || exit $$?; \
	  mkdir -p data/archives/$(1)/$$m; \
	  cp out/$(1)/$$m/records.parquet out/$(1)/$$m/manifest.json out/$(1)/$$m/results.json data/archives/$(1)/$$m/; \
	  if [ -e out/$(1)/$$m/agent.parquet ]; then cp out/$(1)/$$m/agent.parquet data/archives/$(1)/$$m/; fi; \
	done
	$(MAKE) --no-print-directory checksums
endef
local-mitigations: $(LOCAL_STAMP) ## A real model over every mitigation arm (Table 10's real-model block; resumable).
	$(call local_run,local_model_mitigations,$(MATRIX_ARMS))
# The same model as an agent (layerlab run live --agent): it calls the faulted search and
# open_document tools itself, one JSON action per reply (json_action), up to 4 tool-calling turns,
# on the same 40 tasks, every scenario, strict and repair (720 records; about 1,000 model calls, the
# rest shared or cached: about 90 minutes on 2 cores; each record's steps stay on one server).
local-agent: $(LOCAL_STAMP) ## A real model as an agent calling the faulted tools (resumable).
	$(call local_run,local_model_agent,--agent --concurrency 2)
# The worked example of a user's own pipeline (notebook 13): a LangChain chain over BM25 and the
# local Qwen model behind an OpenAI-compatible server, run as a target on 16 stratified tasks,
# every scenario and every matrix arm (1,728 records; the chain memoises identical prompts).
user-pipeline: $(LOCAL_STAMP) ## A team's LangChain chain (BM25 + local model) as a target, every arm (resumable).
	@$(BIN)/layerlab models serve qwen2.5-coder-1.5b --port 8140 --threads 2 & pid=$$!; \
	  trap "kill $$pid" EXIT; \
	  for i in $$(seq 120); do curl -sf http://127.0.0.1:8140/v1/models >/dev/null && break; sleep 1; done; \
	  resume=; [ -e out/user_pipelines/my-rag-chain/manifest.json ] && resume=--resume; \
	  PYTHONPATH=notebooks $(BIN)/layerlab run live --target langchain:my_rag_chain:make_chain \
	    --target-name my-rag-chain --target-version 1.0 --target-setting base_url=http://127.0.0.1:8140/v1 \
	    --retriever bm25 --tasks data/specs/local_model_tasks.txt --limit 16 $(MATRIX_ARMS) \
	    --out out/user_pipelines/my-rag-chain --no-progress $$resume || exit $$?; \
	  mkdir -p data/archives/user_pipelines/my-rag-chain; \
	  cp out/user_pipelines/my-rag-chain/{records.parquet,manifest.json,results.json,target.parquet} data/archives/user_pipelines/my-rag-chain/
	$(MAKE) --no-print-directory checksums
# The same chain at the size its guard's verdict needs (issue 33): 48 stratified tasks, every
# scenario, the baseline and validity resolution (864 records; 23 min on 2 cores), whose
# clean-question change 16 tasks could not show (notebook 13: user_table10_sized).
user-pipeline-sized: $(LOCAL_STAMP) ## The user chain on 48 tasks, baseline and validity resolution (resumable).
	@$(BIN)/layerlab models serve qwen2.5-coder-1.5b --port 8140 --threads 2 & pid=$$!; \
	  trap "kill $$pid" EXIT; \
	  for i in $$(seq 120); do curl -sf http://127.0.0.1:8140/v1/models >/dev/null && break; sleep 1; done; \
	  resume=; [ -e out/user_pipelines/my-rag-chain-48/manifest.json ] && resume=--resume; \
	  PYTHONPATH=notebooks $(BIN)/layerlab run live --target langchain:my_rag_chain:make_chain \
	    --target-name my-rag-chain --target-version 1.0 --target-setting base_url=http://127.0.0.1:8140/v1 \
	    --retriever bm25 --tasks data/specs/local_model_tasks.txt --limit 48 \
	    --mitigation strict --mitigation validity_resolution \
	    --out out/user_pipelines/my-rag-chain-48 --no-progress $$resume || exit $$?; \
	  mkdir -p data/archives/user_pipelines/my-rag-chain-48; \
	  cp out/user_pipelines/my-rag-chain-48/{records.parquet,manifest.json,results.json,target.parquet} data/archives/user_pipelines/my-rag-chain-48/
	$(MAKE) --no-print-directory checksums
# tasks of the dense-store example: sized from the local model's measured speed on a shared 2-core
# machine (docs/dense.md); DENSE_TASKS=16 is a larger run (in a fresh DENSE_OUT folder)
DENSE_TASKS ?= 8
DENSE_OUT ?= out/user_pipelines/my-dense-chain
user-dense: $(LOCAL_STAMP) ## The same chain over a team's dense store (wordllama + Qdrant, --retriever python:), strict/repair (resumable).
	@$(BIN)/layerlab models serve qwen2.5-coder-1.5b --port 8150 --threads 2 & pid=$$!; \
	  trap "kill $$pid" EXIT; \
	  for i in $$(seq 120); do curl -sf http://127.0.0.1:8150/v1/models >/dev/null && break; sleep 1; done; \
	  resume=; [ -e $(DENSE_OUT)/manifest.json ] && resume=--resume; \
	  PYTHONPATH=notebooks $(BIN)/layerlab run live --target langchain:my_rag_chain:make_chain \
	    --target-name my-dense-chain --target-version 1.0 --target-setting base_url=http://127.0.0.1:8150/v1 \
	    --target-setting timeout=900 --retriever python:my_dense_store:DenseStore \
	    --tasks data/specs/local_model_tasks.txt --limit $(DENSE_TASKS) --mitigation strict --mitigation repair \
	    --concurrency 1 --out $(DENSE_OUT) --no-progress $$resume || exit $$?; \
	  mkdir -p data/archives/user_pipelines/my-dense-chain; \
	  cp $(DENSE_OUT)/{records.parquet,manifest.json,results.json,target.parquet} data/archives/user_pipelines/my-dense-chain/
	$(MAKE) --no-print-directory checksums
# A real model's reliability surface (issue 43): five layers (freshness, availability,
# completeness, session, and transport: scenarios_transport.yaml's persistent outage and transient
# 429) at five intensities, sampled (temperature 0.7), 4 epochs, on 16 stratified tasks, the
# baseline arm; identical prompts of one epoch share a reply (a task its fault did not strike asks
# what the clean scenario asks), so about 300 model calls; a struck transport call ends before
# the reader, so the transport rows add records but no model call.
SURFACE_TASKS ?= 16
SURFACE_OUT ?= out/local_model_surface/qwen2.5-coder-1.5b
local-surface: $(LOCAL_STAMP) ## A real model's reliability surface: 5 layers (transport too) x 5 intensities x 4 epochs (resumable).
	@resume=; [ -e $(SURFACE_OUT)/manifest.json ] && resume=--resume; \
	  $(BIN)/layerlab run live -m local/qwen2.5-coder-1.5b --tasks data/specs/local_model_tasks.txt \
	    --limit $(SURFACE_TASKS) --temperature 0.7 --epochs 4 --share-replies \
	    --scenarios data/specs/scenarios.yaml --scenarios data/specs/scenarios_transport.yaml \
	    --intensity 0,0.1,0.25,0.5,1 --scenario clean --scenario stale_index \
	    --scenario missing_tool_output --scenario partial_timeout --scenario wrong_session \
	    --scenario service_outage --scenario rate_limited \
	    --mitigation strict --response-format json_schema --out $(SURFACE_OUT) --no-progress $$resume || exit $$?; \
	  mkdir -p data/archives/local_model_surface/qwen2.5-coder-1.5b; \
	  cp $(SURFACE_OUT)/{records.parquet,manifest.json,results.json} data/archives/local_model_surface/qwen2.5-coder-1.5b/
	$(MAKE) --no-print-directory checksums
# A real model's conversations (issue 44): Qwen2.5-Coder-1.5B as a chat chain
# (layerlab.harness.convmodel), greedy, over the first 2 conversations of each domain (16) under
# every conversational scenario. Replies are cached (identical prompts share one): a rerun asks
# the model only for the turns it had not reached.
CONV_OUT ?= out/local_model_conversations/qwen2.5-coder-1.5b
local-conversations: $(LOCAL_STAMP) ## A real model's conversations: 16 conversations x 6 scenarios (replies cached).
	$(BIN)/layerlab run conversations -m local/qwen2.5-coder-1.5b --per-domain 2 --out $(CONV_OUT)
	$(BIN)/python -c 'from layerlab.archive import turnrecords as t; t.pack("$(CONV_OUT)", "data/archives/local_model_conversations/qwen2.5-coder-1.5b")'
	$(MAKE) --no-print-directory checksums
# The reference agents' reliability surface (notebook 15's default archive): the same four layers
# at five intensities on 40 stratified tasks, the baseline arm (1,680 records; about 20 s).
reference-surface: $(STAMP) ## The reference agents' reliability surface into data/archives/surface/reference/.
	rm -rf out/surface_reference out/surface_reference.cache
	$(BIN)/layerlab run live -m layerlab/extractive -m layerlab/cautious --limit 40 \
	  --intensity 0,0.1,0.25,0.5,1 --scenario clean --scenario stale_index \
	  --scenario missing_tool_output --scenario partial_timeout --scenario wrong_session \
	  --mitigation strict --out out/surface_reference --cache-dir out/surface_reference.cache --no-progress
	mkdir -p data/archives/surface/reference
	cp out/surface_reference/records.parquet out/surface_reference/manifest.json data/archives/surface/reference/
	$(MAKE) --no-print-directory checksums
# The conversational reference readers (notebook 16's default archive): every conversation (80,
# 353 turns) under every conversational scenario, one epoch, the baseline and each session
# mitigation (16,944 scored turns; about 30 s): Table 21 reads the baseline, Table A9 the matrix.
# The committed archive keeps the rows as turns.parquet (turns.jsonl is 10 MB) with the run's
# summary.json and manifest.json, whose checksum of turns.jsonl the rows still match.
reference-conversations: $(STAMP) ## The reference readers over the conversations into data/archives/conversations/reference/.
	rm -rf out/conversations_reference
	$(BIN)/layerlab run conversations -m layerlab/extractive -m layerlab/cautious --out out/conversations_reference \
	  --mitigation none --mitigation session_scoped_memory --mitigation update_invalidation --mitigation history_summarisation
	$(BIN)/python -c 'from layerlab.archive import turnrecords as t; t.pack("out/conversations_reference", "data/archives/conversations/reference")'
	$(MAKE) --no-print-directory checksums
local-replicates: $(LOCAL_STAMP) ## A real model, sampled, 3 epochs (within-task variability; resumable).
	$(call local_run,local_model_replicates,--temperature 0.7 --epochs 3 --scenario clean --scenario stale_index --scenario schema_drift --scenario wrong_session)

lint: $(STAMP) ## ruff and mypy over the package.
	$(BIN)/ruff check layerlab tests
	$(BIN)/mypy

bench: $(LOCAL_STAMP) local-server ## Benchmarks: every speed and memory goal measured, with pass/fail and the load average.
	$(BIN)/python -m tests.bench

coverage: $(STAMP) ## Full coverage suite of the intervals -> data/coverage/coverage.csv (minutes).
	$(BIN)/python -m layerlab.analysis.coverage --full --write

lock: ## Regenerate the hash-locked requirements files from pyproject.toml (needs uv).
	uv pip compile pyproject.toml --extra dev --extra notebooks --extra langchain --extra dense --extra mcp --extra agents --extra llamaindex --extra langgraph --extra inspect --extra otel --generate-hashes --universal --python-version 3.11 -o requirements.lock
	uv pip compile pyproject.toml --extra local -c requirements.lock --generate-hashes --universal --python-version 3.11 --no-emit-package llama-cpp-python -o requirements-local.lock
	uv pip compile pyproject.toml --extra local -c requirements.lock --generate-hashes --universal --python-version 3.11 --quiet \
	  | awk '/^llama-cpp-python==/{p=1; print; next} p && /^ +--hash/{print; next} {p=0}' > requirements-llama.lock
	uv pip compile pyproject.toml --extra phoenix --generate-hashes --universal --python-version 3.11 -o requirements-phoenix.lock

clean: ## Remove the virtual environment and caches.
	rm -rf $(VENV) $(PHOENIX_VENV) .pytest_cache .mypy_cache .ruff_cache
