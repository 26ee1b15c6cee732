# Two commands (see README): `make demo` and `make test`. Each creates .venv and installs the
# package with its pinned TensorFlow / tf_keras on first use. `make test-fast`: the tests that
# start no cluster and take no seconds each (engine, policies, telemetry, config, codecs,
# layers, doctests), on both cores; 23-33 s here, by the host's load.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast bench-emulation wheel clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

# Stock PSS and the tf-hetero strategies on one heterogeneous local cluster: one table, one
# figure (runs/demo/compare.png). `tf-hetero demo --strategy hps` shows one strategy in detail.
demo: $(STAMP)
	$(BIN)/tf-hetero demo

# dist/tf_hetero-VERSION-py3-none-any.whl: upload it to Colab (the notebooks install it) or
# copy it next to examples/k8s/Dockerfile.
wheel: $(STAMP)
	@mkdir -p dist
	@$(BIN)/python -m pip wheel --no-deps --wheel-dir dist . > dist/wheel.log 2>&1 \
		|| { cat dist/wheel.log; exit 1; }
	@ls dist/tf_hetero-*.whl

# Tests write bytecode even where the environment says not to (PYTHONDONTWRITEBYTECODE=1 on
# the development machine): each xdist worker otherwise rewrote and compiled every test
# module's asserts at each run (~3.4 s of a collection), and every server process compiled
# the package again. make test-fast: 28.7-32.9 s -> 20.9-25.1 s once the caches exist.
PYTEST = PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest

# Every test, on both cores (pytest-xdist): the tests that run TensorFlow servers inside the
# test process (the shared in-process cluster, tests/conftest.py) all go to one worker, in
# order; every other module goes whole to whichever worker is free.
test: $(STAMP)
	$(PYTEST) -q -n 2 --dist loadgroup --durations=25

# The pure tests, whole modules to whichever worker is free, and every test that imports
# TensorFlow (marked `tensorflow`) on one of them: collection imports none (tests/support's
# LazyModule), so the other worker never pays TensorFlow's import.
test-fast: $(STAMP)
	$(PYTEST) -q -n 2 --dist loadgroup -m "not cluster and not slow"

bench-emulation: $(STAMP)
	$(BIN)/python benchmarks/emulation.py

clean:
	rm -rf $(VENV) runs .pytest_cache dist
