#!/usr/bin/env bash
# Everything a session with a GPU runs, in one command (a few minutes), its outputs
# under $OUT (default ./gpu-out): the CUDA tests, the checks against the GPU's own
# numbers, a measured device profile, and real training steps against their plans.
#
#     OUT=/tmp/gpu bash bench/gpu_session.sh                 # every step (about 12 min)
#     OUT=$OUT STEPS="tests check" bash bench/gpu_session.sh  # some of them
#
# Steps: tests (pytest -m cuda), check (bench/cuda_check.py), calibrate
# (bench/calibrate_profiles.py), steps (bench/plan_vs_step.py), serving
# (bench/serving_vs_decode.py: decode steps and a KV cache against plan_serving), matmuls
# (bench/matmul_grid.py: matmul times by shape against the matmul model). A device call is limited
# to 10 minutes: split the steps over two calls. Runs with the machine's own torch and
# the sources of this tree (PYTHONPATH=src); a step that fails does not stop the others.
set -u
OUT="${OUT:-./gpu-out}"
mkdir -p "$OUT"
export PYTHONPATH=src
python - > "$OUT/env.txt" 2>&1 <<'PY'
import torch, platform
print("torch", torch.__version__, "cuda", torch.version.cuda, "python", platform.python_version())
if torch.cuda.is_available():
    free, total = torch.cuda.mem_get_info()
    print(torch.cuda.get_device_name(), "mem_get_info total", total, "free", free)
try:
    import transformers
    print("transformers", transformers.__version__)
except ImportError:
    print("transformers: not installed")
PY
STEPS="${STEPS:-tests check calibrate steps serving matmuls}"
for step in $STEPS; do
  case "$step" in
    tests) timeout 200 python -m pytest -q -m cuda -p no:cacheprovider tests \
             > "$OUT/pytest_cuda.txt" 2>&1 ;;
    check) timeout 300 python bench/cuda_check.py --out "$OUT" > "$OUT/cuda_check.txt" 2>&1 ;;
    calibrate) timeout 300 python bench/calibrate_profiles.py --out "$OUT" \
                 > "$OUT/calibrate.txt" 2>&1 ;;
    steps) timeout 400 python bench/plan_vs_step.py --out "$OUT" > "$OUT/plan_vs_step.txt" 2>&1 ;;
    serving) timeout 300 python bench/serving_vs_decode.py --out "$OUT" \
               > "$OUT/serving_vs_decode.txt" 2>&1 ;;
    matmuls) timeout 200 python bench/matmul_grid.py --out "$OUT" > "$OUT/matmul_grid.txt" 2>&1 ;;
    *) echo "gpu_session: unknown step $step" >&2 ;;
  esac
done
tail -n 3 "$OUT"/*.txt
