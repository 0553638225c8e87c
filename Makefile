# The two commands (README): `make run RECIPE=fgself` and `make test` do all the
# set-up on a fresh machine: the virtual environment, the package with its C
# extension, and the C parts (shim, games) for Linux and, with mingw-w64, Windows.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
RECIPE ?= fgself
RUN ?=
ARGS ?=
TORCH ?= torch==2.13.0

.PHONY: setup build run test bench clean

# The venv, rebuilt when the packaging or the extension's source changes.
$(VENV)/.installed: pyproject.toml setup.py csrc/rows.c csrc/rowcopies.c csrc/shape_arg.h shim/w3s_table.h
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e '.[test,bench,env]'
	touch $@

setup: $(VENV)/.installed build

# Ray (the `cluster` extra), only where it is used: a recipe with a [cluster] section,
# the test suite and the benchmarks (docs/cluster.md).
$(VENV)/.cluster: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[cluster]'
	touch $@
# Stable-Baselines3 and sb3-contrib (the `examples` extra): examples/sb3_duel.py, which
# the test suite runs (tests/test_examples.py).
$(VENV)/.examples: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[examples]'
	touch $@

CLUSTER := $(shell grep -qs '^\[cluster\]' recipes/$(RECIPE).toml && echo $(VENV)/.cluster)

# The shim (and the null game), then every game folder with a Makefile: a new game's C
# side builds without an edit here (docs/games.md).
build:
	$(MAKE) -s -C shim BUILD=$(CURDIR)/build
	@for m in games/*/Makefile; do $(MAKE) -s -C $$(dirname $$m) BUILD=$(CURDIR)/build || exit 1; done

run: setup $(CLUSTER)
	$(PY) -m w3async run recipes/$(RECIPE).toml $(if $(RUN),--run $(RUN)) $(ARGS)

test: setup $(VENV)/.cluster $(VENV)/.examples
	$(PY) -m pytest -q $(TESTS)

# Each benchmark prints a table; docs/performance.md records what they measured.
BENCHES ?= step_sync env_bench inference_bench update_bench duel_bench status_bench fgself_bench soak inject_bench cluster_bench
bench: setup $(VENV)/.cluster
	@for b in $(BENCHES); do \
	  if [ -f bench/$$b.py ]; then echo "== bench/$$b.py"; $(PY) bench/$$b.py || exit 1; fi; \
	done
	@echo "== bench/step_sync.py --sandbox"; $(PY) bench/step_sync.py --sandbox
	@echo "== bench/step_sync.py --accounting"; $(PY) bench/step_sync.py --accounting

clean:
	rm -rf build $(VENV) w3async/sync/_rows*.so w3async/env/_rowcopies*.so
