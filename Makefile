# Two commands (see README): `make demo` and `make test`. Each creates .venv and installs the
# package with its pinned TensorFlow / tf_keras on first use. `make test-fast`: the tests that
# start no cluster (engine, policies, telemetry, config, codecs; under a minute).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast bench-emulation clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tf-hetero demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not cluster"

bench-emulation: $(STAMP)
	$(BIN)/python benchmarks/emulation.py

clean:
	rm -rf $(VENV) runs .pytest_cache
