# One set-up path: `make setup` builds .venv with the torch/fbgemm/torchrec set for this machine (CPU or CUDA).
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup run demo test test-slow results clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml scripts/install.sh
	bash scripts/install.sh $(VENV)
	touch $@

# The main job on the embedded default (synthetic data, no download): train SASRec, print test metrics + baselines.
run: setup
	$(BIN)/genrec-train

# The flagship pipeline on the embedded default, one stage per line: data + model (genrec-train) -> evaluation
# (genrec-eval) -> export (genrec-export) -> parity check of the export (results/export_synthetic.json) -> a query
# served from the exported files alone; then semantic IDs (genrec-tokenize) -> a decoder-only generator over them
# (3 epochs) -> its evaluation -> its export (SID table + decoding settings).
DEMO_RUN ?= runs/demo
DEMO_TRAIN_ARGS ?=
demo: setup
	rm -rf $(DEMO_RUN) $(DEMO_RUN)-sid $(DEMO_RUN)-sid_gpt
	$(BIN)/python -m genrec.train hydra.run.dir=$(DEMO_RUN) $(DEMO_TRAIN_ARGS)
	$(BIN)/python -m genrec.evaluate run_dir=$(DEMO_RUN)
	$(BIN)/python -m genrec.export run_dir=$(DEMO_RUN)
	$(BIN)/python scripts/check_export.py $(DEMO_RUN)/export
	$(BIN)/python examples/retrieval_example.py $(DEMO_RUN)/export --history $$($(BIN)/python -c \
	    "import json; print(*json.load(open('$(DEMO_RUN)/export/item_ids.json'))[1:6])")
	$(BIN)/python -m genrec.tokenize hydra.run.dir=$(DEMO_RUN)-sid
	$(BIN)/python -m genrec.train model=sid_gpt sid_table=$(DEMO_RUN)-sid hydra.run.dir=$(DEMO_RUN)-sid_gpt \
	    trainer.max_epochs=3 $(DEMO_TRAIN_ARGS)
	$(BIN)/python -m genrec.evaluate run_dir=$(DEMO_RUN)-sid_gpt
	$(BIN)/python -m genrec.export run_dir=$(DEMO_RUN)-sid_gpt

# The default test suite (fast; slow tests are marked and run by `make test-slow`), on every core (pytest-xdist; a
# module's tests share one worker, so its module-scoped fixtures are built once).
test: setup
	$(BIN)/python -m pytest -q -m "not slow" -n auto --dist loadscope $(PYTEST_ARGS)

test-slow: setup
	$(BIN)/python -m pytest -q -m slow $(PYTEST_ARGS)

# Regenerate docs/results.md from results/*.json.
results: setup
	$(BIN)/python -m scripts.docs.make_results_doc

clean:
	rm -rf $(VENV) .cache runs outputs .pytest_cache
