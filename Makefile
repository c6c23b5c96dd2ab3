# Two commands for a newcomer: `make demo` and `make test`. Both create .venv when missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# The CPU build of torch first, pinned: an unpinned torch would pull a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m bdeeponet.demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2

lint: $(STAMP)
	$(BIN)/ruff check .

# One question per script (see docs/speed.md); QUICK=1 for fewer rounds.
BENCH_FLAGS := $(if $(QUICK),--quick,)
bench: $(STAMP)
	$(BIN)/python benchmarks/bench_generate.py
	$(BIN)/python benchmarks/step_cost.py $(BENCH_FLAGS)
	$(BIN)/python benchmarks/chains_cost.py $(BENCH_FLAGS)
	$(BIN)/python benchmarks/mresgld_speedup.py $(BENCH_FLAGS)
	$(BIN)/python benchmarks/metric_cost.py $(BENCH_FLAGS)
	$(BIN)/python benchmarks/aligned_forward.py $(BENCH_FLAGS)
	$(BIN)/python benchmarks/resgld_scaling.py $(BENCH_FLAGS)
	$(BIN)/python benchmarks/step_profile.py

clean:
	rm -rf demo-output .pytest_cache
