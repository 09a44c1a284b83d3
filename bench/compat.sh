#!/usr/bin/env bash
# The test suite on another torch release, in a venv of its own (the test venv keeps the
# pinned torch of constraints.txt).
#
#   bash bench/compat.sh                      # torch 2.14.1 in .venv-torch2.14.1
#   TORCH=2.14.1 bash bench/compat.sh -x tests/test_flops.py
#
# The venv is made once and reused. Any arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH="${TORCH:-2.14.1}"
VENV="${VENV:-.venv-torch$TORCH}"
PYTHON="${PYTHON:-python3}"
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q "torch==$TORCH"
# the package and its test extras; the torch just installed satisfies their range
"$VENV/bin/python" -m pip install -q -e '.[test]'
"$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'
exec "$VENV/bin/python" -m pytest -q -p no:cacheprovider "$@"
