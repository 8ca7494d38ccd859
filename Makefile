# PowerTrip: `make demo` and `make test` are the two commands a newcomer needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_OUT ?= runs/demo
# the policies of the paper's Fig. 9, plus `all`
DEMO_POLICIES ?= powertrip,static,centralized-25,centralized-50,highest-power,random,radius,all

.PHONY: setup demo test reliability lint proto bench clean reproduce reproduce-all reproduce-summary

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install powertrip into it (no-op when up to date)

demo: setup  ## compare PowerTrip against the paper's baselines on FEMNIST, 100 sites
	$(BIN)/powertrip compare --config configs/demo.yaml --out $(DEMO_OUT) \
		--policies $(DEMO_POLICIES) --budget-factor 1.25

test: setup  ## the whole test suite
	$(BIN)/pytest -q

reliability: setup  ## load (1,000 sites) and 200-round soak; figures in runs/reliability/ (~3 min)
	POWERTRIP_RELIABILITY=1 $(BIN)/pytest -q -s -m load tests/reliability

# Flower's reference needs the bench extra: $(BIN)/pip install -e '.[bench]' (else it is skipped)
BENCH_ARGS ?=
bench: setup  ## speed figures as ratios against references measured in the same run (not part of test)
	$(BIN)/python bench/run.py $(BENCH_ARGS)

lint: setup
	$(BIN)/ruff check .

proto: setup  ## regenerate the committed stubs in powertrip/v1 from proto/
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=. --grpc_python_out=. --pyi_out=. proto/powertrip/v1/*.proto

clean:
	rm -rf $(VENV) runs .pytest_cache

REPRODUCE_OUT ?= runs/reproduce
REPRODUCE_FIGURE ?= 8,9,10
# empty: each target's own default (reproduce 3 seeds, reproduce-all 5)
REPRODUCE_SEEDS ?=

reproduce: setup  ## the paper's Figs. 8-10, which share their runs (or REPRODUCE_FIGURE=all) over REPRODUCE_SEEDS (3) seeds; resumable
	$(BIN)/powertrip reproduce --figure $(REPRODUCE_FIGURE) --seeds $(or $(REPRODUCE_SEEDS),3) --out $(REPRODUCE_OUT)

# every figure (6-14) and the ablation, resumable ('run i/N' with an ETA before each run),
# then every report.html and results/claims.md (copied even when a run failed)
reproduce-all: setup  ## all figures + ablation over REPRODUCE_SEEDS (5) seeds into REPRODUCE_OUT, then results/claims.md
	$(BIN)/powertrip reproduce --figure all --seeds $(or $(REPRODUCE_SEEDS),5) --out $(REPRODUCE_OUT) --summary results/claims.md

reproduce-summary: setup  ## re-render REPRODUCE_OUT's reports and copy its claims table to results/claims.md
	$(BIN)/powertrip reproduce --figure all --report-only --out $(REPRODUCE_OUT) --summary results/claims.md
