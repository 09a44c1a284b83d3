PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: demo test lint install install-test bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)

install: $(PY)
	$(PIP) install -q -c constraints.txt -e .

install-test: $(PY)
	$(PIP) install -q -c constraints.txt -e '.[test]'

demo: install
	$(PY) -m layerscope profile examples:tiny_resnet --input-shape 2,3,32,32

lint: install-test
	$(PY) -m ruff check src tests bench
	$(PY) -m ruff format --check src tests bench
	$(PY) -m mypy

test: install-test lint
	$(PY) -m pytest -q

bench: install-test
	$(PY) bench/bench_overhead.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
