# `make help` lists the targets. Everything runs inside .venv, created from the project's own files.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
TASK   ?= snli
CKPT   ?=
RUN    ?=
PORT   ?= 8000
ARGS   ?=

.DEFAULT_GOAL := help
.PHONY: help install lock demo train sweep evaluate predict visualize export report serve results results-render test test-slow docs docs-serve bench bench-quick lint format clean

help:  ## show this help
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-10s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

EXTRAS ?= dev,docs,hub,plots,formats,tensorboard,wandb,mlflow,export,sweep,serve,contextual,minilm,cluster,clients

$(VENV)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install --quiet -c constraints.txt torch
	$(BIN)/pip install --quiet -c constraints.txt -e ".[$(EXTRAS)]"
	touch $@

install: $(VENV)/.installed  ## create .venv and install the project with its extras, at the tested versions

lock: install  ## rewrite constraints.txt from the installed, tested set (after changing pyproject.toml)
	$(BIN)/pip freeze --exclude-editable | grep -v "^sentence-matching" > constraints.txt

demo: install  ## the first five minutes, offline: train softmax and CoDA on a shipped SNLI sample, compare, predict, plot
	$(BIN)/python -m matching.demo $(ARGS)

train: install  ## train one model: make train TASK=snli ARGS="aligner=coda seed=2"
	$(BIN)/python -m matching.train task=$(TASK) $(ARGS)

sweep: install  ## seed x aligner sweep, every aligner centred alike: make sweep TASK=scitail ARGS="paths.data_dir=..."
	$(BIN)/python -m matching.train -m task=$(TASK) aligner=softmax,coda,conflict aligner.center_tokens=true seed=1,2,3 $(ARGS)

evaluate: install  ## evaluate a checkpoint: make evaluate CKPT=outputs/runs/.../best.ckpt ARGS="split=test"
	$(BIN)/matching-evaluate ckpt=$(CKPT) $(ARGS)

predict: install  ## predict on new pairs: make predict CKPT=... ARGS="input=pairs.tsv output=out.jsonl"
	$(BIN)/matching-predict ckpt=$(CKPT) $(ARGS)

visualize: install  ## alignment heat-maps of a pair: make visualize CKPT=... ARGS='a="A man sleeps." b="A person rests."'
	$(BIN)/matching-visualize ckpt=$(CKPT) $(ARGS)

export: install  ## export for serving or sharing: make export CKPT=... ARGS="format=onnx" (torchscript, hub)
	$(BIN)/matching-export ckpt=$(CKPT) $(ARGS)

report: install  ## results table over a sweep: make report RUN=outputs/multirun/<time>
	$(BIN)/matching-report runs=$(RUN) $(ARGS)

STUDIES ?= centring

results: install  ## re-run the published studies (resumable, hours: ARGS="paths.data_dir=..."), then render the tables
	@for study in $(STUDIES); do \
	  $(BIN)/python -m matching.results.publish pull $$study && \
	  { $(BIN)/python -m matching.study study=$$study launcher=joblib jobs=2 threads=1 $(ARGS); status=$$?; \
	    $(BIN)/python -m matching.results.publish push $$study; \
	    [ $$status -eq 0 ] || echo "study $$study is not complete (status $$status): run make results again to go on"; }; \
	done
	$(BIN)/python -m matching.results.publish render

results-render: install  ## render the README's and docs/results/index.md's tables from docs/studies/ (no training)
	$(BIN)/python -m matching.results.publish render

serve: install  ## serve a run over HTTP, its page at /: make serve RUN=outputs/runs/<task>/<aligner>/<time> [PORT=8000] [ARGS="compare=[<run>]"]
	@test -n "$(RUN)" || { echo "make serve needs RUN=<run dir> (the folder with config.yaml and checkpoints/)"; exit 2; }
	$(BIN)/matching-serve ckpt=$(RUN)/checkpoints/best.ckpt port=$(PORT) $(ARGS)

test: install  ## run the default (fast) test suite, on a process per core (at most 4; a test file stays in one)
	$(BIN)/python -m pytest -q -n auto --maxprocesses 4 --dist loadfile

test-slow: install  ## run the slow tests too
	$(BIN)/python -m pytest -q -m "slow or not slow"

# The site's theme prints a notice about MkDocs 2 on every build; the build itself is what is checked.
DOCS_ENV = NO_MKDOCS_2_WARNING=1

docs: install  ## build the documentation site into site/, strict: a dead link or anchor, or a page out of the nav, fails
	$(DOCS_ENV) $(BIN)/mkdocs build --strict

docs-serve: install  ## serve the documentation site on localhost:8001, rebuilt on every change
	$(DOCS_ENV) $(BIN)/mkdocs serve --dev-addr localhost:8001

BENCH_TRAINER ?= cpu

bench: install  ## speed and memory benchmarks (prints figures, fp32 and bf16 side by side; ~35 min on 2 cores); BENCH_TRAINER=gpu on a GPU
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/bench_step.py --trainer $(BENCH_TRAINER)
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/bench_step.py --trainer $(BENCH_TRAINER) --decompose 5
	$(BIN)/python benchmarks/bench_training.py
	$(BIN)/python benchmarks/bench_data.py
	$(BIN)/python benchmarks/bench_vectors.py
	$(BIN)/python benchmarks/bench_long_inputs.py

bench-quick: install  ## a fast pass over the benchmarks (fewer steps, smaller files)
	OMP_NUM_THREADS=1 $(BIN)/python benchmarks/bench_step.py --trainer $(BENCH_TRAINER) --pairs 8000 --skip-real
	$(BIN)/python benchmarks/bench_training.py --quick
	$(BIN)/python benchmarks/bench_data.py --pairs 50000 --repeats 1
	$(BIN)/python benchmarks/bench_vectors.py --words 200000 --vocab 4000 --repeats 1

lint: install  ## ruff check and format check
	$(BIN)/ruff check matching tests benchmarks hydra_plugins
	$(BIN)/ruff format --check matching tests benchmarks hydra_plugins

format: install  ## apply ruff fixes and formatting
	$(BIN)/ruff check --fix matching tests benchmarks hydra_plugins
	$(BIN)/ruff format matching tests benchmarks hydra_plugins

clean:  ## remove caches (keeps data/ and outputs/)
	rm -rf .pytest_cache .ruff_cache **/__pycache__
