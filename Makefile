# One set-up path: `make setup` builds .venv with the torch/fbgemm/torchrec set for this machine (CPU or CUDA).
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup run test test-slow results clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/install.sh
	bash scripts/install.sh $(VENV)
	touch $@

# The main job on the embedded default (synthetic data, no download): train SASRec, print test metrics + baselines.
run: setup
	$(BIN)/genrec-train

# The default test suite (fast; multi-process and slow tests are marked and run by `make test-slow`).
test: setup
	$(BIN)/python -m pytest -q -m "not slow" $(PYTEST_ARGS)

test-slow: setup
	$(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

# Regenerate docs/results.md from results/*.json.
results: setup
	$(BIN)/python scripts/make_results_doc.py

clean:
	rm -rf $(VENV) .cache runs outputs .pytest_cache
