#!/usr/bin/env bash
# temp driver for this session's device calls: run.sh STEP... where STEP is tests:SECS, nb:LESSONS:SECS, bench:NN:SECS, py:FILE:SECS
set -u
cd "$(dirname "$0")/.."
out=${OUT:-build/gpu}; mkdir -p "$out"
if [ ! -d /tmp/site/nbval ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=$PWD:/tmp/site${EXTRA_PATH:+:$EXTRA_PATH} PYTHONUNBUFFERED=1
if [ -n "${EXTRA_PATH:-}" ]; then export PYTHONPATH=$EXTRA_PATH:$PYTHONPATH; fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$out/gpu.txt"
python3 -c 'import torch, triton, transformers; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__)' | tee -a "$out/gpu.txt"
tag=${TAG:-}
for step in "$@"; do
  IFS=: read -r kind a b c <<<"$step"
  t0=$(date +%s)
  case $kind in
    tests) timeout "$a" python3 -m pytest -q -p no:cacheprovider -n 8 --tb=short -rfE --durations=20 ${b:+$b} tests \
             --ignore=tests/test_browser.py --ignore=tests/test_participants.py > "$out/tests$tag.log" 2>&1 ;;
    testsel) timeout "$b" python3 -m pytest -q -p no:cacheprovider -n 8 --tb=short -rfE $(for l in ${a//,/ }; do echo tests/test_$l.py; done) > "$out/testsel$tag-${a//,/_}.log" 2>&1 ;;
    nb) timeout "$b" python3 -m pytest -q -p no:cacheprovider -n 8 --dist loadfile --tb=short -rfE --nbval-lax --nbval-current-env \
             $(for l in ${a//,/ }; do ls solutions/${l}_*.ipynb; done) > "$out/nb$tag-${a//,/_}.log" 2>&1 ;;
    bench) mkdir -p "$out/bench$tag-$a"; timeout "$b" python3 -m bench --only ${a//,/ } --out "$out/bench$tag-$a" > "$out/bench$tag-$a/log.txt" 2>&1 ;;
    py) timeout "$b" python3 "$a" > "$out/$(basename "$a" .py)$tag.log" 2>&1 ;;
    cpbig) mkdir -p /tmp/big && cp .big$a/* /tmp/big/ && ls -la /tmp/big ;;
    install371) cat /tmp/big/part* > /tmp/big/triton-3.7.1-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl && rm /tmp/big/part* \
        && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site-big /tmp/big/triton-*.whl \
        && PYTHONPATH=/tmp/site-big:$PYTHONPATH python3 -c 'import triton; print("installed triton", triton.__version__)' ;;
  esac
  echo "$step: rc=$? in $(( $(date +%s) - t0 )) s" | tee -a "$out/steps.txt"
done
