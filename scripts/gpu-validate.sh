#!/usr/bin/env bash
# Validate the course on a GPU machine that has torch and triton but no Jupyter and no network (see
# ../shared/gpu/README.md): carried wheels in .whl/ give nbval and a kernel.
#   scripts/gpu-validate.sh tests     every unit and lesson test, on the GPU
#   scripts/gpu-validate.sh notebooks every solution notebook top to bottom under nbval, compiled
#   scripts/gpu-validate.sh bench     make bench's driver: results/bench.{csv,md} and results/roofline.png
# TRITON_HARD_WAY_AS=7.5 (or 8.0) in the environment runs them as the course behaves on a T4 (or an A100).
# Logs and results go to $OUT when it is set (the device tool), else to build/gpu.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu}
mkdir -p "$out"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
mode=${TRITON_HARD_WAY_AS:+-as$TRITON_HARD_WAY_AS}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$out/gpu.txt"
python3 -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__)' | tee -a "$out/gpu.txt"
echo "TRITON_HARD_WAY_AS=${TRITON_HARD_WAY_AS:-} (unset: the GPU as it is)" | tee -a "$out/gpu.txt"
status=0
for what in "$@"; do
  case $what in
    tests) python3 -m pytest -q -p no:cacheprovider tests --ignore=tests/test_browser.py \
             --ignore=tests/test_participants.py 2>&1 | tee "$out/tests$mode.log" || status=1 ;;
    notebooks) python3 -m pytest -q -p no:cacheprovider --nbval-lax --nbval-current-env solutions 2>&1 \
             | tee "$out/notebooks$mode.log" || status=1 ;;
    bench) python3 -m bench --out "$out" 2>&1 | tee "$out/bench.log" || status=1 ;;
    *) echo "unknown step: $what (tests, notebooks, bench)"; exit 2 ;;
  esac
done
exit $status
