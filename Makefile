# Two commands (see README): `make demo` and `make test`. Each creates .venv and installs the
# package with its pinned TensorFlow / tf_keras on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test bench-emulation clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tf-hetero demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

bench-emulation: $(STAMP)
	$(BIN)/python benchmarks/emulation.py

clean:
	rm -rf $(VENV) runs .pytest_cache
